"""The benchmark suite without a GPU: every script imports, the driver refuses to measure and says
why, the report renders from synthetic figures (JSON, goal table, plots), bench/trust.py counts
passes and failures right and covers every speed cell, and the notebook-cell loader finds what
it is asked for and refuses what does not exist."""

import ast
import importlib
import json
import math
import os
import platform
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bench import _notebook, _report, trust
from grader.authoring import build
from grader.runtime import device

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if p.stem != "__init__")
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_bench_module_imports_without_a_gpu(name):
    module = importlib.import_module(f"bench.{name}")
    if not name.startswith("_"):
        assert callable(module.main), f"bench/{name}.py runs on its own: it needs main()"


@pytest.fixture
def off_gpu():
    if device.current().supports("timing"):
        pytest.skip("this machine can measure")


@pytest.mark.parametrize(
    "name",
    [
        "report",
        "trust",
        "elementwise",
        "softmax",
        "ladder",
        "host",
        "hopper_gemm",
        "hopper_attention",
        "backward",
    ],
)
def test_scripts_refuse_to_measure_off_a_gpu(off_gpu, tmp_path, capsys, name):
    module = importlib.import_module(f"bench.{name}")
    argv = ["--out", str(tmp_path / "out")]
    assert module.main(argv) == 2
    err = capsys.readouterr().err
    assert "measures on a CUDA GPU" in err and "Nothing was measured" in err
    assert not (tmp_path / "out").exists(), "nothing may be written when nothing was measured"


def test_environment_names_the_machine_versions_and_commit():
    env = _report.environment()
    assert env["python"] == platform.python_version()
    assert env["torch"] == torch.__version__
    assert re.fullmatch(r"[0-9a-f]{40}( \(with uncommitted changes\))?", env["git commit"])
    assert env["device"] == device.current().describe()
    if not device.current().is_gpu:
        assert env["SMs"] == "not available"


