"""grader.runtime.profile: reading ncu's raw CSV, the record and its JSON and recording, the
errors (with a fake `ncu` on PATH that prints what ncu prints in each case), and the canary's
judgement. One test runs the canary for real on a GPU with Nsight Compute."""

import csv
import json
import math
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from grader.runtime import device, profile, recorded
from grader.runtime.profile import ProfileError

# What `ncu --csv --page raw --print-units base --log-file LOG` writes to LOG on an H100 for two
# launches: a vector add of 2**25 float32 and a matmul (kernel names as Triton gives them),
# metric columns in ncu's alphabetical order, a row of units, thousands separators. Among them
# are columns ncu adds unasked, with text in them: the device's name, and one that printed
# "No-CC" on an H200 (its name here stands in for ncu's), and a launch attribute.
SAMPLE = (
    "==PROF== Connected to process 4242 (/usr/bin/python3.11)\n"
    '==PROF== Profiling "profile_canary_add" - 0: 0%....50%....100% - 9 passes\n'
    '==PROF== Profiling "matmul_kernel" - 1: 0%....50%....100% - 9 passes\n'
    "==PROF== Disconnected from process 4242\n"
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    '"Block Size","Grid Size","Device","CC","device__attribute_confidential_compute_mode",'
    '"device__attribute_display_name","dram__bytes_read.sum","dram__bytes_write.sum",'
    '"gpu__time_duration.sum","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",'
    '"l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",'
    '"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",'
    '"l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum","launch__registers_per_thread",'
    '"lts__t_requests_srcunit_tex_op_read.sum",'
    '"lts__t_requests_srcunit_tex_op_write.sum","lts__t_sector_hit_rate.pct",'
    '"lts__t_sectors_srcunit_tex_op_read.sum","lts__t_sectors_srcunit_tex_op_write.sum",'
    '"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",'
    '"sm__warps_active.avg.pct_of_peak_sustained_active",'
    '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_drain_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_membar_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_misc_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"\n'
    '"","","","","","","","","","","","","","byte","byte","nsecond","request","request",'
    '"sector","sector","register/thread","request","request","%","sector","sector","%","%","","","","","","","","","","",'
    '"","","","","","","","",""\n'
    '"0","4242","python3.11","127.0.0.1","profile_canary_add","1","7","(128, 1, 1)",'
    '"(32768, 1, 1)","0","9.0","No-CC","NVIDIA H100 80GB HBM3","268,503,040","101,711,872",'
    '"402,336","524,288","262,144","8,388,608","4,194,304","16","2,097,152","1,048,576","33.41","8,388,608","4,194,304","0",'
    '"78.52","0","0.01","0.02","1.84","0","0.03","2.95","38.17","0","0","0.11","0.01","0.42",'
    '"0.36","1","0.05","0","0","1.63"\n'
    '"1","4242","python3.11","127.0.0.1","matmul_kernel","1","7","(128, 1, 1)","(64, 16, 1)",'
    '"0","9.0","No-CC","NVIDIA H100 80GB HBM3","25,231,360","8,388,608","1,203,552","0",'
    '"4,096","0","65,536","128","196,608",'
    '"16,384","71.25","786,432","65,536","61.70","12.48","0.35","0.02","0.01","0.05",'
    '"4.12","0","0","0.88","0","0","0.09","0.01","0.21","0.02","1","0.06","2.73","n/a","0.45"\n'
)
H100 = profile._Gpu("NVIDIA H100 80GB HBM3", 9, 0, 50 * 2**20)


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith('"')]


def test_the_sample_is_the_shape_ncu_prints():
    """Guards the sample itself: a header, a row of units and two launches, equally wide, with
    every metric the profiler asks an H100 for, and columns of ncu's own beside them."""
    rows = list(csv.reader(_rows(SAMPLE)))
    assert len(rows) == 4 and len({len(r) for r in rows}) == 1
    asked = set(profile.metric_names(9))
    assert sorted(c for c in rows[0] if c in asked) == sorted(asked)
    unasked = [c for c in rows[0] if "__" in c and c not in asked]
    assert len(unasked) == 3 and "No-CC" in rows[2]


