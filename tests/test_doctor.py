import subprocess
import sys

from grader.runtime import device, doctor

GOOD = {
    "torch": "2.13.0",
    "triton": "3.9.0",
    "numpy": "2.4.6",
    "ipywidgets": "8.1.9",
    "jupyterlab_widgets": "3.0.17",
}
CPU = device.Device(device.INTERPRETER, "CPU")
H100 = device.Device(device.GPU, "H100", (9, 0), 80 * 2**30)
T4 = device.Device(device.GPU, "T4", (7, 5), 16 * 2**30)


def problems(
    dev=CPU, versions=GOOD, cuda_visible=False, torch_cuda=None, triton_for_torch=None, env=None
):
    found = doctor.findings(
        dev,
        versions,
        cuda_visible=cuda_visible,
        torch_cuda=torch_cuda,
        triton_for_torch=triton_for_torch,
        env=env or {"TRITON_DEFAULT_FP_FUSION": "1"},
    )
    return [f.message for f in found if f.level == "problem"]


def test_good_combination_has_no_problems():
    assert problems() == []
    assert problems(H100, cuda_visible=True, torch_cuda="13.0", triton_for_torch="3.9.0") == []


def test_known_bad_combinations_are_found():
    assert any(
        "built against triton 3.6.0" in p
        for p in problems(H100, cuda_visible=True, triton_for_torch="3.6.0")
    )
    assert any(
        "older than the course supports" in p
        for p in problems(versions={**GOOD, "triton": "2.3.1"})
    )
    assert any("not installed" in p for p in problems(versions={**GOOD, "triton": None}))
    assert any("torch 2.2.2 is older" in p for p in problems(versions={**GOOD, "torch": "2.2.2"}))
    assert any(
        "jupyterlab_widgets 3.x" in p
        for p in problems(versions={**GOOD, "jupyterlab_widgets": "1.1.7"})
    )
    assert any(
        "TRITON_INTERPRET=1" in p
        for p in problems(H100, cuda_visible=True, env={"TRITON_INTERPRET": "1"})
    )
    assert any("older than sm_80" in p for p in problems(T4, cuda_visible=True))


def notes(dev=CPU, versions=GOOD):
    found = doctor.findings(
        dev,
        versions,
        cuda_visible=dev.is_gpu,
        torch_cuda=None,
        triton_for_torch=None,
        env={"TRITON_DEFAULT_FP_FUSION": "1"},
    )
    return [f.message for f in found if f.level == "note"]


def test_support_tells_tested_untested_and_unsupported_apart():
    assert doctor.support("triton", "3.6.0")[0] == "tested"
    assert doctor.support("triton", "3.9.1")[0] == "tested"
    assert doctor.support("triton", "3.7.1")[0] == "untested"
    assert doctor.support("triton", "3.10.0")[0] == "untested"
    assert doctor.support("triton", "3.1.0")[0] == "unsupported"
    assert doctor.support("triton", None)[0] == "missing"
    assert doctor.support("torch", "2.11.0+cu130")[0] == "tested"
    assert doctor.support("torch", "2.13.0+cpu")[0] == "tested"
    assert doctor.support("torch", "2.15.0")[0] == "untested"
    assert doctor.support("torch", "2.4.1")[0] == "unsupported"


def test_untested_is_a_note_and_unsupported_a_problem():
    newer = {**GOOD, "torch": "2.15.0", "triton": "3.10.0"}
    assert problems(versions=newer) == []
    found = notes(CPU, newer)
    assert any("torch 2.15.0 is supported (2.5 or newer) but untested" in n for n in found)
    assert any("triton 3.10.0 is supported" in n for n in found)
    assert not any("untested" in n for n in notes())
    assert any(
        "torch 2.4.1 is older than the course supports (2.5)" in p
        for p in problems(versions={**GOOD, "torch": "2.4.1"})
    )


def test_old_triton_interpreter_with_numpy_2_4_is_a_problem():
    bad = {**GOOD, "triton": "3.6.0", "numpy": "2.4.6"}
    assert any("Install numpy==2.3.5" in p for p in problems(versions=bad))
    # the compiled path is not affected, nor an older NumPy, nor Triton 3.7 (which fixed it)
    assert problems(H100, versions=bad, cuda_visible=True) == []
    assert problems(versions={**bad, "numpy": "2.3.5"}) == []
    assert problems(versions={**bad, "triton": "3.7.0"}) == []


def test_report_lists_versions_and_mode():
    text, _ = doctor.report()
    for word in (
        "python", "torch", "triton", "mode", "grades speed", "hardware counters",
        "known-bad combinations",
    ):  # fmt: skip
        assert word in text
    for word in ("torch support", "triton support"):
        assert word in text


def test_report_names_the_author_tools_only_where_installed(monkeypatch):
    real = doctor.version
    installed = {"jupytext"}  # as in the repository; the student kit installs none of them
    monkeypatch.setattr(
        doctor,
        "version",
        lambda p: real(p) if p not in doctor.AUTHOR_TOOLS or p in installed else None,
    )
    rows = dict(doctor.collect()[0])
    assert "nbgrader" not in rows and "papermill" not in rows
    assert rows["jupytext"] == real("jupytext")
    monkeypatch.setattr(doctor, "version", lambda p: None if p == "numpy" else real(p))
    assert dict(doctor.collect()[0])["numpy"] == "not installed"


def test_cli_doctor_runs():
    result = subprocess.run(
        [sys.executable, "-m", "grader", "doctor"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "triton" in result.stdout and "grades correctness  yes" in result.stdout


def test_the_counters_row_says_where_profiles_come_from(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from grader.runtime import profile

    assert doctor.counters(SimpleNamespace(is_gpu=False)).startswith("recorded profiles")
    gpu = SimpleNamespace(is_gpu=True)
    ncu = tmp_path / "ncu"
    ncu.write_text("#!/bin/sh\n")
    ncu.chmod(0o755)
    monkeypatch.setenv(profile.NCU_ENV, str(ncu))
    assert doctor.counters(gpu) == f"Nsight Compute, {ncu} (profile.canary() checks them)"
    monkeypatch.setenv(profile.NCU_ENV, str(tmp_path / "missing"))
    assert "no Nsight Compute (ncu)" in doctor.counters(gpu)