def test_clocks_come_from_nvidia_smi_or_say_why_not(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$3" in\n'
        '  --query-gpu=power.limit) echo "Field is not a valid field to query." >&2; exit 2;;\n'
        '  *) echo "1980 MHz";;\n'
        "esac\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    found = _report.nvidia_smi()
    assert found["SM clock"] == "1980 MHz" and found["max memory clock"] == "1980 MHz"
    assert found["power limit"] == "not available (power.limit)"
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert set(_report.nvidia_smi().values()) == {"not available (no nvidia-smi)"}


# -- the report from synthetic figures ------------------------------------------------------


def synthetic_report() -> dict:
    env = {"device": "NVIDIA H100 80GB HBM3 (sm_90)", "SMs": "132", "SM clock": "1980 MHz"}
    report = _report.new_report(env, {"full": False})
    report["ceilings"] = {
        "bandwidth": 3.0e12,
        "flops": {"fp16": 700e12, "bf16": 720e12, "tf32": 370e12, "fp32": 52e12},
        "source": "measured on NVIDIA H100 80GB HBM3",
    }
    bandwidth = _report.Section("first_kernels", "02 · First kernels")
    bandwidth.rows.append(
        _report.Row("02 vector add", "64 Mi float32", "copy", 0.97, 2910.0, "GB/s", 0.277, 0.268)
    )
    bandwidth.goals.append(_report.Goal("02 vector add vs copy", 0.97, 0.95))
    bandwidth.goals.append(_report.Goal("03 softmax vs torch", 1.10, 1.15))
    bandwidth.goals.append(_report.Goal("copy timed twice", 0.004, 0.03, "%", False))
    bandwidth.goals.append(_report.Goal("02 fused vs copy", math.nan, 0.95))
    bandwidth.goals.append(_report.Goal("07 vs cuDNN at D=128", 0.81, None))
    bandwidth.points.append(_report.Point("02 add", 2**26, 3 * 2**28, 0.277e-3, "fp32"))
    bandwidth.points.append(_report.Point("05 autotuned", 2 * 8192**3, 3 * 8192**2 * 2, 1.7e-3))
    bandwidth.data["ladder"] = [
        {"label": "cuBLAS (8192)", "n": 8192, "tflops": 660.0, "ratio": None},
        {"label": "v1 blocked (8192)", "n": 8192, "tflops": 420.0, "ratio": 0.64},
    ]
    bandwidth.data["sweep"] = [
        {"n": n, "d": d, "causal": c, "yours": 300.0 + n / 100, "flash": 250.0, "cudnn": None}
        for n in (1024, 4096)
        for d in (64, 128)
        for c in (False, True)
    ]
    broken = _report.Section("softmax", "03 · Fused softmax", errors=["softmax: OutOfMemoryError"])
    report["sections"] = [bandwidth.record(), broken.record()]
    return report


def test_a_section_says_how_it_measured_and_the_driver_runs_host_time():
    from bench import host, report

    section = _report.Section("host", "Host time", note=host.METHOD)
    section.rows.append(_report.Row("05", "2048", "torch.mm", 1.0, 12.0, "us host/call"))
    lines = _report.section_markdown(section.record())
    assert lines[0] == host.METHOD and "pending" in host.METHOD
    assert "| 05 | 2048 | 12.0 us host/call | torch.mm | 1.000x |" in "\n".join(lines)
    assert report.SECTIONS["host"] and "host" in report.parse(["--only", "host"]).only
    goal = _report.Goal("05 host time", 12.5, host.MATMUL_HOST_US, " us", False)
    assert goal.verdict == "pass" and _report.Goal("x", 30.0, 25.0, " us", False).verdict == "miss"


def test_goal_verdicts_and_margins():
    passed = _report.Goal("a", 0.97, 0.95).record()
    assert passed["verdict"] == "pass"
    assert passed["margin"] == pytest.approx(0.02) and passed["relative"] == pytest.approx(
        0.02 / 0.95
    )
    missed = _report.Goal("b", 1.10, 1.15).record()
    assert missed["verdict"] == "miss" and missed["margin"] == pytest.approx(-0.05)
    assert _report.Goal("c", 0.004, 0.03, "%", False).record()["margin"] == pytest.approx(0.026)
    assert _report.Goal("d", 0.031, 0.03, "%", False).verdict == "miss"
    assert _report.Goal("e", math.nan, 0.95).record()["measured"] is None  # JSON has no NaN
    assert _report.Goal("e", math.nan, 0.95).verdict == "not measured"
    assert _report.Goal("f", 0.8, None).verdict == "reported"


def test_report_renders_json_markdown_and_plots(tmp_path):
    report = synthetic_report()
    _report.write(report, tmp_path)
    saved = json.loads((tmp_path / "report.json").read_text())  # strict JSON: no NaN
    assert saved["schema"] == _report.SCHEMA
    assert saved["environment"]["SMs"] == "132"
    goals = {g["name"]: g for g in _report.goals(saved)}
    assert goals["02 vector add vs copy"]["verdict"] == "pass"
    assert goals["03 softmax vs torch"]["verdict"] == "miss"
    assert goals["02 fused vs copy"]["measured"] is None
    assert saved["sections"][1]["errors"] == ["softmax: OutOfMemoryError"]

    text = (tmp_path / "report.md").read_text()
    assert "| goal | measured | target | verdict | section | detail |" in text
    assert "| 02 vector add vs copy | 0.970x | >= 0.950x | **pass** by 0.020x (2.1%) |" in text
    assert "| 03 softmax vs torch | 1.100x | >= 1.150x | **miss** by 0.050x (4.3%) |" in text
    assert "| copy timed twice | 0.4% | < 3% | **pass** by 2.6% |" in text
    assert "| 02 fused vs copy | n/a | >= 0.950x | not measured |" in text
    assert "| none (reported) | reported |" in text
    assert "2 passed, 1 missed." in text
    assert "- softmax: OutOfMemoryError" in text
    assert "| 02 vector add | 64 Mi float32 | 2910 GB/s | copy | 0.970x |" in text
    assert "Ceilings (measured on NVIDIA H100 80GB HBM3): copy 3.00 TB/s" in text
    assert "Not run: `python bench/trust.py" in text

    for name, filename in _report.PLOTS.items():
        assert saved["plots"][name] == filename
        assert (tmp_path / filename).read_bytes()[:8] == PNG
        assert f"![{name}]({filename})" in text


def test_a_plot_without_data_is_reported_not_drawn(tmp_path):
    report = _report.new_report({}, {})
    drawn = _report.draw(report, tmp_path)
    assert all(v.startswith("not drawn: ValueError") for v in drawn.values()), drawn
    assert not list(tmp_path.glob("*.png"))


def test_section_attempt_keeps_the_error_and_goes_on(capsys):
    section = _report.Section("x", "X")
    goal = section.goal("never measured", 1.0)

    def fails():
        raise RuntimeError("CUDA error: an illegal memory access\nmore")

    assert section.attempt("first", fails) is None
    assert section.attempt("second", lambda: 42) == 42
    assert section.errors == ["first: RuntimeError: CUDA error: an illegal memory access"]
    assert goal.verdict == "not measured" and section.record()["goals"][0]["measured"] is None
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.gpu
def test_driver_measures_and_writes_the_report(tmp_path):
    from bench import report

    assert report.main(["--only", "elementwise", "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "report.json").read_text())
    verdicts = [g["verdict"] for g in _report.goals(saved)]
    assert len(verdicts) == 2 and set(verdicts) <= {"pass", "miss"}, verdicts
    assert saved["environment"]["SMs"].isdigit()
    assert (tmp_path / "roofline.png").read_bytes()[:8] == PNG


# -- bench/trust.py -------------------------------------------------------------------------


def record(cell, variant, run, score, ratios=(), status="ok", points=1.0, notebook="07"):
    return {
        "notebook": notebook,
        "cell": cell,
        "variant": variant,
        "run": run,
        "points": points,
        "score": score,
        "ratios": [{"measured": m, "needed": n} for m, n in ratios],
        "status": status,
    }


def test_trust_summary_counts_passes_and_failures():
    records = [record("speed-a", "reference", i, 3.0, [(1.3, 0.8)], points=3.0) for i in range(9)]
    records.append(record("speed-a", "reference", 9, 0.0, [(0.75, 0.8)], points=3.0))
    records += [record("speed-a", "16 x 16 tiles", i, 0.0, [(0.3, 0.8)]) for i in range(10)]
    records += [record("speed-b", "reference", i, 1.0, [(0.99, 0.8)]) for i in range(2)]
    records.append(record("speed-b", "reference", 2, None, status="error"))
    by = {(s["cell"], s["variant"]): s for s in trust.summarize(records)}
    a = by["speed-a", "reference"]
    assert (a["runs"], a["passed"], a["failed"], a["errors"], a["ok"]) == (10, 9, 1, 0, False)
    assert a["lowest"] == pytest.approx(0.75 / 0.8) and a["highest"] == pytest.approx(1.3 / 0.8)
    slow = by["speed-a", "16 x 16 tiles"]
    assert (slow["failed"], slow["ok"], slow["expected"]) == (10, True, "0 every run")
    b = by["speed-b", "reference"]
    assert (b["runs"], b["passed"], b["errors"], b["ok"]) == (3, 2, 1, False)


def test_trust_reads_scores_and_ratios_from_the_published_records():
    from grader.runtime import perf

    verdicts = [
        perf.Verdict("eager PyTorch, 3 kernels", 3.03, 2.0),
        perf.Verdict("copy bandwidth", 79.0, 80.0, "%"),
        perf.Verdict("D=64, non-causal vs SDPA flash", 1.33, 0.8),
        perf.Verdict("eager", None, 2.0, flags=("output wrong",)),  # stopped: no figure
    ]
    printed = ["fused kernel: 100.0 us\nspeedup 3.03x\n"]
    for v in verdicts:  # as tests/notebook_session.Session.run collects a display
        printed += [v.record(), v.line()]
    printed += ["PASS 9.9x eager (needs 2x): 1 of 1 points\n", "1.0"]  # printed, not published
    score, ratios, text = trust.parse_output(printed)
    assert score == 1.0 and "speedup 3.03x" in text and "9.9x" in text
    pairs = [(r["measured"], r["needed"]) for r in ratios]
    assert pairs == [(3.03, 2.0), (0.79, 0.8), (1.33, 0.8)]
    assert trust.parse_output(["Speed is graded on an NVIDIA GPU\n"]) == (
        None,
        [],
        "Speed is graded on an NVIDIA GPU\n",
    )


def test_trust_file_keeps_every_run_and_reports_the_latest(tmp_path):
    path = tmp_path / "trust.json"
    first = {
        "notebook": "02_first_kernels",
        "started": "1",
        "records": [record("speed-x", "reference", 1, 0.0, notebook="02")],
        "seconds": 5.0,
        "estimate": {"seconds": 70.0},
        "errors": [],
        "complete": False,
    }
    trust.save(path, first)
    trust.save(path, first | {"seconds": 9.0})  # the same run, further on: replaced
    second = first | {
        "started": "2",
        "records": [record("speed-x", "reference", 1, 1.0, notebook="02")],
    }
    trust.save(path, second | {"complete": True})
    assert [e["started"] for e in json.loads(path.read_text())["notebooks"]] == ["1", "2"]
    latest = trust.latest(path)
    assert latest["summary"][0]["passed"] == 1 and latest["complete"] == {"02_first_kernels": True}
    text = "\n".join(_report.trust_markdown(latest))
    assert "| 02 | speed-x | reference | 1 | 1 | 0 | 0 |" in text
    assert "**ok**" in text and "- 02_first_kernels: 5 s (estimated 70 s)" in text


def test_timed_calls_follow_functions_and_literal_loops():
    source = """
def case(d):
    perf.compare(lambda: 1, lambda: 2)
    checks.compare(x, y)  # a correctness check times nothing


def cell():
    for d in (64, 128):
        for causal in (False, True):
            case(d)
    for name in names:
        perf.grade(a, points=1)
"""
    tree = ast.parse(source)
    functions = {f.name: f for f in tree.body}
    counts = trust.timed_calls(ast.parse("cell()"), functions)
    assert counts == {"compare": 4 + 1}
    assert trust.timed_calls(tree, functions) == {"compare": 0}  # defined only


def test_producers_are_the_cells_that_bind_what_speed_cells_read():
    speed = ["perf.grade(SPEED, points=1)"]
    measures = SimpleNamespace(source="SPEED = None\nif RUN:\n    SPEED = measure()\n")
    unrelated = SimpleNamespace(source="def helper():\n    SPEED = 1\nother = 2\n")
    assert trust.producers(speed, [measures, unrelated]) == [measures]


def test_trust_refuses_an_unknown_notebook():
    assert trust.chosen_notebooks(["all"]) == trust.notebooks_with_variants()
    with pytest.raises(SystemExit, match="no slow variants for 09_nothing; known: 00_setup"):
        trust.chosen_notebooks(["02_first_kernels", "09_nothing"])


def test_trust_covers_every_speed_cell_of_every_notebook():
    for a in build.assignments():
        speed = [c for c in _notebook.cells(a.name) if (c.grade_id or "").startswith("speed-")]
        if not speed:
            continue
        assert a.name in trust.notebooks_with_variants(), f"{a.name} has no slow variant"
        e = trust.estimate(a.name, runs=10)
        assert e["speed cells"] == len(speed), f"{a.name}: a speed cell no slow variant reaches"
        assert e["comparisons per round"] >= 1
        assert e["seconds"] > trust.SECONDS_PER_NOTEBOOK_PASS


# -- the notebook-cell loader ---------------------------------------------------------------


def test_loader_reads_every_code_cell_as_jupytext_does():
    for a in build.assignments():
        expected = [c for c in build.to_notebook(a.source).cells if c.cell_type == "code"]
        mine = [c for c in _notebook.cells(a.name) if c.kind == "code"]
        assert [c.source for c in mine] == [c.source for c in expected], a.name
        for cell in expected:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            generated = (
                "parameters" in cell.metadata.get("tags", [])
                or grade_id == cell.id
                and (grade_id.startswith(f"{a.source.stem}-"))
            )  # named by the build: the parameters cell, and every given code cell
            if grade_id and not generated:
                assert _notebook.cell(a.name, grade_id) == cell.source


def test_loader_refuses_what_does_not_exist():
    with pytest.raises(_notebook.CellNotFound, match="03_softmax has no cell with grade_id "):
        _notebook.cell("03_softmax", "softmax-kernal")
    with pytest.raises(_notebook.CellNotFound, match="its grade_ids are .*softmax-kernel"):
        _notebook.cell("03_softmax", "softmax-kernal")
    with pytest.raises(_notebook.CellNotFound, match="defines 'no_such_name'"):
        _notebook.defining("04_matmul", "no_such_name")
    with pytest.raises(FileNotFoundError, match="the notebooks are 00_setup"):
        _notebook.cell("09_nothing", "x")


def test_loader_finds_definitions_and_values():
    assert "def matmul_naive(" in _notebook.defining("04_matmul", "matmul_naive")
    versions = _notebook.value("04_matmul", "VERSIONS")
    assert versions["v2 grouped"]["group_m"] > versions["v1 blocked"]["group_m"]
    dev = SimpleNamespace(pick=lambda gpu, interpreter: gpu)
    assert _notebook.value("04_matmul", "NAIVE_N", {"DEVICE": dev}) == 1024
    with pytest.raises(_notebook.CellNotFound, match="assigns 'NOPE'"):
        _notebook.value("04_matmul", "NOPE")


def test_loaded_cells_run(tmp_path):
    ref = _notebook.load("02_first_kernels", ["add-kernel"], ["add"], directory=tmp_path)
    assert _notebook.load("02_first_kernels", ["add-kernel"], ["add"], directory=tmp_path) is ref
    dev = device.current().torch_device  # the interpreter's CPU, or the GPU
    x, y = torch.randn(3001, device=dev), torch.randn(3001, device=dev)
    out = torch.full_like(x, math.nan)
    torch.testing.assert_close(ref.add(x, y, out), x + y)
    (written,) = tmp_path.glob("*.py")
    header = written.read_text().splitlines()[0]
    assert "solutions/02_first_kernels/first_kernels.py" in header and "add-kernel" in header


def test_geomean_ignores_missing_values():
    assert _report.geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert _report.geomean([2.0, math.nan, 0.0, None]) == pytest.approx(2.0)
    assert math.isnan(_report.geomean([]))