def test_parse_reads_each_launch_in_base_units():
    add, matmul = profile.parse_csv(SAMPLE)
    launches = [(k.kernel, k.launch) for k in (add, matmul)]
    assert launches == [("profile_canary_add", 0), ("matmul_kernel", 1)]
    assert add.grid == (32768, 1, 1) and add.block == (128, 1, 1) and matmul.grid == (64, 16, 1)
    assert add.duration_ns == 402_336 and matmul.duration_ns == 1_203_552
    assert add.dram_bytes_read == 268_503_040 and add.dram_bytes_written == 101_711_872
    assert add.l1_sectors_per_load == 16 and add.l1_sectors_per_store == 16
    assert add.l2_sectors_per_load == 4 and add.l2_sectors_per_store == 4
    assert add.l2_hit_rate_pct == 33.41 and add.achieved_occupancy_pct == 78.52
    assert add.tensor_pipe_pct == 0 and matmul.tensor_pipe_pct == 61.70  # HGMMA counts, on Hopper
    assert matmul.l1_sectors_per_load is None  # no LDG requests: no ratio, not a zero
    tex_throttle = profile.STALL_METRIC.format("tex_throttle")
    assert tex_throttle in matmul.raw and matmul.raw[tex_throttle] is None  # "n/a"
    assert sorted(add.raw) == sorted(profile.metric_names(9))  # only the metrics asked for


def test_columns_ncu_adds_unasked_are_not_read_as_numbers():
    """ncu's raw page has "__" columns of its own that hold text ("No-CC" on an H200): they are
    not metrics that were asked for, so they are passed over; text in a metric asked for is
    still refused."""
    table = list(csv.reader(_rows(SAMPLE)))
    header, units, add = table[0], table[1], table[2]
    extra = {
        "device__attribute_display_name": ("", "NVIDIA H200"),
        "device__attribute_confidential_compute_mode": ("", "No-CC"),
        "launch__func_cache_config": ("", "CachePreferNone"),
    }
    head = [c for c in header if c not in extra] + list(extra)
    kept = dict(zip(header, zip(units, add, strict=True), strict=True)) | extra
    lines = [",".join(f'"{kept[c][i]}"' for c in head) for i in (0, 1)]
    text = "\n".join([",".join(f'"{c}"' for c in head), *lines]) + "\n"
    [parsed] = profile.parse_csv(text)
    assert parsed.kernel == "profile_canary_add" and parsed.grid == (32768, 1, 1)
    assert parsed.dram_bytes_read == 268_503_040 and parsed.tensor_pipe_pct == 0
    assert not any(name in parsed.raw for name in extra)
    assert "launch__registers_per_thread" not in parsed.raw
    wrong = text.replace('"268,503,040"', '"No-CC"')
    with pytest.raises(ProfileError, match="'No-CC' where a number belongs") as raised:
        profile.parse_csv(wrong)
    assert raised.value.reason == "bad-output"


def test_parse_ranks_the_stalls_by_their_share_of_stalled_cycles():
    add, matmul = profile.parse_csv(SAMPLE)
    stalled = 45.60  # every state of the add's row but "selected" (issuing), summed
    assert [s.reason for s in add.stalls] == ["long_scoreboard", "lg_throttle", "drain"]
    assert add.stalls[0].cycles_per_issue == 38.17
    assert math.isclose(add.stalls[0].share, 38.17 / stalled)
    assert math.isclose(add.stalls[2].share, 1.84 / stalled)
    assert [s.reason for s in matmul.stalls] == ["gmma", "sleeping", "long_scoreboard"]
    assert len(profile.parse_csv(SAMPLE, top_stalls=5)[0].stalls) == 5


@pytest.mark.parametrize(
    "text, value",
    [("1,234,567", 1234567.0), ("402,336", 402336.0), ("12.48", 12.48), ("0", 0.0)]
    + [("1,000.5", 1000.5), ("n/a", None), ("", None), ("4.0e-05", 4.0e-05)],
)
def test_numbers_as_ncu_prints_them(text, value):
    assert profile.number(text) == value


def test_a_nan_stays_nan_and_an_unreadable_number_is_refused():
    assert math.isnan(profile.number("nan"))
    with pytest.raises(ProfileError, match="where a number belongs") as raised:
        profile.number("1,5")  # a decimal comma: not a form ncu prints with --csv
    assert raised.value.reason == "bad-output"


