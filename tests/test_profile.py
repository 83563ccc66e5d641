"""grader.runtime.profile: reading ncu's raw CSV (a trimmed copy of what ncu wrote on an H200),
the record and its JSON and recording, the errors (with a fake `ncu` on PATH that prints what
ncu prints in each case), and the canary's judgement. One test runs the canary for real on a GPU
with Nsight Compute."""

import ast
import csv
import json
import math
import os
import re
import stat
import sys
import time
import types
from pathlib import Path

import pytest

from grader.runtime import device, profile, recorded
from grader.runtime.profile import ProfileError

DATA = Path(__file__).parent / "data"
# What `ncu --csv --page raw --print-units base --log-file LOG` wrote to LOG for the course's first
# canary (profile_canary_add, a Triton vector add of 2**25 float32, with the traffic of today's
# PyTorch add: the Triton one was an exercise's answer) on an NVIDIA H200, Nsight Compute
# 2025.3.1.0, driver 580.159.04, 2026-11-27: its ==PROF== lines, a header, a row of units, one
# launch. Of its 341 columns it keeps ncu's own 11 ("ID" to "CC"), every metric the module asks
# for, and eight that ncu adds unasked: text ones (device__attribute_confidential_computing_mode,
# "No-CC"; device__attribute_display_name; launch__func_cache_config), numbers, and the .avg and
# .sum siblings of metrics asked for as .sum and .avg. ncu printed time in "ns", the L1 request
# counts with no unit and the stall ratios in "inst".
CANARY_CSV = (DATA / "ncu_h200_canary.csv").read_text()
# The same run's log for a metric gh100 lacks (sm__pipe_tensor_op_gmma_cycles_active...): ncu
# exited 0, printed no error, and gave the launch's row with no column for it (trimmed alike).
UNKNOWN_CSV = (DATA / "ncu_h200_unknown_metric.csv").read_text()
GMMA_PIPE = "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
H200 = profile._Gpu("NVIDIA H200", 9, 0, 62_914_560)
# The Speed of Light figures were first asked for after that run: the H200's CSV has no column
# for them, and is read as what was asked then. The samples below (SAMPLE, _add_only) add the two
# columns with values of this file's own, for the tests of parsing and errors.
MEMORY_SOL = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
COMPUTE_SOL = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
ASKED_THEN = [n for n in profile.metric_names(9) if n not in (MEMORY_SOL, COMPUTE_SOL)]

# A second launch for the tests of several: the 4096^3 fp16 tl.dot matmul (grid (32, 32, 1),
# 256 threads) profiled on the same H200 the same day, its figures as the module read them there
# (its record, not ncu's CSV). The columns not asked for keep the canary's values: they are not
# read.
MATMUL = {
    "ID": "1",
    "Kernel Name": "probe_matmul",
    "Block Size": "(256, 1, 1)",
    "Grid Size": "(32, 32, 1)",
    "dram__bytes_read.sum": "170,744,576",
    "dram__bytes_write.sum": "28,360,192",
    "gpu__time_duration.sum": "252,768",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "4,194,304",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "65,536",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "67,108,864",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "1,048,576",
    "lts__t_requests_srcunit_tex_op_read.sum": "12,438,216",
    "lts__t_requests_srcunit_tex_op_write.sum": "262,144",
    "lts__t_sector_hit_rate.pct": "82.35",
    "lts__t_sectors_srcunit_tex_op_read.sum": "49,031,868",
    "lts__t_sectors_srcunit_tex_op_write.sum": "1,048,576",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "82.65",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "24.41",
    MEMORY_SOL: "41.5",  # not measured there: values of this file's own
    COMPUTE_SOL: "83.2",
    **{
        profile.STALL_METRIC.format(reason): value
        for reason, value in {
            "barrier": "5.15",
            "branch_resolving": "0",
            "dispatch_stall": "2.62",
            "drain": "0.13",
            "gmma": "0.07",
            "imc_miss": "0.01",
            "lg_throttle": "0.12",
            "long_scoreboard": "2.30",
            "math_pipe_throttle": "0.24",
            "membar": "0",
            "mio_throttle": "1.42",
            "misc": "0",
            "no_instruction": "0.04",
            "not_selected": "0.66",
            "selected": "1",
            "short_scoreboard": "0.04",
            "sleeping": "0",
            "tex_throttle": "0",
            "wait": "1.46",
        }.items()
    },
}


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith('"')]


def _others(text: str) -> str:
    """The lines of `text` that are not CSV rows (ncu's ==PROF== lines), as they were."""
    return "".join(line + "\n" for line in text.splitlines() if not line.startswith('"'))