def test_scaled_units_are_converted_and_a_unit_of_another_kind_is_refused():
    assert profile.in_base_units(268.5, "Mbyte", "byte") == 268.5e6
    assert profile.in_base_units(402.336, "usecond", "nsecond") == 402_336
    assert profile.in_base_units(8.4, "Ksector", "sector") == 8400
    assert profile.in_base_units(1.5, "", "") == 1.5
    with pytest.raises(ProfileError, match="'sector' where 'byte' was expected"):
        profile.in_base_units(3.0, "sector", "byte")
    scaled = SAMPLE.replace('"byte","byte","nsecond"', '"Mbyte","Kbyte","usecond"')
    add = profile.parse_csv(scaled)[0]
    assert add.dram_bytes_read == 268_503_040e6 and add.duration_ns == 402_336e3


def test_a_count_printed_with_no_unit_and_time_in_ns_are_taken():
    """`ncu --query-metrics` lists the L1 request counts with no unit and time in "ns"."""
    assert profile.in_base_units(524_288.0, "", "request") == 524_288
    assert profile.in_base_units(4.0, "", "sector") == 4
    assert profile.in_base_units(402_336.0, "ns", "nsecond") == 402_336
    assert profile.in_base_units(402.336, "us", "nsecond") == 402_336
    with pytest.raises(ProfileError, match="'' where 'byte' was expected"):
        profile.in_base_units(3.0, "", "byte")
    bare = SAMPLE.replace('"nsecond","request","request"', '"ns","",""')
    assert profile.parse_csv(bare) == profile.parse_csv(SAMPLE)


def test_parse_without_a_table_is_empty_and_a_ragged_row_is_refused():
    assert profile.parse_csv("==WARNING== No kernels were profiled.\n") == []
    ragged = SAMPLE.replace(',"0.45"\n', "\n")
    with pytest.raises(ProfileError, match="has 46 fields where its header has 47"):
        profile.parse_csv(ragged)


def test_program_output_between_the_lines_is_passed_over():
    noisy = "max error 0.0\n" + SAMPLE.replace("==PROF== Disconnected", "done\n==PROF== Disc")
    assert profile.parse_csv(noisy) == profile.parse_csv(SAMPLE)


def a_profile() -> profile.Profile:
    conditions = profile.Conditions(
        device=H100.name,
        capability="sm_90",
        l2_bytes=H100.l2_bytes,
        ncu_version="2025.3.0.0",
        kernel_filter=profile.kernel_filter(["profile_canary_add", "matmul_kernel"]),
        notes=(profile.CLOCK_NOTE, profile.WRITE_NOTE.format(l2="")),
        date="2026-11-30",
    )
    return profile.Profile(tuple(profile.parse_csv(SAMPLE)), conditions)


def test_a_profile_goes_to_json_and_back_unchanged():
    original = a_profile()
    text = original.to_json()
    data = json.loads(text)
    assert data["conditions"]["clock_control"] == "base"
    assert data["conditions"]["cache_control"] == "all"
    assert data["kernels"][0]["grid"] == [32768, 1, 1]
    assert data["kernels"][0]["stalls"][0]["reason"] == "long_scoreboard"
    back = profile.Profile.from_json(text)
    assert back == original
    assert isinstance(back.kernels[0].stalls[0], profile.Stall)
    assert back.kernels[0].grid == (32768, 1, 1)
    assert back.to_json() == text


def test_the_record_says_its_conditions():
    text = str(a_profile())
    assert "Nsight Compute 2025.3.0.0 on NVIDIA H100 80GB HBM3 (sm_90)" in text
    assert "--clock-control base" in text and "--cache-control all" in text
    assert "dirty lines may still sit in L2" in text
    assert "long_scoreboard 84%" in text and "gmma" in text
    assert "L1 loads 16.00, stores 16.00; L2 loads 4.00, stores 4.00" in text


def test_a_shown_profile_is_recorded_as_data_and_replayed_the_same(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(recorded.RECORD_ENV, str(tmp_path))
    original = a_profile()
    with recorded.cell("01_roofline/profile-counters"):
        profile.show(original)
    shown = capsys.readouterr().out
    assert "profile_canary_add (launch 0; grid (32768, 1, 1), block (128, 1, 1))" in shown
    record = json.loads((tmp_path / recorded.SPOOL).read_text().splitlines()[-1])
    [call] = [o for o in record["outputs"] if "call" in o]
    assert call["call"] == "grader.runtime.profile:show"
    assert call["args"][0]["__type__"] == "profile.Profile"
    assert call["args"][0]["kernels"][1]["__type__"] == "profile.KernelProfile"
    monkeypatch.delenv(recorded.RECORD_ENV)
    recorded.replay(record["outputs"], record["environment"])
    assert capsys.readouterr().out == shown


# -- errors, with a fake ncu ----------------------------------------------------------------------

CONNECTED = "==PROF== Connected to process 4242 (/usr/bin/python3.11)\n"
DISCONNECTED = "==PROF== Disconnected from process 4242\n"
PERMISSION = (
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
    "Performance Counters on the target device 0. For instructions on enabling permissions and "
    "to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n"
)
VERSION = (
    "NVIDIA (R) Nsight Compute Command Line Profiler\n"
    "Copyright (c) 2018-2025 NVIDIA Corporation\n"
    "Version 2025.3.0.0 (build 36273991) (public-release)\n"
)
FAKE = """#!{python}
import json, sys
plan = json.loads({plan!r})
argv = sys.argv[1:]
if argv == ["--version"]:
    print(plan["version"])
    sys.exit(0)
spec = argv[-1] if argv[-2] == "grader.runtime.profile" else None
seen = {{"argv": argv, "spec": open(spec).read() if spec else None}}
open(plan["seen"], "w").write(json.dumps(seen))
if "--log-file" in argv:
    open(argv[argv.index("--log-file") + 1], "w").write(plan["log"])
if plan["hang"]:  # a profiled program that never ends, under an ncu that waits for it
    import subprocess, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    open(plan["hang"], "w").write(str(child.pid))
    time.sleep(120)
sys.stdout.write(plan["stdout"])
sys.stderr.write(plan["stderr"])
sys.exit(plan["rc"])
"""


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    """Put an `ncu` on PATH that writes `log` to its --log-file, prints `stdout` and `stderr`,
    exits with `rc`, and keeps the arguments it was given; returns a function that sets it up
    and then reads what it saw."""
    folder = tmp_path / "bin"
    folder.mkdir()
    seen = tmp_path / "seen.json"
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv(profile.NCU_ENV, raising=False)

    def install(log="", stdout="", stderr="", rc=0, hang=""):
        plan = dict(log=log, stdout=stdout, stderr=stderr, rc=rc, hang=hang)
        plan.update(version=VERSION, seen=str(seen))
        script = folder / "ncu"
        script.write_text(FAKE.format(python=sys.executable, plan=json.dumps(plan)))
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        return lambda: json.loads(seen.read_text())

    return install


def collect(kernels=("profile_canary_add",), **kwargs):
    return profile.collect(profile.CANARY_PROBLEM, list(kernels), major=9, **kwargs)


@pytest.mark.parametrize("where", ["log", "stdout"])
def test_no_permission_for_the_counters_says_how_to_allow_them(fake_ncu, where):
    fake_ncu(rc=1, **{where: CONNECTED + PERMISSION + DISCONNECTED})
    with pytest.raises(ProfileError) as raised:
        collect()
    assert raised.value.reason == "permission"
    message = str(raised.value)
    assert "as root" in message and "NVreg_RestrictProfilingToAdminUsers=0" in message
    assert "/etc/modprobe.d/" in message and profile.PERMISSION_PAGE in message


def test_missing_ncu_says_where_it_is_usually_installed(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(profile.NCU_ENV, raising=False)
    monkeypatch.setattr(profile, "NCU_PLACES", (str(tmp_path / "cuda" / "bin" / "ncu"),))
    with pytest.raises(ProfileError) as raised:
        collect()
    assert raised.value.reason == "no-ncu"
    message = str(raised.value)
    assert "/usr/local/cuda/bin/ncu" in message and "CUDA Toolkit" in message
    assert "nsight-compute" in message and profile.NCU_ENV in message
    monkeypatch.setenv(profile.NCU_ENV, str(tmp_path / "nowhere" / "ncu"))
    with pytest.raises(ProfileError, match="named by COURSE_NCU.*is not an executable file"):
        profile.find_ncu()


def test_ncu_is_found_in_the_toolkits_places_when_not_on_path(tmp_path, monkeypatch):
    for version in ("2025.1.0", "2025.3.0"):
        tool = tmp_path / "nsight-compute" / version / "ncu"
        tool.parent.mkdir(parents=True)
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv(profile.NCU_ENV, raising=False)
    monkeypatch.setattr(profile, "NCU_PLACES", (str(tmp_path / "nsight-compute" / "*" / "ncu"),))
    assert profile.find_ncu() == tmp_path / "nsight-compute" / "2025.3.0" / "ncu"


def test_without_a_gpu_the_caller_is_told_to_show_the_recording(monkeypatch):
    laptop = device.Device(device.INTERPRETER, "CPU (Triton interpreter)")
    monkeypatch.setattr(device, "current", lambda: laptop)
    for attempt in (
        lambda: profile.profile(profile.CANARY_PROBLEM, [profile.CANARY_KERNEL]),
        profile.canary,
    ):
        with pytest.raises(ProfileError) as raised:
            attempt()
        assert raised.value.reason == "no-gpu"
        assert "interpreter mode" in str(raised.value) and "recorded" in str(raised.value)


def test_a_filter_that_matched_nothing_names_what_was_launched(fake_ncu):
    listing = "==WARNING== No kernels were profiled.\nAvailable Kernels:\n1. add_kernel\n"
    fake_ncu(log=CONNECTED + DISCONNECTED + listing)
    with pytest.raises(ProfileError) as raised:
        collect()
    assert raised.value.reason == "no-match"
    assert "regex:^(profile_canary_add)$" in str(raised.value)
    assert "It launched: add_kernel." in str(raised.value)


def test_a_kernel_the_call_never_launched_is_named(fake_ncu):
    only_add = "\n".join(SAMPLE.splitlines()[:-1]) + "\n"  # the matmul's row left out
    fake_ncu(log=only_add)
    with pytest.raises(ProfileError, match="but not matmul_kernel") as raised:
        collect(["profile_canary_add", "matmul_kernel"])
    assert raised.value.reason == "no-match"


def test_a_program_that_fails_is_reported_with_its_own_error(fake_ncu):
    log = CONNECTED + "==ERROR== The application returned an error code (1).\n"
    log += "==WARNING== No kernels were profiled.\n"
    stderr = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'nowhere'\n"
    fake_ncu(log=log, stderr=stderr, rc=1)
    with pytest.raises(ProfileError) as raised:
        collect()
    assert raised.value.reason == "child-failed"
    assert "No module named 'nowhere'" in str(raised.value)


def test_a_metric_this_ncu_does_not_know_is_named(fake_ncu):
    gmma = profile.STALL_METRIC.format("gmma")  # Hopper's: an A100 has no such counter
    fake_ncu(log=f"==ERROR== Failed to find metric {gmma}\n", rc=1)
    with pytest.raises(ProfileError, match=f"does not know the metric {gmma}"):
        collect()


def test_no_rows_at_all_is_refused(fake_ncu):
    fake_ncu(log=CONNECTED + DISCONNECTED)
    with pytest.raises(ProfileError, match="printed no rows of counters") as raised:
        collect()
    assert raised.value.reason == "no-rows"


def test_a_profile_past_its_time_ends_the_profiled_program_too(fake_ncu, tmp_path):
    pid_file = tmp_path / "child.pid"
    fake_ncu(hang=str(pid_file))
    started = time.monotonic()
    with pytest.raises(ProfileError, match="ncu ran past 4 s") as raised:
        collect(timeout=4)
    assert raised.value.reason == "timeout"
    assert time.monotonic() - started < 30, "waited for the profiled program to end by itself"
    pid = int(pid_file.read_text())
    for _ in range(50):
        if not _running(pid):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        pytest.fail("the profiled program outlived the timeout")


def _running(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _add_only(**changes) -> str:
    """The sample with the matmul's row left out and the add's values changed by column."""
    table = list(csv.reader(_rows(SAMPLE)))
    header, units, add = table[0], table[1], list(table[2])
    for name, value in changes.items():
        add[header.index(name)] = value
    lines = [",".join(f'"{c}"' for c in row) for row in (header, units, add)]
    return CONNECTED + DISCONNECTED + "\n".join(lines) + "\n"


def test_zeros_and_nan_from_the_counters_are_refused(fake_ncu):
    names = [n for n in profile.metric_names(9) if not n.startswith("smsp__")]
    fake_ncu(log=_add_only(**dict.fromkeys(names, "0")))
    with pytest.raises(ProfileError) as raised:
        collect()
    assert raised.value.reason == "bad-values"
    assert "a duration of zero" in str(raised.value)
    assert "zero for all of its DRAM and cache traffic" in str(raised.value)
    fake_ncu(log=_add_only(**{"dram__bytes_read.sum": "nan"}))
    with pytest.raises(ProfileError, match=r"dram__bytes_read.sum \(NaN\).*canary\(\)"):
        collect()


def test_profile_runs_ncu_as_the_module_says(fake_ncu, monkeypatch):
    monkeypatch.setattr(profile, "_gpu", lambda: H100)
    seen = fake_ncu(log=SAMPLE)
    found = profile.profile(
        profile.CANARY_PROBLEM, ["profile_canary_add", "matmul_kernel"], params={"n": 1024}
    )
    assert [k.kernel for k in found.kernels] == ["profile_canary_add", "matmul_kernel"]
    c = found.conditions
    assert (c.device, c.capability, c.ncu_version) == (H100.name, "sm_90", "2025.3.0.0")
    assert (c.clock_control, c.cache_control, c.replay) == ("base", "all", "kernel")
    assert any("52,428,800 bytes here" in note for note in c.notes)
    argv = seen()["argv"]
    joined = " ".join(argv)
    for flags in (
        "--csv --page raw --print-units base",
        "-k regex:^(profile_canary_add|matmul_kernel)$",
        "--launch-count 2 --launch-skip 0",
        "--clock-control base --cache-control all",
        "--profile-from-start off",
        f"{sys.executable} -m grader.runtime.profile",
    ):
        assert flags in joined
    metrics = argv[argv.index("--metrics") + 1].split(",")
    assert sorted(metrics) == sorted(profile.metric_names(9))
    assert json.loads(seen()["spec"]) == {"problem": profile.CANARY_PROBLEM, "params": {"n": 1024}}


def test_the_metrics_asked_for_follow_the_gpu():
    ampere, hopper = profile.metric_names(8), profile.metric_names(9)
    assert [n for n in hopper if "gmma" in n] == [profile.STALL_METRIC.format("gmma")]
    assert not any("gmma" in n for n in ampere)
    tensor = [m.name for m in profile.METRICS if m.feeds == "tensor_pipe_pct"]
    assert tensor == ["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"]
    assert set(ampere) < set(hopper)
    assert all(m.unit in ("byte", "nsecond", "sector", "request", "%") for m in profile.METRICS)


def test_a_script_is_profiled_from_its_start(tmp_path):
    script = tmp_path / "run_it.py"
    argv = profile.command(
        Path("/usr/local/cuda/bin/ncu"),
        script,
        tmp_path / "spec.json",
        tmp_path / "log.csv",
        kernels=["add_kernel"],
        metrics=["gpu__time_duration.sum"],
        launch_count=3,
        launch_skip=2,
    )
    assert argv[-2:] == [sys.executable, str(script)]
    assert argv[argv.index("--profile-from-start") + 1] == "on"
    assert argv[argv.index("--launch-skip") + 1] == "2"
    assert argv[argv.index("--clock-control") + 1] == "base"
    with pytest.raises(ValueError, match="clock_control is one of"):
        profile.command(
            Path("ncu"),
            script,
            script,
            script,
            kernels=["k"],
            metrics=[],
            launch_count=1,
            clock_control="boost",
        )


@pytest.mark.parametrize("names", [[], ["add.*"], ["add kernel"], ["a|b"]])
def test_kernel_names_must_be_plain_names(names):
    with pytest.raises(ValueError, match="def names"):
        profile.kernel_filter(names)


# -- the canary ----------------------------------------------------------------------------------

N = 1 << 25
L2 = 50 * 2**20


def test_the_canary_passes_on_right_numbers():
    result = profile.judge_canary(N, L2, 2 * N * 4 * 1.004, N * 4 - 20e6)
    assert result.passed and result.problems == ()
    assert "can be believed" in str(result)
    assert profile.judge_canary(N, L2, 2 * N * 4 * 1.0199, N * 4).passed  # the edges are in
    assert profile.judge_canary(N, L2, 2 * N * 4 * 0.9801, N * 4 - L2).passed


def test_the_canary_fails_on_zeros():
    result = profile.judge_canary(N, L2, 0.0, 0.0)
    assert not result.passed and len(result.problems) == 2
    assert all("is zero: the counters were not read" in p for p in result.problems)
    assert "FAILED" in str(result)


def test_the_canary_fails_on_nan_and_missing_counters():
    result = profile.judge_canary(N, L2, float("nan"), None)
    assert not result.passed
    assert "DRAM bytes read is NaN" in result.problems[0]
    assert "no DRAM bytes written" in result.problems[1]


@pytest.mark.parametrize(
    "read, written, says",
    [
        (2 * N * 4 * 1.021, N * 4, "+2.1% off 2*N*4 = 268,435,456: too many bytes"),
        (2 * N * 4 * 0.97, N * 4, "-3.0% off 2*N*4 = 268,435,456: too few bytes"),
        (2 * N * 4, N * 4 + 4096, "more than the N*4 = 134,217,728 the kernel stores"),
        (2 * N * 4, N * 4 - L2 - 4096, "more stayed in L2 than it holds"),
    ],
)
def test_the_canary_fails_on_bytes_that_cannot_be(read, written, says):
    result = profile.judge_canary(N, L2, read, written)
    assert not result.passed and len(result.problems) == 1 and says in result.problems[0]


def test_the_canary_judges_what_ncu_returned(fake_ncu, monkeypatch):
    monkeypatch.setattr(profile, "_gpu", lambda: H100)
    fake_ncu(log=_add_only())
    result = profile.canary(N)
    assert result.passed, str(result)
    assert result.profile.kernels[0].kernel == profile.CANARY_KERNEL
    fake_ncu(log=_add_only(**{"dram__bytes_read.sum": "0", "dram__bytes_write.sum": "0"}))
    assert not profile.canary(N).passed
    fake_ncu(log=_add_only(**{"dram__bytes_read.sum": "nan"}))
    failed = profile.canary(N)
    assert not failed.passed and "NaN" in failed.problems[0]


def test_the_canary_kernel_adds():
    from grader.runtime import profile_canary

    out = profile_canary.problem(3000)()
    expected = 3 * profile_canary.torch.arange(3000, dtype=out.dtype, device=out.device)
    assert profile_canary.torch.equal(out, expected)


@pytest.mark.gpu
def test_the_canary_passes_on_this_gpu():
    """The whole path, for real: ncu, the child process, the counters, the judgement."""
    try:
        result = profile.canary()
    except ProfileError as exc:
        if exc.reason == "no-ncu":
            pytest.skip(str(exc))
        raise
    assert result.passed, str(result)
    add = result.profile.kernels[0]
    assert add.kernel == profile.CANARY_KERNEL and add.duration_ns > 0
    assert add.grid == ((N + 1023) // 1024, 1, 1)
    assert add.l1_sectors_per_load is not None and add.l1_sectors_per_load >= 4
    assert add.stalls, "the warp-state counters came back empty"


def test_clocks_left_unlocked_are_said_so(fake_ncu, monkeypatch):
    monkeypatch.setattr(profile, "_gpu", lambda: H100)
    seen = fake_ncu(log=_add_only())
    found = profile.profile(profile.CANARY_PROBLEM, [profile.CANARY_KERNEL], clock_control="none")
    argv = seen()["argv"]
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert found.conditions.clock_control == "none"
    assert profile.CLOCK_NOTES["none"] in found.conditions.notes
    assert profile.CLOCK_NOTES["base"] not in found.conditions.notes
    assert "clocks not locked (--clock-control none)" in str(found)


EVENTS: list[str] = []


def counting_problem(label: str):
    """A factory for the child: its call notes itself."""
    return lambda: EVENTS.append(label)


def test_the_child_profiles_only_the_call_after_a_warm_up(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(device, "setup", lambda mode: EVENTS.append(f"setup {mode}"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: EVENTS.append("sync"))
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: EVENTS.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: EVENTS.append("stop"))
    spec = tmp_path / "spec.json"
    problem = "tests.test_profile:counting_problem"
    spec.write_text(json.dumps({"problem": problem, "params": {"label": "call"}}))
    EVENTS.clear()
    assert profile._child(str(spec)) == 0
    assert EVENTS == ["setup gpu", "call", "sync", "start", "call", "sync", "stop"]