def _csv(header: list[str], units: list[str], launches: list[list[str]], before="") -> str:
    lines = [",".join(f'"{c}"' for c in row) for row in (header, units, *launches)]
    return before + "\n".join(lines) + "\n"


def edited(text=None, *, units=None, cells=None, drop=(), add=(), columns=None) -> str:
    """`text`'s table (by default the canary's with the Speed of Light columns added) with
    `units` ({column: unit}) changed, the launch rows' `cells` changed ({row: {column: value}}),
    the columns in `drop` left out, the rows in `add` ({column: value}, the rest copied from the
    first launch) appended and `columns` ({column: (unit, value)}) added; its ==PROF== lines
    kept."""
    if text is None:
        text = edited(CANARY_CSV, columns={MEMORY_SOL: ("%", "90.12"), COMPUTE_SOL: ("%", "21.4")})
    header, units_row, *launches = (list(r) for r in csv.reader(_rows(text)))
    for name, (unit, value) in (columns or {}).items():
        header.append(name)
        units_row.append(unit)
        for row in launches:
            row.append(value)
    for name, unit in (units or {}).items():
        units_row[header.index(name)] = unit
    for extra in add:
        launches.append(
            [extra.get(name, value) for name, value in zip(header, launches[0], strict=True)]
        )
    for row, changes in (cells or {}).items():
        for name, value in changes.items():
            launches[row][header.index(name)] = value
    kept = [i for i, name in enumerate(header) if name not in drop]
    rows = [[row[i] for i in kept] for row in (header, units_row, *launches)]
    return _csv(rows[0], rows[1], rows[2:], _others(text))


SAMPLE = edited(add=[MATMUL])  # the canary and the matmul, two launches


def marked(*calls: tuple[str, ...]) -> str:
    """The canary's table with one launch per name, a marker before each call's."""
    names = [n for call in calls for n in (profile.MARKER, *call)]
    rows = [{"ID": str(i), "Kernel Name": name} for i, name in enumerate(names)]
    return edited(add=rows[1:], cells={0: rows[0]})


def test_the_sample_is_the_shape_ncu_prints():
    """Guards the samples: a header, a row of units and launches, equally wide, with every
    metric the profiler asks an H200 for, and columns of ncu's own beside them."""
    rows = list(csv.reader(_rows(SAMPLE)))
    assert len(rows) == 4 and len({len(r) for r in rows}) == 1
    asked = set(profile.metric_names(9))
    assert sorted(c for c in rows[0] if c in asked) == sorted(asked)
    unasked = [c for c in rows[0] if "__" in c and c not in asked]
    assert len(unasked) == 8
    cc = rows[0].index("device__attribute_confidential_computing_mode")
    assert rows[2][cc] == "No-CC" and rows[1][rows[0].index("gpu__time_duration.sum")] == "ns"
    assert _rows(edited(CANARY_CSV)) == _rows(CANARY_CSV)
    assert (
        _rows(edited())[2].startswith(_rows(CANARY_CSV)[2]) and _rows(edited()) == _rows(SAMPLE)[:3]
    )
    assert CANARY_CSV.startswith("==PROF== Connected")
    unknown = list(csv.reader(_rows(UNKNOWN_CSV)))
    assert len(unknown) == 3 and not any(c.startswith(("sm__pipe", "smsp__")) for c in unknown[0])


def test_the_h200_canary_reads_as_it_did_there_and_passes():
    """ncu's own CSV of the canary on an H200, read: the figures the module gave there."""
    [add] = profile.parse_csv(CANARY_CSV, asked=ASKED_THEN)
    assert (add.kernel, add.launch) == ("profile_canary_add", 0)
    assert add.grid == (32768, 1, 1) and add.block == (128, 1, 1)
    assert add.duration_ns == 91_072
    assert add.dram_bytes_read == 268_446_720 and add.dram_bytes_written == 114_446_080
    # 128-bit loads: 32 threads x 16 B = 512 B, 16 sectors, the fewest a request can touch
    assert add.l1_sectors_per_load == 16 and add.l1_sectors_per_store == 16
    assert add.raw["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == 524_288
    assert add.l2_sectors_per_load == 4 and add.l2_sectors_per_store == 4
    assert add.l2_hit_rate_pct == 33.23 and add.achieved_occupancy_pct == 83.27
    assert add.tensor_pipe_pct == 0
    assert [s.reason for s in add.stalls] == ["long_scoreboard", "drain", "short_scoreboard"]
    assert sorted(add.raw) == sorted(ASKED_THEN)  # only the metrics asked for
    result = profile.judge_canary(
        1 << 25, H200.l2_bytes, add.dram_bytes_read, add.dram_bytes_written
    )
    assert result.passed, str(result)
    assert "DRAM read 268,446,720 B" in str(result) and "written 114,446,080 B" in str(result)


def test_parse_reads_each_launch_in_base_units():
    add, matmul = profile.parse_csv(SAMPLE)
    launches = [(k.kernel, k.launch) for k in (add, matmul)]
    assert launches == [("profile_canary_add", 0), ("probe_matmul", 1)]
    assert matmul.grid == (32, 32, 1) and matmul.block == (256, 1, 1)
    assert matmul.duration_ns == 252_768 and matmul.dram_bytes_read == 170_744_576
    assert matmul.l1_sectors_per_load == 16  # every one of its 2 GiB of loads, 512 B a request
    assert math.isclose(matmul.l2_sectors_per_load, 49_031_868 / 12_438_216)
    assert matmul.l2_hit_rate_pct == 82.35 and matmul.achieved_occupancy_pct == 24.41
    assert add.tensor_pipe_pct == 0 and matmul.tensor_pipe_pct == 82.65  # wgmma, on Hopper
    assert sorted(matmul.raw) == sorted(profile.metric_names(9))


def test_no_requests_is_no_ratio_and_n_a_is_none():
    ld = "l1tex__t_{}_pipe_lsu_mem_global_op_ld.sum"
    tex_throttle = profile.STALL_METRIC.format("tex_throttle")
    changes = {ld.format("requests"): "0", ld.format("sectors"): "0", tex_throttle: "n/a"}
    [add] = profile.parse_csv(edited(cells={0: changes}))
    assert add.l1_sectors_per_load is None  # no LDG requests: no ratio, not a zero
    assert tex_throttle in add.raw and add.raw[tex_throttle] is None


def test_columns_ncu_adds_unasked_are_not_read_as_numbers():
    """ncu's raw page has hundreds of "__" columns of its own, some holding text ("No-CC" in
    device__attribute_confidential_computing_mode on an H200), and .avg, .min and .max beside
    each .sum asked for: they were not asked for, so they are passed over; text in a metric
    asked for is still refused."""
    [add] = profile.parse_csv(CANARY_CSV)
    header = next(csv.reader(_rows(CANARY_CSV)))
    unasked = [c for c in header if "__" in c and c not in ASKED_THEN]
    assert "device__attribute_confidential_computing_mode" in unasked
    assert "dram__bytes_read.avg" in unasked and "launch__func_cache_config" in unasked
    assert not any(name in add.raw for name in unasked)
    wrong = edited(cells={0: {"dram__bytes_read.sum": "No-CC"}})
    with pytest.raises(ProfileError, match="'No-CC' where a number belongs") as raised:
        profile.parse_csv(wrong)
    assert raised.value.reason == "bad-output"


def test_a_metric_asked_for_that_ncu_left_out_is_unknown():
    """ncu 2025.3 leaves a metric it does not know out of its CSV, exits 0 and prints no
    error: the column asked for and missing is itself the sign."""
    [launch] = profile.parse_csv(UNKNOWN_CSV)  # read blind, nothing says it is missing
    assert launch.kernel == "profile_canary_add" and launch.raw == {}
    with pytest.raises(ProfileError) as raised:
        profile.parse_csv(UNKNOWN_CSV, asked=[GMMA_PIPE])
    assert raised.value.reason == "unknown-metric"
    message = str(raised.value)
    assert f"returned no column for the metric {GMMA_PIPE}:" in message
    assert "GPU's generation or this Nsight Compute version" in message
    assert "ncu --query-metrics" in message and "python -m grader.runtime" in message
    gmma_stall = profile.STALL_METRIC.format("gmma")
    without = edited(drop=[gmma_stall])  # as ncu would print it for a GPU without it
    assert profile.parse_csv(without, asked=profile.metric_names(8))  # not asked on Ampere
    with pytest.raises(ProfileError, match=f"no column for the metric {gmma_stall}:"):
        profile.parse_csv(without, asked=profile.metric_names(9))


def test_parse_ranks_the_stalls_by_their_share_of_stalled_cycles():
    add, matmul = profile.parse_csv(SAMPLE)
    stalled = 171.55  # every state of the add's row but "selected" (issuing), summed
    assert [s.reason for s in add.stalls] == ["long_scoreboard", "drain", "short_scoreboard"]
    assert add.stalls[0].cycles_per_issue == 128.22
    assert math.isclose(add.stalls[0].share, 128.22 / stalled)
    assert math.isclose(add.stalls[2].share, 9.75 / stalled)
    assert [s.reason for s in matmul.stalls] == ["barrier", "dispatch_stall", "long_scoreboard"]
    assert math.isclose(matmul.stalls[0].share, 5.15 / 14.26)
    assert len(profile.stalls_of(profile.parse_csv(SAMPLE)[0].raw, top=5)) == 5


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
    scaled = {"dram__bytes_read.sum": "Mbyte", "gpu__time_duration.sum": "usecond"}
    [add] = profile.parse_csv(edited(units=scaled))
    assert add.dram_bytes_read == 268_446_720e6 and add.duration_ns == 91_072e3


def test_a_count_printed_with_no_unit_and_time_in_ns_are_taken():
    """ncu printed the L1 request counts with no unit and time in "ns" on an H200."""
    assert profile.in_base_units(524_288.0, "", "request") == 524_288
    assert profile.in_base_units(4.0, "", "sector") == 4
    assert profile.in_base_units(91_072.0, "ns", "nsecond") == 91_072
    assert profile.in_base_units(91.072, "us", "nsecond") == 91_072
    with pytest.raises(ProfileError, match="'' where 'byte' was expected"):
        profile.in_base_units(3.0, "", "byte")
    spelled = {"gpu__time_duration.sum": "nsecond"}
    spelled |= {
        f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum": "request" for op in ("ld", "st")
    }
    assert profile.parse_csv(edited(units=spelled)) == profile.parse_csv(edited())


def test_parse_without_a_table_is_empty_and_a_ragged_row_is_refused():
    assert profile.parse_csv("==WARNING== No kernels were profiled.\n") == []
    width = len(next(csv.reader(_rows(SAMPLE))))
    ragged = SAMPLE[: SAMPLE.rstrip("\n").rindex(",")] + "\n"  # the last field left out
    with pytest.raises(ProfileError, match=f"has {width - 1} fields where its header has {width}"):
        profile.parse_csv(ragged)


def test_program_output_between_the_lines_is_passed_over():
    noisy = "max error 0.0\n" + SAMPLE.replace("==PROF== Disconnected", "done\n==PROF== Disc")
    assert profile.parse_csv(noisy) == profile.parse_csv(SAMPLE)


def a_profile() -> profile.Profile:
    conditions = profile.Conditions(
        device=H200.name,
        capability="sm_90",
        l2_bytes=H200.l2_bytes,
        ncu_version="2025.3.1.0",
        kernel_filter=profile.kernel_filter(["profile_canary_add", "probe_matmul"]),
        notes=(profile.CLOCK_NOTE, profile.WRITE_NOTE.format(l2="")),
        date="2026-11-27",
    )
    return profile.Profile(tuple(profile.parse_csv(SAMPLE)), conditions)


def test_the_record_says_its_conditions():
    text = str(a_profile())
    assert "Nsight Compute 2025.3.1.0 on NVIDIA H200 (sm_90)" in text
    assert "--clock-control base" in text and "--cache-control all" in text
    assert "dirty lines may still sit in L2" in text
    assert "long_scoreboard 75%" in text and "barrier 36%" in text
    assert "L1 loads 16.00, stores 16.00; L2 loads 4.00, stores 4.00" in text
    assert "tensor pipes             82.7%" in text


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

CONNECTED, DISCONNECTED = (line + "\n" for line in _others(CANARY_CSV).splitlines())
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


PROBLEMS = [{"problem": f"{profile.SOURCES_MODULE}:canary_problem", "params": {"n": 1024}}]


def collect(kernels=("profile_canary_add",), **kwargs):
    return profile.collect(list(kernels), major=9, problems=PROBLEMS, **kwargs)


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
        lambda: profile.each({"": profile.Call(profile.canary_problem, ["profile_canary_add"])}),
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
    """As Nsight Compute 2025.3 does it: exit 0, no error, no column for the metric."""
    gmma = profile.STALL_METRIC.format("gmma")  # Hopper's: an A100 has no such counter
    fake_ncu(log=edited(drop=[gmma]))
    with pytest.raises(ProfileError) as raised:
        collect()
    assert raised.value.reason == "unknown-metric"
    assert f"ncu returned no column for the metric {gmma}:" in str(raised.value)
    assert "ncu --query-metrics" in str(raised.value)
    fake_ncu(stdout=edited(drop=[gmma]))  # no log file: the table read from what it printed
    with pytest.raises(ProfileError, match=f"no column for the metric {gmma}:"):
        collect()
    fake_ncu(log=UNKNOWN_CSV)  # none of the metrics asked for: each is named
    with pytest.raises(ProfileError) as raised:
        collect()
    asked = profile.metric_names(9)
    assert raised.value.reason == "unknown-metric"
    assert f"no column for {len(asked)} metrics asked for: {', '.join(asked)}:" in str(raised.value)


def test_a_metric_ncu_says_it_does_not_know_is_named(fake_ncu):
    """The form of an ==ERROR== line naming it, in case another version says so."""
    gmma = profile.STALL_METRIC.format("gmma")
    fake_ncu(log=f"==ERROR== Failed to find metric {gmma}\n", rc=1)
    with pytest.raises(ProfileError, match=f"does not know the metric {gmma}:") as raised:
        collect()
    assert raised.value.reason == "unknown-metric"


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
    """The canary's log with its values changed by column."""
    return edited(cells={0: changes})


def _marked_add(**changes) -> str:
    """The canary's log, its values changed by column, after a marker launch."""
    add = {"ID": "1", **changes}
    return edited(add=[add], cells={0: {"ID": "0", "Kernel Name": profile.MARKER}})


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


def test_each_runs_ncu_as_the_module_says(fake_ncu, monkeypatch):
    monkeypatch.setattr(profile, "_gpu", lambda: H200)
    seen = fake_ncu(log=marked(("profile_canary_add", "probe_matmul")))
    kernels = ["profile_canary_add", "probe_matmul"]
    found = profile.each({"": profile.Call(profile.canary_problem, kernels, {"n": 1024})})[""]
    assert [k.kernel for k in found.kernels] == ["profile_canary_add", "probe_matmul"]
    c = found.conditions
    assert (c.device, c.capability, c.ncu_version) == (H200.name, "sm_90", "2025.3.0.0")
    assert (c.clock_control, c.cache_control, c.replay) == ("base", "all", "kernel")
    assert any("62,914,560 bytes here" in note for note in c.notes)
    argv = seen()["argv"]
    joined = " ".join(argv)
    for flags in (
        "--csv --page raw --print-units base",
        f"-k regex:^(profile_canary_add|probe_matmul|{profile.MARKER})$",
        "--clock-control base --cache-control all",
        "--profile-from-start off",
        f"{sys.executable} -m grader.runtime.profile",
    ):
        assert flags in joined
    metrics = argv[argv.index("--metrics") + 1].split(",")
    assert sorted(metrics) == sorted(profile.metric_names(9))
    sources = profile.sources_for(profile.canary_problem)
    assert json.loads(seen()["spec"]) == {"problems": PROBLEMS, "sources": sources}


def test_a_count_of_traffic_asks_ncu_for_its_metrics_alone(fake_ncu, monkeypatch):
    monkeypatch.setattr(profile, "_gpu", lambda: H200)
    seen = fake_ncu(log=marked(("profile_canary_add",)))
    call = profile.Call(profile.canary_problem, ["profile_canary_add"], {"n": 1024})
    found = profile.each({"": call}, metrics=profile.TRAFFIC)[""]
    argv = seen()["argv"]
    assert argv[argv.index("--metrics") + 1].split(",") == list(profile.TRAFFIC)
    assert profile.total(found, "dram_bytes_read") and found.kernels[0].duration_ns


def test_the_metrics_asked_for_follow_the_gpu():
    ampere, hopper = profile.metric_names(8), profile.metric_names(9)
    assert [n for n in hopper if "gmma" in n] == [profile.STALL_METRIC.format("gmma")]
    assert not any("gmma" in n for n in ampere)
    tensor = [m.name for m in profile.METRICS if m.feeds == "tensor_pipe_pct"]
    assert tensor == ["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"]
    assert set(ampere) < set(hopper)
    assert all(m.unit in ("byte", "nsecond", "sector", "request", "%") for m in profile.METRICS)


@pytest.mark.parametrize("names", [["add.*"], ["add kernel"], ["a|b"], [None]])
def test_kernel_names_must_be_plain_names(names):
    with pytest.raises(ValueError, match="def names"):
        profile.kernel_filter(names)


def test_no_kernel_named_profiles_every_launch_of_the_call():
    argv = profile.command(
        Path("/usr/bin/ncu"), Path("spec"), Path("log"), kernels=[], metrics=["m"]
    )  # fmt: skip
    assert "-k" not in argv
    assert argv[argv.index("--print-kernel-base") + 1] == "function"
    assert profile.kernel_filter([]) == ""


# -- the canary ----------------------------------------------------------------------------------

N = 1 << 25
L2 = H200.l2_bytes


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
    monkeypatch.setattr(profile, "_gpu", lambda: H200)
    fake_ncu(log=_marked_add())
    result = profile.canary(N)
    assert result.passed, str(result)
    assert result.profile.kernels[0].kernel == "profile_canary_add"  # the one launch in the CSV
    fake_ncu(log=_marked_add(**{"dram__bytes_read.sum": "0", "dram__bytes_write.sum": "0"}))
    assert not profile.canary(N).passed
    fake_ncu(log=_marked_add(**{"dram__bytes_read.sum": "nan"}))
    failed = profile.canary(N)
    assert not failed.passed and "NaN" in failed.problems[0]


def test_the_canary_adds():
    import torch

    out = profile.canary_problem(3000)()
    assert torch.equal(out, 3 * torch.arange(3000, dtype=out.dtype, device=out.device))


def test_a_canary_of_more_than_one_launch_fails(fake_ncu, monkeypatch):
    monkeypatch.setattr(profile, "_gpu", lambda: H200)
    fake_ncu(log=marked(("profile_canary_add", "probe_matmul")))  # the canary's and the matmul's
    result = profile.canary(N)
    assert not result.passed and "launched 2 kernels" in result.problems[0]


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
    [add] = result.profile.kernels
    assert add.duration_ns > 0
    assert add.l1_sectors_per_load is not None and add.l1_sectors_per_load >= 4
    assert add.stalls, "the warp-state counters came back empty"


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
    monkeypatch.setitem(sys.modules, "grader.runtime.profile_marker", types.SimpleNamespace(
        Marker=lambda: lambda: EVENTS.append("marker")))  # fmt: skip
    spec = tmp_path / "spec.json"
    problem = "tests.test_profile:counting_problem"
    both = [{"problem": problem, "params": {"label": label}} for label in ("a", "b")]
    spec.write_text(json.dumps({"problems": both, "sources": []}))
    EVENTS.clear()
    assert profile._child(str(spec)) == 0
    sys.modules.pop(profile.SOURCES_MODULE)
    # each problem after a marker inside its own profiled range
    one = ["sync", "start", "marker"]
    assert EVENTS == ["setup gpu", "a", *one, "a", "sync", "stop", "b", *one, "b", "sync", "stop"]


# -- a notebook's own functions, compared, and read back from a recording -------------------------


NOTEBOOK_MODULE = """
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from grader.runtime.device import current

SCALE = 0.5
TABLE = {"a": (1, 2.5, None)}
DEVICE = current()
ONES = torch.ones(2)
TILE = __import__("collections").namedtuple("Tile", "m n")(64, 32)


@triton.jit
def _helper(x):
    return x * 2


@triton.jit
def kernel(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, _helper(tl.load(x_ptr + offsets)))


def launch(x):
    kernel[(1,)](x, BLOCK=x.numel())
    return F.relu(x) * SCALE


def problem(n):
    x = torch.ones(n, device=current().torch_device)
    return lambda: launch(x)


def uses_a_table():
    return TABLE, DEVICE.is_gpu, ONES, TILE
"""


@pytest.fixture
def notebook_module(tmp_path, monkeypatch):
    """A module standing for a notebook's cells: a kernel with a helper, a launcher, a factory."""
    (tmp_path / "nbcells.py").write_text(NOTEBOOK_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "nbcells", raising=False)
    import nbcells

    return nbcells


def test_the_factory_is_sent_with_what_it_reaches(notebook_module):
    sources = profile.sources_for(notebook_module.problem)
    assert set(sources[:5]) == {
        "import torch as torch\n",
        "from grader.runtime.device import current as current\n",
        "import torch.nn.functional as F\n",
        "import triton.language as tl\n",
        "SCALE = 0.5\n",
    }
    heads = [s.splitlines()[0] for s in sources[5:]]
    assert heads == ["@triton.jit", "@triton.jit", "def launch(x):", "def problem(n):"]
    assert "def _helper(x):" in sources[5] and "def kernel(" in sources[6]  # callees first
    # a table of constants and the notebook's device are sent; a tensor, a named tuple are not
    assert profile.sources_for(notebook_module.uses_a_table) == [
        "TABLE = {'a': (1, 2.5, None)}\n",
        "import grader.runtime.device as _course_device\nDEVICE = _course_device.current()\n",
        "def uses_a_table():\n    return TABLE, DEVICE.is_gpu, ONES, TILE\n",
    ]


def test_what_is_sent_runs_in_the_child_as_a_module(notebook_module, tmp_path, monkeypatch):
    """What the child does with the sources: a module of them after the prelude, whose factory
    the target names; here in the interpreter."""
    monkeypatch.delitem(sys.modules, profile.SOURCES_MODULE, raising=False)
    (tmp_path / "child").mkdir()
    sources = profile.sources_for(notebook_module.problem)
    profile.load_sources(sources, tmp_path / "child", profile.SOURCES_MODULE)
    module = sys.modules.pop(profile.SOURCES_MODULE)
    assert module.problem(4)().tolist() == [1.0] * 4  # x doubled in place by the kernel, halved


def test_a_call_is_profiled_by_its_factory_name_in_the_sent_module(
    fake_ncu, monkeypatch, notebook_module
):
    monkeypatch.setattr(profile, "_gpu", lambda: H200)
    seen = fake_ncu(log=marked(("profile_canary_add",)))
    call = profile.Call(notebook_module.problem, ["profile_canary_add"], {"n": 8})
    found = profile.each({"": call})[""]
    assert [k.kernel for k in found.kernels] == ["profile_canary_add"]
    spec = json.loads(seen()["spec"])
    problem = {"problem": f"{profile.SOURCES_MODULE}:problem", "params": {"n": 8}}
    assert spec["problems"] == [problem]
    assert spec["sources"] == profile.sources_for(notebook_module.problem)
    with pytest.raises(TypeError, match="the function to call in the child"):
        profile.Call(None, ["k"])


def test_compare_puts_the_launches_side_by_side_and_is_replayed_the_same(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv(recorded.RECORD_ENV, str(tmp_path))
    both = a_profile()
    one = profile.Profile(both.kernels[:1], both.conditions)
    with recorded.cell("02_first_kernels/profiles"):
        profile.compare(
            {"canary": one, "both": both},
            columns=("dram_read", "l1_load", "tensor", "memory", "stall"),
            minimum_read={"canary": 2 * 4 * (1 << 25), "both": 2 * 4 * (1 << 25)},
        )
    shown = capsys.readouterr().out
    rows = shown.splitlines()
    assert rows[0].startswith("Nsight Compute 2025.3.1.0 on NVIDIA H200 (sm_90), 2026-11-27")
    assert rows[1].split() == [
        "DRAM", "read", "MB", "L1", "sectors/load", "tensor", "pipe", "%", "memory", "%", "of",
        "peak", "top", "stall", "read", "/", "minimum",
    ]  # fmt: skip
    assert rows[2].split() == ["canary", "268.4", "16.00", "0.0", "90.1", "long_scoreboard",
                               "75%", "1.00x"]  # fmt: skip
    assert rows[4].split()[:3] == ["both:", "probe_matmul", "170.7"]
    assert rows[4].endswith("barrier 36%")  # the ratio is on the row of the sum
    assert rows[5].split() == ["both:", "all", "2", "439.2", "1.64x"]
    record = json.loads((tmp_path / recorded.SPOOL).read_text().splitlines()[-1])
    assert [o["call"] for o in record["outputs"]] == ["grader.runtime.profile:compare"]
    monkeypatch.delenv(recorded.RECORD_ENV)
    recorded.replay(record["outputs"], record["environment"])
    assert capsys.readouterr().out == shown
    with pytest.raises(ValueError, match="not flops"):
        profile.compare({"canary": one}, columns=("flops",))


def test_recorded_profiles_are_rebuilt_from_the_recording(tmp_path, monkeypatch, capsys):
    spool, shipped = tmp_path / "spool", tmp_path / "recordings"
    monkeypatch.setenv(recorded.RECORD_ENV, str(spool))
    profiles = {"A": a_profile()}
    with recorded.cell("02_first_kernels/review"):
        profile.compare(profiles)
    assert profile.recorded_profiles("02_first_kernels/review") == profiles  # this run's own
    monkeypatch.delenv(recorded.RECORD_ENV)
    [record] = [json.loads(line) for line in (spool / recorded.SPOOL).read_text().splitlines()]
    shipped.mkdir()
    cells = {record["key"]: {"outputs": record["outputs"]}}
    (shipped / "02_first_kernels.json").write_text(
        json.dumps({"notebook": "02_first_kernels", "environment": record["environment"],
                    "cells": cells})
    )  # fmt: skip
    monkeypatch.setenv(recorded.READ_ENV, str(shipped))
    assert profile.recorded_profiles("02_first_kernels/review") == profiles
    with pytest.raises(recorded.RecordingError, match="make recordings"):
        profile.recorded_profiles("02_first_kernels/none")


def test_without_a_gpu_or_ncu_the_reason_is_given(monkeypatch, tmp_path):
    if not device.current().is_gpu:
        assert "runs on the CPU" in profile.unavailable()
        return
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(profile, "NCU_PLACES", ())
    monkeypatch.delenv(profile.NCU_ENV, raising=False)
    assert "ncu, is not on PATH" in profile.unavailable()


def test_each_profiles_several_calls_in_one_child_and_splits_them_at_the_markers(
    fake_ncu, monkeypatch, notebook_module
):
    monkeypatch.setattr(profile, "_gpu", lambda: H200)
    seen = fake_ncu(log=marked(("kernel", "kernel"), ("relu_kernel", "mul_kernel"), ("kernel",)))
    found = profile.each({
        "named": profile.Call(notebook_module.problem, ["kernel"], {"n": 8}),
        "every launch": profile.Call(notebook_module.problem, [], {"n": 16}),
        "again": profile.Call(notebook_module.problem, ["kernel"], {"n": 32}),
    })  # fmt: skip
    assert {label: [k.kernel for k in p.kernels] for label, p in found.items()} == {
        "named": ["kernel"],  # the first launch of each kernel named
        "every launch": ["relu_kernel", "mul_kernel"],
        "again": ["kernel"],
    }
    assert found["named"].kernels[0].launch == 1 and found["again"].kernels[0].launch == 7
    assert found["named"].conditions.kernel_filter == "regex:^(kernel)$"
    argv, spec = seen()["argv"], json.loads(seen()["spec"])
    assert "-k" not in argv  # one call profiles every launch: nothing filtered out
    assert [p["params"] for p in spec["problems"]] == [{"n": 8}, {"n": 16}, {"n": 32}]
    assert len(spec["sources"]) == len(set(spec["sources"]))


def test_each_filters_to_the_kernels_named_and_the_marker(fake_ncu, monkeypatch, notebook_module):
    monkeypatch.setattr(profile, "_gpu", lambda: H200)
    seen = fake_ncu(log=marked(("kernel",), ("kernel",)))
    calls = {n: profile.Call(notebook_module.problem, ["kernel"], {"n": n}) for n in (8, 16)}
    assert list(profile.each(calls)) == [8, 16]
    assert f"regex:^(kernel|{profile.MARKER})$" in seen()["argv"]


@pytest.mark.parametrize(
    "calls, says",
    [
        ((("kernel",), ("other",)), "16: ncu profiled other but not kernel"),
        ((("kernel",), ()), "16: ncu profiled nothing but not kernel"),
        ((("kernel",),), "do not begin with one course_profile_marker per call (2 calls)"),
    ],
)
def test_each_names_the_call_whose_kernel_was_not_launched(
    fake_ncu, monkeypatch, notebook_module, calls, says
):
    monkeypatch.setattr(profile, "_gpu", lambda: H200)
    fake_ncu(log=marked(*calls))
    both = {n: profile.Call(notebook_module.problem, ["kernel"], {"n": n}) for n in (8, 16)}
    with pytest.raises(ProfileError, match=re.escape(says)):
        profile.each(both)
    with pytest.raises(ValueError, match="plain names|def names"):
        profile.Call(notebook_module.problem, ["k[0]"])


def test_the_installation_is_the_folder_the_toolkits_ncu_runs(tmp_path, monkeypatch):
    def executable(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return path

    wrapper = executable(tmp_path / "cuda-13.0" / "bin" / "ncu")
    for version in ("2025.1.0", "2025.3.1"):
        executable(tmp_path / "cuda-13.0" / f"nsight-compute-{version}" / "ncu")
    monkeypatch.setenv(profile.NCU_ENV, str(wrapper))
    assert profile.installation() == tmp_path / "cuda-13.0" / "nsight-compute-2025.3.1"
    alone = executable(tmp_path / "standalone" / "2025.3.1" / "ncu")
    (alone.parent / "sections").mkdir()
    monkeypatch.setenv(profile.NCU_ENV, str(alone))
    assert profile.installation() == alone.parent
    monkeypatch.setenv(profile.NCU_ENV, str(tmp_path / "nothing"))
    assert profile.installation() is None


@pytest.mark.gpu
def test_the_installation_holds_the_ncu_a_sandbox_runs():
    found = profile.installation()
    assert found is not None and (found / "ncu").is_file(), found


@pytest.mark.parametrize(
    "value, sent",
    [
        ({64: (128, 32, 8, 3), 128: [1, 2.5, None, "x", True]}, True),
        ((0.0, -0.0, 1e300, {1, 2}), True),
        (frozenset({1}), False),  # its repr is a call, not a literal
        (float("nan"), False),  # `nan` names nothing in the child
        ((1, float("inf")), False),
        (type("Half", (float,), {})(0.5), False),  # a float's subclass (numpy's float64)
        (__import__("collections").OrderedDict(a=1), False),
        (__import__("enum").IntEnum("Mode", "A")(1), False),
        (list(range(10_000)), False),  # too long to send as source
        (10**5000, False),  # Python refuses the repr of an int that long
    ],
    ids="table floats frozenset nan inf subclass ordered enum long int".split(),
)
def test_only_data_whose_repr_rebuilds_it_is_sent(value, sent):
    """What the profiled child is sent by repr rebuilds the value exactly; anything else is left
    out, rather than breaking the whole module of sources."""
    text = profile._literal(value)
    assert (text is not None) == sent
    if sent:
        assert ast.literal_eval(text) == value
