"""The hardware counters that explain a kernel, read by NVIDIA Nsight Compute in a child process.

`each({label: Call(factory, kernels, params)})` runs the calls in a fresh Python process under
Nsight Compute's command-line profiler (`ncu`) and returns a `Profile` for each: a `KernelProfile`
per profiled launch of the Triton kernels named (duration; DRAM bytes read and written; L1 and L2
sectors per request, which say how well the accesses coalesce; L2 hit rate; achieved occupancy;
tensor-pipe use; the stall reasons that held its warps most) and the `Conditions` they were
measured under: clocks locked to base (`--clock-control base`), caches flushed before each
replayed pass (`--cache-control all`). `show` prints one, kept as data by a recorded cell
(grader.runtime.recorded) so that a laptop replays the same table. `canary()` says whether this
machine's counters can be believed: run it first on a new GPU box. `METRICS` says what is read.

Several calls share one child (one start of Python, torch and ncu, seconds each), a marker
kernel launched before each call telling their launches apart. A factory, a notebook's function
that the child gets with what it reaches (`sources_for`) and calls with `params`, makes its
inputs on the GPU and returns a function of no arguments that launches the kernels. That
function runs once unprofiled, so Triton compiles and autotuners tune, then once more between
`cudaProfilerStart` and `cudaProfilerStop` (ncu `--profile-from-start off`): only that call's
launches are profiled.

Why ncu in a child process, rather than CUPTI in the notebook's: counters are read by replaying
each kernel once per pass, its memory restored between passes, clocks locked, caches flushed,
other kernels serialized. In the notebook's process its own kernels would be replayed and its
later timings disturbed, the session would clash with torch's profiler, which the speed cells'
census (grader.runtime.census) holds over CUPTI there, and a profiler fault would take the
notebook's kernel down. CUPTI's counter API has no supported Python binding; ncu is NVIDIA's own
tool, its figures those of Nsight Compute's report. And, as in grader.runtime.integrity, the
notebook's state does not reach the profiled code.

A GPU box needs: an NVIDIA GPU of sm_80 or newer (the metric names are Nsight Compute 2025.x's
for Ampere and Hopper); `ncu` on PATH, at COURSE_NCU, or where the CUDA Toolkit installs it
(/usr/local/cuda/bin/ncu), with a driver it supports; permission to read the counters (root, or
NVreg_RestrictProfilingToAdminUsers=0: https://developer.nvidia.com/ERR_NVGPUCTRPERM); no other
profiler holding them (another ncu, DCGM's profiling metrics). On a laptop nothing can be
profiled ("no-gpu"): show the recording.

Reading sectors per request. A request is one warp-wide load or store instruction, a sector 32
bytes, so the fewest sectors a request can touch is its bytes over 32: 4 where each of the 32
threads moves a float32, 16 where each moves 16 bytes, as Triton's vector loads of contiguous
data do. On an H200 a coalesced float32 copy, the canary and a tl.dot matmul all showed 16 at L1;
a float32 copy reading with a stride of 33 elements showed 32 (a sector per thread), a 9% L2 hit
rate and 16 times the useful bytes read from DRAM, and took 12 times as long. Compare the figure
with the bytes a request moves, not with 1 or 4.

Every failure is a `ProfileError` whose `reason` names it ("no-gpu", "no-ncu", "permission",
"unknown-metric", "child-failed", "no-match", "no-rows", "bad-values", "bad-output", "timeout")
and whose message says what to do. A metric this ncu or GPU lacks is "unknown-metric" whether ncu
leaves its column out of the CSV without an error (as Nsight Compute 2025.3 does) or says so.
"""

from __future__ import annotations

import ast
import csv
import dis
import glob
import importlib
import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grader.runtime import device, recorded

NCU_ENV = "COURSE_NCU"  # the path of ncu, where it is not on PATH
# where ncu is looked for after COURSE_NCU and PATH: the CUDA Toolkit's, then Nsight Compute's own
NCU_PLACES = (
    "/usr/local/cuda/bin/ncu",
    "/usr/local/cuda-*/bin/ncu",
    "/opt/nvidia/nsight-compute/*/ncu",
)
CLOCK_CONTROL = "base"  # ncu's default: SM and memory clocks locked to the GPU's base clocks
CACHE_CONTROL = "all"  # ncu's default: every cache flushed before each replayed pass
PERMISSION_PAGE = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
CANARY_TOLERANCE = 0.02  # the canary's DRAM reads may differ from 2*N*4 bytes by this share
# ProfileError reasons that say the host cannot count, whatever the profiled code does
HOST_CANNOT = ("no-gpu", "no-ncu", "permission", "unknown-metric")


class ProfileError(RuntimeError):
    """The profiler gave no record that can be believed. `reason` names the failure (see the
    module's docstring); the message says what to do about it."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


# -- what is read ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """One ncu metric (Nsight Compute 2025.x, sm_80 and sm_90): its name, the `KernelProfile`
    field it feeds, and its unit as ncu prints it with `--print-units base`."""

    name: str
    feeds: str
    unit: str


# Sectors per request: for each field, the metric of 32-byte sectors and that of requests (one per
# warp-wide instruction), "{}" in the name: L1's global loads (LDG) and stores, L2's reads for L1's
# misses and writes for its stores. Copies by TMA (Triton's tensor descriptors) are not counted at
# L1; a tl.dot matmul of pointer loads, pipelined (num_stages=3), had every byte it loads counted
# there on an H200 with Triton 3.6.
PER_REQUEST = {
    "l1_sectors_per_load": "l1tex__t_{}_pipe_lsu_mem_global_op_ld.sum",
    "l1_sectors_per_store": "l1tex__t_{}_pipe_lsu_mem_global_op_st.sum",
    "l2_sectors_per_load": "lts__t_{}_srcunit_tex_op_read.sum",
    "l2_sectors_per_store": "lts__t_{}_srcunit_tex_op_write.sum",
}
METRICS: tuple[Metric, ...] = (
    Metric("gpu__time_duration.sum", "duration_ns", "nsecond"),
    Metric("dram__bytes_read.sum", "dram_bytes_read", "byte"),
    Metric("dram__bytes_write.sum", "dram_bytes_written", "byte"),  # see WRITE_NOTE
    *(
        Metric(name.format(f"{unit}s"), feeds, unit)
        for feeds, name in PER_REQUEST.items()
        for unit in ("sector", "request")
    ),
    Metric("lts__t_sector_hit_rate.pct", "l2_hit_rate_pct", "%"),  # of L2's sector lookups
    # resident warps per active cycle, as a share of the SM's maximum
    Metric("sm__warps_active.avg.pct_of_peak_sustained_active", "achieved_occupancy_pct", "%"),
    # Nsight Compute's Speed of Light: the busiest of the memory units (DRAM, L2, L1, shared
    # memory), and of the SMs' pipes and issue, as a share of its peak
    Metric(
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        "memory_throughput_pct",
        "%",
    ),
    Metric("sm__throughput.avg.pct_of_peak_sustained_elapsed", "compute_throughput_pct", "%"),
    # cycles the tensor pipe ran floating-point MMA, of its peak: warp-level mma.sync (HMMA,
    # Ampere's tl.dot) and, on Hopper, warpgroup wgmma too (HGMMA, QGMMA: Hopper's tl.dot); not
    # integer MMA (IMMA)
    Metric(
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "tensor_pipe_pct",
        "%",
    ),
)
# The warp states between two issued instructions (Nsight Compute's Warp State Statistics): each
# metric is the average cycles per issued instruction that warps spent in that state. "selected"
# is the cycle of issuing itself, not a stall. "gmma" (waiting on warpgroup MMA) is Hopper's alone.
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
STALL_REASONS = tuple(
    "barrier branch_resolving dispatch_stall drain gmma imc_miss lg_throttle long_scoreboard "
    "math_pipe_throttle membar mio_throttle misc no_instruction not_selected selected "
    "short_scoreboard sleeping tex_throttle wait".split()
)
# the unit of each metric asked for, on any GPU
UNITS = {m.name: m.unit for m in METRICS} | {STALL_METRIC.format(r): "" for r in STALL_REASONS}


# what a count of DRAM traffic reads (grader.runtime.perf.Traffic): its bytes, and the duration
# every profiled launch must have
TRAFFIC = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum")


def metric_names(major: int | None) -> list[str]:
    """The names ncu is asked for on a GPU of compute capability `major` (8 Ampere, 9 Hopper)."""
    stalls = [r for r in STALL_REASONS if r != "gmma" or major == 9]
    return [m.name for m in METRICS] + [STALL_METRIC.format(r) for r in stalls]


# -- the record -----------------------------------------------------------------------------------

CLOCK_NOTE = (
    "Clocks locked to the GPU's base clocks (ncu --clock-control base): durations are longer "
    "than at the boost clocks a timed run uses; compare them only with each other."
)
CACHE_NOTE = (
    "Caches flushed before each replayed pass (ncu --cache-control all): the kernel starts with "
    "cold L1 and L2, so its first touch of every byte is a DRAM read; run back to back in an "
    "application, it may find its inputs in L2."
)
REPLAY_NOTE = (
    "Each kernel ran once per pass of counters, its memory restored in between (kernel "
    "replay); the figures are those of one launch."
)
WRITE_NOTE = (
    "DRAM bytes written can be fewer than the bytes a kernel stores: dirty lines may still sit "
    "in L2 when the kernel ends and reach DRAM later (up to the L2's size{l2})."
)


@dataclass(frozen=True)
class Stall:
    """One warp state that held a kernel's warps: average cycles per issued instruction spent
    in it, and its share of all the stalled cycles (every state but issuing)."""

    reason: str
    cycles_per_issue: float
    share: float


@dataclass(frozen=True)
class KernelProfile:
    """One profiled launch's counters in bytes, nanoseconds and percent (None where the GPU has no
    such counter or a ratio no denominator), and in `raw` every metric asked for, by name."""

    kernel: str
    launch: int  # ncu's ID of the launch: its order among the profiled launches
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    duration_ns: float | None = None
    dram_bytes_read: float | None = None
    dram_bytes_written: float | None = None
    l1_sectors_per_load: float | None = None
    l1_sectors_per_store: float | None = None
    l2_sectors_per_load: float | None = None
    l2_sectors_per_store: float | None = None
    l2_hit_rate_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    tensor_pipe_pct: float | None = None
    memory_throughput_pct: float | None = None
    compute_throughput_pct: float | None = None
    stalls: tuple[Stall, ...] = ()  # the top reasons, most first
    raw: dict[str, float | None] = field(default_factory=dict)

    @property
    def l1_load_sectors(self) -> float | None:
        """The 32-byte sectors L1 looked up for global loads, in all (not per request)."""
        return self.raw.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")

    def __post_init__(self):  # a recording gives lists back
        for shape in ("grid", "block"):
            value = getattr(self, shape)
            object.__setattr__(self, shape, None if value is None else tuple(value))
        object.__setattr__(self, "stalls", tuple(self.stalls))


@dataclass(frozen=True)
class Conditions:
    """What the counters were measured under: the device, the profiler and its settings, and
    notes on reading the figures (clocks, caches, replay, DRAM writes)."""

    device: str
    capability: str | None
    l2_bytes: int | None
    ncu_version: str
    clock_control: str = CLOCK_CONTROL
    cache_control: str = CACHE_CONTROL
    replay: str = "kernel"
    kernel_filter: str = ""
    notes: tuple[str, ...] = ()
    date: str = ""

    def __post_init__(self):
        object.__setattr__(self, "notes", tuple(self.notes))


@dataclass(frozen=True)
class Profile:
    """The profiled launches and the conditions they were measured under; `show(profile)`
    prints it (and records it: grader.runtime.recorded keeps it as data)."""

    kernels: tuple[KernelProfile, ...]
    conditions: Conditions

    def __post_init__(self):  # a recording gives a list back
        object.__setattr__(self, "kernels", tuple(self.kernels))

    def __str__(self) -> str:
        return "\n".join(lines(self))


# -- reading ncu's CSV ----------------------------------------------------------------------------

_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d*)?([eE][+-]?\d+)?$")
_PREFIXES = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_PREFIXES.update({"m": 1e-3, "u": 1e-6, "n": 1e-9, "p": 1e-12})
_COUNTS = ("sector", "request")
_SHORT_TIME = {"ns": "nsecond", "us": "usecond", "ms": "msecond", "s": "second"}
_TUPLE = re.compile(r"^\(?\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)?$")


def number(text: str) -> float | None:
    """A value as ncu prints it: "1,234,567.5" (thousands separated) is 1234567.5; "n/a" or an
    empty field is None; "nan" stays NaN, for the caller to refuse."""
    text = text.strip()
    if text == "" or text.lower() in ("n/a", "na", "-"):
        return None
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    try:
        return float(text)
    except ValueError:
        raise ProfileError(
            "bad-output", f"ncu printed {text!r} where a number belongs: its output changed form"
        ) from None


def in_base_units(value: float | None, unit: str, expected: str) -> float | None:
    """`value`, printed in `unit`, in the `expected` unit ("" for any), or "bad-output". Nsight
    Compute 2025.3.1 on an H200, with `--print-units base`, printed gpu__time_duration in "ns",
    the L1 request counts with no unit and the stall ratios in "inst"."""
    unit = _SHORT_TIME.get(unit, unit)
    if value is None or expected in ("", unit) or (unit == "" and expected in _COUNTS):
        return value
    base = "second" if expected.endswith("second") else expected
    prefix = unit[: -len(base)]
    if base in ("byte", "second", *_COUNTS) and unit.endswith(base) and prefix in _PREFIXES:
        return value * _PREFIXES[prefix] * (1e9 if base == "second" else 1.0)  # time in ns
    raise ProfileError(
        "bad-output",
        f"ncu gave a value in {unit!r} where {expected!r} was expected: the metric's meaning may "
        "have changed in this version of Nsight Compute; check it with `ncu --query-metrics`",
    )


def _launch_shape(text: str | None) -> tuple[int, int, int] | None:
    m = _TUPLE.match((text or "").strip())
    return tuple(int(g) for g in m.groups()) if m else None


def parse_csv(text: str, *, asked: Sequence[str] | None = None) -> list[KernelProfile]:
    """The launches of ncu's `--csv --page raw` output (a header, a row of units, a row per
    launch; other lines passed over), or [] where it has no header. Only the columns of the
    metrics asked for are read, as numbers: ncu adds hundreds unasked, some of them text ("No-CC"
    on an H200). A metric in `asked` with no column is "unknown-metric"."""
    rows = list(csv.reader(line for line in text.splitlines() if line.startswith('"')))
    start = next((i for i, r in enumerate(rows) if "ID" in r and "Kernel Name" in r), None)
    if start is None:
        return []
    header = rows[start]
    units = rows[start + 1] if start + 1 < len(rows) else []
    if len(units) != len(header) or units[header.index("ID")] != "":
        raise ProfileError(
            "bad-output", "ncu's CSV has no row of units under its header: is it --page raw?"
        )
    absent = [name for name in dict.fromkeys(asked or ()) if name not in header]
    if absent:
        raise unknown_metric(absent, "returned no column for")
    metric_columns = [i for i, name in enumerate(header) if name in UNITS]
    found = []
    for row in rows[start + 2 :]:
        if row == header:  # a second process's table
            continue
        if len(row) != len(header):
            raise ProfileError(
                "bad-output",
                f"a row of ncu's CSV has {len(row)} fields where its header has {len(header)}",
            )
        raw = {
            header[i]: in_base_units(number(row[i]), units[i], UNITS[header[i]])
            for i in metric_columns
        }
        found.append(_record(dict(zip(header, row, strict=True)), raw))
    return found


def stalls_of(raw: Mapping[str, float | None], top: int = 3) -> tuple[Stall, ...]:
    """The `top` warp states but issuing that held the warps most, with their share of stalls."""
    values = {r: raw.get(STALL_METRIC.format(r)) for r in STALL_REASONS if r != "selected"}
    cycles = {r: v for r, v in values.items() if v is not None and not math.isnan(v)}
    total = sum(cycles.values())
    if total <= 0:
        return ()
    ranked = sorted(cycles.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return tuple(Stall(reason, value, value / total) for reason, value in ranked if value > 0)


def _record(cells: Mapping[str, str], raw: dict) -> KernelProfile:
    figures = {m.feeds: raw.get(m.name) for m in METRICS if m.feeds not in PER_REQUEST}
    for feeds, name in PER_REQUEST.items():
        sectors, requests = raw.get(name.format("sectors")), raw.get(name.format("requests"))
        ok = sectors is not None and requests and not math.isnan(requests)
        figures[feeds] = sectors / requests if ok else None
    return KernelProfile(
        kernel=cells.get("Kernel Name", ""),
        launch=int(number(cells.get("ID", "")) or 0),
        grid=_launch_shape(cells.get("Grid Size")),
        block=_launch_shape(cells.get("Block Size")),
        stalls=stalls_of(raw),
        raw=raw,
        **figures,
    )


# -- what ncu said went wrong ---------------------------------------------------------------------


def _tail(text: str, n: int = 8) -> str:
    return " | ".join([line for line in text.strip().splitlines() if line.strip()][-n:])


def unknown_metric(names: Sequence[str], said: str) -> ProfileError:
    """The "unknown-metric" error for the metrics `names`, that ncu `said` ("returned no column
    for", where it left them out of its CSV; "does not know", where it said so)."""
    which = "the metric" if len(names) == 1 else f"{len(names)} metrics asked for:"
    return ProfileError(
        "unknown-metric",
        f"ncu {said} {which} {', '.join(names)}: this GPU's generation or this Nsight Compute "
        "version does not have it under that name (Nsight Compute 2025.3 leaves a metric it "
        "does not know out of its CSV, without an error). The names asked for are those of "
        "Nsight Compute 2025.x on Ampere and Hopper (sm_80, sm_90); on another GPU or ncu, list "
        "the metrics it has with `ncu --query-metrics` and report them with "
        "`python -m grader.runtime` (the doctor's report).",
    )


def refuse_failure(output: str, returncode: int, kernel_filter: str) -> None:
    """Raise what ncu's output (its log, the program's stdout and stderr) says went wrong."""
    if "ERR_NVGPUCTRPERM" in output:
        raise ProfileError(
            "permission",
            "ERR_NVGPUCTRPERM: this user may not read the GPU's performance counters. Either "
            "run the profiler as root (start Jupyter or the script with sudo, keeping PATH and "
            "the virtual environment), or let every user read them: as root, write the line "
            "`options nvidia NVreg_RestrictProfilingToAdminUsers=0` to "
            "/etc/modprobe.d/nvidia-profiling.conf, then reboot (some distributions need "
            "`update-initramfs -u` first). In a container the host must allow it. NVIDIA's "
            f"page on it: {PERMISSION_PAGE}",
        )
    unknown = re.findall(r"Failed to find metric[s]?\s*:?\s*(.+)", output)
    if unknown:
        raise unknown_metric([unknown[0].strip()], "does not know")
    if "The application returned an error code" in output or (
        returncode != 0 and "Traceback (most recent call last)" in output
    ):
        raise ProfileError(
            "child-failed",
            "the profiled program failed before its kernels could be profiled; fix it so that "
            f"it runs on its own first. Its last lines: {_tail(output)}",
        )
    if "No kernels were profiled" in output:
        # the kernels ncu lists after it: "Available Kernels:", then "1. name" a line
        listed = output.partition("Available Kernels:")[2]
        seen = ", ".join(re.findall(r"^\s*\d+\.\s+(\S.*?)\s*$", listed, flags=re.M))
        launched = f" It launched: {seen}." if seen else ""
        raise ProfileError(
            "no-match",
            f"ncu profiled no kernel matching {kernel_filter}: name the Triton kernels as their "
            f"`def` names them (the function under @triton.jit).{launched}"
            if kernel_filter
            else "ncu profiled no kernel: the profiled call launched none",
        )
    if returncode != 0:
        raise ProfileError(
            "no-rows", f"ncu exited with status {returncode}. Its last lines: {_tail(output)}"
        )


# -- running ncu ----------------------------------------------------------------------------------


def find_ncu() -> Path:
    """The ncu to run: COURSE_NCU's, else `ncu` on PATH, else the first of NCU_PLACES that exists
    (the newest version first). Raises "no-ncu" saying where to get it."""
    if given := os.environ.get(NCU_ENV):
        path = Path(given)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise ProfileError(
            "no-ncu", f"the ncu named by {NCU_ENV}, {path}, is not an executable file."
        )
    if on_path := shutil.which("ncu"):
        return Path(on_path)
    for place in NCU_PLACES:
        found = sorted(glob.glob(place), key=_version_key, reverse=True)
        if found and os.access(found[0], os.X_OK):
            return Path(found[0])
    raise ProfileError(
        "no-ncu",
        "Nsight Compute's command-line profiler, ncu, is not on PATH, nor at "
        f"{', '.join(NCU_PLACES)}. It comes with the CUDA Toolkit (usually "
        "/usr/local/cuda/bin/ncu: add /usr/local/cuda/bin to PATH), or alone from "
        "https://developer.nvidia.com/nsight-compute (NVIDIA's CUDA apt repository packages it "
        f"as nsight-compute-<version>). Set {NCU_ENV}=/path/to/ncu where it is elsewhere.",
    )


def installation() -> Path | None:
    """The folder Nsight Compute is installed in (a sandbox binding only /usr must bind it too),
    or None: an install's own ncu lies beside its sections/, while the CUDA Toolkit's bin/ncu is a
    script running the newest `nsight-compute-*` beside bin/ or in /opt/nvidia/nsight-compute/."""
    try:
        tool = Path(os.path.realpath(find_ncu()))
    except ProfileError:
        return None
    if (tool.parent / "sections").is_dir():
        return tool.parent
    for place in (str(tool.parent.parent / "nsight-compute-*"), "/opt/nvidia/nsight-compute/*"):
        found = [f for f in glob.glob(place) if Path(f, "ncu").is_file()]
        if found:
            return Path(max(found, key=_version_key))
    return tool.parent


def unavailable() -> str | None:
    """Why nothing can be profiled here (no GPU, no ncu), or None where `profile` can try: a
    notebook shows the recording instead, with this reason."""
    dev = device.current()
    if not dev.is_gpu:
        return f"profiling reads a GPU's hardware counters; this notebook runs on {dev.describe()}"
    try:
        find_ncu()
    except ProfileError as e:
        return str(e)
    return None


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(d) for d in re.findall(r"\d+", path))


def ncu_version(ncu: Path) -> str:
    """ncu's version ("2025.3.0.0"), from `ncu --version`."""
    try:
        done = subprocess.run([str(ncu), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProfileError("no-ncu", f"{ncu} --version failed: {exc}") from None
    m = re.search(r"Version\s+(\d[\w.]*)", done.stdout + done.stderr)
    return m.group(1) if m else "unknown"


def kernel_filter(kernels: Sequence[str]) -> str:
    """ncu's `-k` argument for exactly these kernel names; "" for every kernel (none named)."""
    if not kernels:
        return ""
    if not all(isinstance(k, str) and re.fullmatch(r"[A-Za-z_]\w*", k) for k in kernels):
        raise ValueError(f"name the Triton kernels to profile by their def names, not {kernels!r}")
    return f"regex:^({'|'.join(kernels)})$"


def command(
    ncu: Path,
    spec: Path,
    log: Path,
    kernels: Sequence[str],
    metrics: Sequence[str],
) -> list[str]:
    """The ncu command line that profiles the child running `spec`'s calls (see `collect`)."""
    argv = [str(ncu), "--csv", "--page", "raw", "--print-units", "base"]
    argv += ["--metrics", ",".join(metrics), "--print-kernel-base", "function"]
    argv += ["-k", kernel_filter(kernels)] if kernels else []
    argv += ["--clock-control", CLOCK_CONTROL, "--cache-control", CACHE_CONTROL]
    argv += ["--replay-mode", "kernel", "--profile-from-start", "off", "--log-file", str(log)]
    return argv + [sys.executable, "-m", "grader.runtime.profile", str(spec)]


Runner = Callable[..., tuple[int, str, str]]  # (argv, folder=, env=, timeout=): code, out, err


def collect(
    kernels: Sequence[str],
    *,
    major: int | None,
    problems: Sequence[Mapping],
    sources: Sequence[str] = (),
    timeout: float = 600,
    runner: Runner | None = None,
    metrics: Sequence[str] | None = None,
) -> list[KernelProfile]:
    """Run ncu on the child that makes the `problems` ({"problem": "module:factory", "params":
    params} each), a MARKER launched before each, and read every launch `kernels` matches (every
    launch where none is named), refusing any failure ncu reports (`each` checks the device).
    `sources`: code the child loads as the module SOURCES_MODULE. `runner` starts ncu and the
    child (the judge's, in the student's sandbox); ncu's report lies where the child's user cannot
    go. `metrics`: those asked for (TRAFFIC, say), where not every one of `metric_names`."""
    tool = find_ncu()
    asked = list(metrics) if metrics else metric_names(major)
    env = dict(os.environ)
    # the parent's imports, its working folder ("" in sys.path) included: the child runs elsewhere
    paths = dict.fromkeys(os.path.abspath(p or ".") for p in sys.path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if Path(p).is_dir())
    env["COURSE_MODE"] = device.GPU
    env.pop("CUDA_INJECTION64_PATH", None)  # ncu brings its own (a graded kernel has the judge's)
    with tempfile.TemporaryDirectory(prefix="profile-") as tmp:
        os.chmod(tmp, 0o755)  # the child reads its spec; ncu's report stays in private/
        (Path(tmp) / "private").mkdir(mode=0o700)
        spec, log = Path(tmp) / "spec.json", Path(tmp) / "private" / "ncu.csv"
        spec.write_text(json.dumps({"problems": list(problems), "sources": list(sources)}))
        argv = command(tool, spec, log, kernels, asked)
        run = runner or (lambda args, folder, **rest: run_ncu(args, cwd=folder, **rest))
        returncode, stdout, stderr = run(argv, folder=tmp, env=env, timeout=timeout)
        logged = log.read_text(errors="replace") if log.exists() else ""
    output = "\n".join([logged, stdout, stderr])
    refuse_failure(output, returncode, kernel_filter(kernels))
    launches = parse_csv(logged, asked=asked) or parse_csv(stdout, asked=asked)
    if not launches:
        raise ProfileError(
            "no-rows",
            f"ncu printed no rows of counters (exit {returncode}). Its last lines: {_tail(output)}",
        )
    for k in launches:  # NaN, or zero where a kernel that ran cannot have it
        wrong = [f"{n} (NaN)" for n, v in sorted(k.raw.items()) if v is not None and math.isnan(v)]
        if k.duration_ns is None:
            wrong.append("no duration")
        elif k.duration_ns == 0:
            wrong.append("a duration of zero")
        sectors = [k.raw.get(m.name) for m in METRICS if m.unit == "sector"]
        if all(v == 0 for v in (k.dram_bytes_read, k.dram_bytes_written, *sectors)):
            wrong.append("zero for all of its DRAM and cache traffic")
        if wrong:
            raise ProfileError(
                "bad-values",
                f"ncu returned {', '.join(wrong)} for {k.kernel}: the counters were not read. "
                "Another profiler may hold them (another ncu, DCGM's profiling metrics: stop it), "
                "or this Nsight Compute does not support this GPU and driver. Run "
                "grader.runtime.profile.canary() to check the machine.",
            )
    return launches


def run_ncu(argv: list[str], *, cwd: str, env: dict, timeout: float) -> tuple[int, str, str]:
    """Run ncu in a session of its own, so that a timeout ends the profiled program with it."""
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise ProfileError(
                "timeout",
                f"ncu ran past {timeout:g} s: each kernel is replayed once per pass of counters; "
                "profile fewer launches or a smaller problem",
            ) from None
    return proc.returncode, stdout, stderr


_Gpu = namedtuple("_Gpu", "name major minor l2_bytes")  # l2_bytes None where torch lacks it


def _gpu() -> _Gpu:
    """This process's GPU, or "no-gpu"."""
    dev = device.current()
    if not dev.is_gpu:
        raise ProfileError(
            "no-gpu",
            f"profiling reads an NVIDIA GPU's hardware counters; this notebook runs on "
            f"{dev.describe()}. Show the recorded profile instead (grader.runtime.recorded.show), "
            "or run this on a GPU box with Nsight Compute.",
        )
    import torch

    props = torch.cuda.get_device_properties(0)
    return _Gpu(props.name, props.major, props.minor, getattr(props, "L2_cache_size", None))


def _conditions(gpu: _Gpu, kernels: Sequence[str]) -> Conditions:
    l2 = f", {gpu.l2_bytes:,} bytes here" if gpu.l2_bytes else ""
    return Conditions(
        device=gpu.name,
        capability=f"sm_{gpu.major}{gpu.minor}",
        l2_bytes=gpu.l2_bytes,
        ncu_version=ncu_version(find_ncu()),
        kernel_filter=kernel_filter(kernels),
        notes=(CLOCK_NOTE, CACHE_NOTE, REPLAY_NOTE, WRITE_NOTE.format(l2=l2)),
        date=time.strftime("%Y-%m-%d"),
    )


# -- showing --------------------------------------------------------------------------------------


def _fmt(value: float | None, unit: str = "", digits: int = 1, per: float = 1.0) -> str:
    """`value` in units of `per` (1e6 for megabytes, say)."""
    if value is None:
        return "n/a"
    if math.isnan(value):
        return "NaN"
    return f"{value / per:,.{digits}f}{unit}"


def lines(p: Profile) -> list[str]:
    """The profile for people: the conditions, then each launch's figures, then the notes."""
    c = p.conditions
    out = [
        f"Nsight Compute {c.ncu_version} on {c.device} ({c.capability}), {c.date}: clocks "
        f"locked to base (--clock-control {c.clock_control}), caches flushed before each pass "
        f"(--cache-control {c.cache_control})"
    ]
    for k in p.kernels:
        shape = f"grid {k.grid}, block {k.block}" if k.grid else "launch shape n/a"
        read, written = (_fmt(v, " MB", 2, 1e6) for v in (k.dram_bytes_read, k.dram_bytes_written))
        sectors = "L1 loads {}, stores {}; L2 loads {}, stores {}".format(
            *(_fmt(getattr(k, f), "", 2) for f in PER_REQUEST)
        )
        peak = f"{_fmt(k.memory_throughput_pct, '%')} / {_fmt(k.compute_throughput_pct, '%')}"
        rows = (
            ("duration", _fmt(k.duration_ns, " us", 2, 1e3)),
            ("DRAM read / written", f"{read} / {written}"),
            ("sectors per request", sectors),
            ("L2 hit rate", _fmt(k.l2_hit_rate_pct, "%")),
            ("achieved occupancy", _fmt(k.achieved_occupancy_pct, "%")),
            ("tensor pipes", _fmt(k.tensor_pipe_pct, "%")),
            ("memory / compute", f"{peak} of peak"),
            ("top stalls (of stalled)", ", ".join(f"{s.reason} {s.share:.0%}" for s in k.stalls)),
        )
        out.append(f"{k.kernel} (launch {k.launch}; {shape})")
        out += [f"  {name:<24} {value or 'n/a'}" for name, value in rows]
    out += [f"Note: {note}" for note in c.notes]
    return out


@recorded.replayable("grader.runtime.profile:show", figure=False)
def show(profile_: Profile) -> None:
    """Print a profile; a recorded cell keeps it as data, and a laptop replays this call."""
    print("\n".join(lines(profile_)))


# A column of `compare`: its header, and how it reads a launch.
COLUMNS: dict[str, tuple[str, Callable[[KernelProfile], str]]] = {
    "duration": ("us", lambda k: _fmt(k.duration_ns, per=1e3)),
    "dram_read": ("DRAM read MB", lambda k: _fmt(k.dram_bytes_read, per=1e6)),
    "dram_written": ("DRAM written MB", lambda k: _fmt(k.dram_bytes_written, per=1e6)),
    "l1_load": ("L1 sectors/load", lambda k: _fmt(k.l1_sectors_per_load, "", 2)),
    "l1_read": ("L1 load MB", lambda k: _fmt(k.l1_load_sectors, per=1e6 / 32)),  # 32 B a sector
    "l1_store": ("L1 sectors/store", lambda k: _fmt(k.l1_sectors_per_store, "", 2)),
    "l2_hit": ("L2 hit %", lambda k: _fmt(k.l2_hit_rate_pct)),
    "occupancy": ("occupancy %", lambda k: _fmt(k.achieved_occupancy_pct)),
    "tensor": ("tensor pipe %", lambda k: _fmt(k.tensor_pipe_pct)),
    "memory": ("memory % of peak", lambda k: _fmt(k.memory_throughput_pct)),
    "compute": ("compute % of peak", lambda k: _fmt(k.compute_throughput_pct)),
    "stall": (
        "top stall",
        lambda k: f"{k.stalls[0].reason} {k.stalls[0].share:.0%}" if k.stalls else "n/a",
    ),
}
# The columns a row summing a profile's launches fills: what adds up across launches.
SUMMED = dict(
    duration="duration_ns", dram_read="dram_bytes_read", dram_written="dram_bytes_written"
)


def total(p: Profile, field_: str) -> float | None:
    """The sum of a KernelProfile field over the profile's launches; None where one lacks it."""
    values = [getattr(k, field_) for k in p.kernels]
    return None if any(v is None for v in values) else sum(values)


@recorded.replayable("grader.runtime.profile:compare", figure=False)
def compare(
    profiles: Mapping[str, Profile],
    *,
    columns: Sequence[str] = ("duration", "dram_read", "l1_load", "l2_hit"),
    minimum_read: Mapping[str, float] | None = None,
) -> None:
    """A row per launch of each of `profiles` (label: Profile), their `columns` (COLUMNS' keys)
    side by side, and a row of the sums of a profile of several; with `minimum_read` (label:
    bytes), the DRAM bytes read over it. A recorded cell keeps the profiles, for replay."""
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown:
        raise ValueError(f"columns are among {', '.join(COLUMNS)}, not {', '.join(unknown)}")
    rows, reads = [], [COLUMNS[c][1] for c in columns]
    for label, p in profiles.items():
        several = len(p.kernels) > 1
        for k in p.kernels:
            rows.append([f"{label}: {k.kernel}" if several else label] + [r(k) for r in reads])
        if several:
            sums = KernelProfile(label, 0, None, None, **{f: total(p, f) for f in SUMMED.values()})
            rows.append([f"{label}: all {len(p.kernels)}"])
            rows[-1] += [COLUMNS[c][1](sums) if c in SUMMED else "" for c in columns]
        if minimum_read is not None:
            least, read = minimum_read.get(label), total(p, "dram_bytes_read")
            rows[-1].append(_fmt(read / least if least and read else None, "x", 2))
            for row in rows[-len(p.kernels) - several : -1]:
                row.append("")
    header = [""] + [COLUMNS[c][0] for c in columns]
    header += ["read / minimum"] if minimum_read is not None else []
    widths = [max(map(len, column)) for column in zip(header, *rows, strict=True)]
    if profiles:
        print(lines(next(iter(profiles.values())))[0])
    for r in [header, *rows]:  # the labels to the left, the figures to the right
        print("  ".join([r[0].ljust(widths[0]), *map(str.rjust, r[1:], widths[1:])]).rstrip())


def recorded_profiles(key: str, nth: int = 0) -> dict[str, Profile]:
    """The profiles the recorded cell `key` compared in its `nth` `compare`, from the recording
    that ships with the course (the run's own while it records), or RecordingError."""
    outputs = (recorded.entry(key) or {"outputs": []})["outputs"]
    calls = [o for o in outputs if o.get("call") == "grader.runtime.profile:compare"]
    if len(calls) <= nth:
        raise recorded.RecordingError(
            f"no recorded profiles under {key} (comparison {nth}): run `make recordings` on a GPU "
            "with Nsight Compute"
        )
    return dict(recorded.rebuilt(calls[nth]["args"])[0])


# -- the canary -----------------------------------------------------------------------------------


def canary_problem(n: int):
    """The call the canary profiles: PyTorch's add of x = 0, 1, ..., n - 1 and y = 2x (3x, for a
    test to check) into an output made beforehand, one kernel reading 2*n*4 bytes and storing
    n*4. PyTorch's, not a Triton kernel: the runtime ships to students, and a Triton vector add is
    an exercise's answer."""
    import torch

    x = torch.arange(n, dtype=torch.float32, device=device.current().torch_device)
    y, out = 2 * x, torch.empty_like(x)
    return lambda: torch.add(x, y, out=out)


@dataclass(frozen=True)
class CanaryResult:
    """The canary's verdict: a vector add of `n` float32 reads 2*n*4 bytes from DRAM (within
    CANARY_TOLERANCE) and writes n*4 less up to the L2's size (what may still be dirty in L2)."""

    n: int
    l2_bytes: int
    dram_bytes_read: float | None
    dram_bytes_written: float | None
    problems: tuple[str, ...]
    profile: Profile | None = None

    @property
    def passed(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = (
            f"profiler canary, a vector add of {self.n:,} float32: DRAM read "
            f"{_fmt(self.dram_bytes_read, ' B', 0)} (expected {2 * self.n * 4:,} B within "
            f"{CANARY_TOLERANCE:.0%}), written {_fmt(self.dram_bytes_written, ' B', 0)} "
            f"(expected {max(0, self.n * 4 - self.l2_bytes):,} to {self.n * 4:,} B)"
        )
        if self.passed:
            return head + ": the counters can be believed here."
        return head + ": FAILED: " + "; ".join(self.problems)


def judge_canary(
    n: int,
    l2_bytes: int,
    read: float | None,
    written: float | None,
    profile_: Profile | None = None,
) -> CanaryResult:
    """The canary's verdict on the DRAM bytes ncu counted for its vector add of `n` float32."""
    problems = []
    want, low, high = 2 * n * 4, max(0, n * 4 - l2_bytes), n * 4
    for what, value in (("read", read), ("written", written)):
        if value is None:
            problems.append(f"no DRAM bytes {what}: the counter was not returned")
        elif math.isnan(value):
            problems.append(f"DRAM bytes {what} is NaN: the counter was not read")
        elif value == 0:
            problems.append(
                f"DRAM bytes {what} is zero: the counters were not read (another profiler "
                "holding them, or an unsupported GPU and driver)"
            )
    if read and abs(read - want) > CANARY_TOLERANCE * want:  # NaN is never off
        off = read / want - 1
        why = "many bytes (caches not flushed, or another kernel counted)"
        if off < 0:
            why = "few bytes (inputs found in a cache that was not flushed)"
        problems.append(
            f"DRAM bytes read {read:,.0f} is {off:+.1%} off 2*N*4 = {want:,}: too {why}"
        )
    if written and written > high:
        problems.append(
            f"DRAM bytes written {written:,.0f} is more than the N*4 = {high:,} the kernel "
            "stores: too many bytes (another kernel counted?)"
        )
    elif written and written < low:
        problems.append(
            f"DRAM bytes written {written:,.0f} is less than N*4 less the L2's size = {low:,}: "
            "more stayed in L2 than it holds"
        )
    return CanaryResult(n, l2_bytes, read, written, tuple(problems), profile_)


def canary(n: int = 1 << 25) -> CanaryResult:
    """Profile a vector add of `n` float32 (by default 384 MiB, past any L2) and judge its DRAM
    counters: ProfileError where nothing could be profiled, a failed result for wrong numbers."""
    gpu = _gpu()
    if not gpu.l2_bytes:
        raise ProfileError(
            "no-gpu", "torch does not report this GPU's L2 size (L2_cache_size): update torch"
        )
    try:
        found = each({"": Call(canary_problem, (), {"n": n})})[""]
    except ProfileError as exc:
        if exc.reason != "bad-values":
            raise
        return CanaryResult(n, gpu.l2_bytes, None, None, (str(exc),))
    if len(found.kernels) != 1:
        launched = ", ".join(k.kernel for k in found.kernels)
        problem = f"the add launched {len(found.kernels)} kernels ({launched}), not one"
        return CanaryResult(n, gpu.l2_bytes, None, None, (problem,), found)
    k = found.kernels[0]
    return judge_canary(n, gpu.l2_bytes, k.dram_bytes_read, k.dram_bytes_written, found)


# -- profiling a notebook's own functions ---------------------------------------------------------

SOURCES_MODULE = "profiled"  # the module the child makes of the sources `each` sends
CONSTANTS = (bool, int, float, str, type(None))  # values `each` sends by their repr, and
CONTAINERS = (tuple, list, dict, set)  # these of them: a notebook's table of tiles
LITERAL_CHARS = 10_000  # the longest repr sent
_LOADS = ("LOAD_GLOBAL", "LOAD_NAME")  # the instructions that load a global name
MARKER = "course_profile_marker"  # launched before each call `each` profiles (profile_marker)


@dataclass(frozen=True)
class Call:
    """A call for `each`: `factory(**params)`, a notebook's function, makes it in the child; the
    first launch of each of `kernels` is profiled (where none is named, every launch)."""

    factory: Callable
    kernels: Sequence[str] = ()
    params: Mapping = field(default_factory=dict)

    def __post_init__(self):
        if not callable(self.factory) or getattr(self.factory, "__name__", None) is None:
            raise TypeError(
                f"the factory is the function to call in the child, not {self.factory!r}"
            )
        kernel_filter(self.kernels)  # plain names, or ValueError


def each(
    calls: Mapping[str, Call],
    *,
    sources: Sequence[str] | None = None,
    runner: Runner | None = None,
    metrics: Sequence[str] | None = None,
) -> dict[str, Profile]:
    """Profile several calls, {label: Call}, in one child process under one ncu: {label: Profile}.
    The child gets what each factory reaches (`sources_for`), or `sources`, defining them by name;
    a MARKER launched before each call tells where its launches begin. `runner`, `metrics`: see
    `collect` (a profile of fewer metrics has the others' fields None)."""
    if not calls:
        raise ValueError("name at least one call to profile")
    gpu = _gpu()
    every = any(not c.kernels for c in calls.values())
    named = [] if every else [*dict.fromkeys(k for c in calls.values() for k in c.kernels), MARKER]
    if sources is None:
        sources = list(dict.fromkeys(s for c in calls.values() for s in sources_for(c.factory)))
    problems = [
        {"problem": f"{SOURCES_MODULE}:{c.factory.__name__}", "params": dict(c.params)}
        for c in calls.values()
    ]
    found = collect(
        named, major=gpu.major, sources=sources, problems=problems, runner=runner, metrics=metrics
    )
    profiles = {}
    for (label, call), own in zip(calls.items(), _split(found, len(calls)), strict=True):
        # the first launch of each kernel named
        firsts = {k: next((x for x in own if x.kernel == k), None) for k in call.kernels}
        missing = [k for k, launch in firsts.items() if launch is None]
        kept = list(firsts.values()) if call.kernels else own
        if missing or not kept:
            launched = ", ".join(sorted({k.kernel for k in own})) or "nothing"
            raise ProfileError(
                "no-match",
                f"{label or 'the call'}: ncu profiled {launched} but not "
                f"{', '.join(missing) or 'a launch'}: the call never launched it, or under "
                "another name",
            )
        profiles[label] = Profile(tuple(kept), _conditions(gpu, call.kernels))
    return profiles


def _split(launches: Sequence[KernelProfile], calls: int) -> list[list[KernelProfile]]:
    """The launches of each call: those after each MARKER, in ncu's order."""
    ordered = sorted(launches, key=lambda k: k.launch)
    names = [k.kernel for k in ordered]
    if names[:1] != [MARKER] or names.count(MARKER) != calls:
        raise ProfileError(
            "bad-output",
            f"ncu's launches do not begin with one {MARKER} per call ({calls} calls): "
            f"{', '.join(names[:12])}",
        )
    starts = [i for i, name in enumerate(names) if name == MARKER]
    return [ordered[a + 1 : b] for a, b in itertools.pairwise([*starts, len(names)])]


def _global_names(code: types.CodeType) -> list[str]:
    """The global names `code` and the code nested in it (lambdas, comprehensions) load."""
    names = [i.argval for i in dis.get_instructions(code) if i.opname in _LOADS]
    nested = [n for c in code.co_consts if isinstance(c, types.CodeType) for n in _global_names(c)]
    return list(dict.fromkeys(names + nested))


def _literal(value) -> str | None:
    """`value`'s repr where it rebuilds `value` exactly (numbers, strings, and tuples, lists,
    dicts and sets of them: a notebook's table of tiles) and is short; else None."""
    try:
        if not _exact(value):  # a namedtuple, an enum, numpy's float64: their repr names a class
            return None
        text = repr(value)
        return text if len(text) <= LITERAL_CHARS and ast.literal_eval(text) == value else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _exact(value) -> bool:
    """Whether `value` and all it holds are of CONSTANTS' and CONTAINERS' very types."""
    if type(value) in CONSTANTS:
        return True
    items = [*value.keys(), *value.values()] if type(value) is dict else value
    return type(value) in CONTAINERS and all(map(_exact, items))


def sources_for(factory: Callable) -> list[str]:
    """What the child needs to run `factory`: an import for each module and importable function
    it reaches, an assignment for each constant (a number, a string, a table of them) and for the
    notebook's device (the child's), and the source of each function and Triton kernel of its own
    module (the notebook) it reaches, callees first; nothing else (a tensor)."""
    from grader.runtime.precision import python_function, source

    home = getattr(python_function(factory), "__module__", None)
    lines: dict[str, str] = {}
    bodies: list[str] = []
    visiting: set[int] = set()

    def visit(obj) -> None:
        fn = python_function(obj)
        if fn is None or id(fn) in visiting:
            return
        visiting.add(id(fn))
        for name in _global_names(fn.__code__):
            if name in lines or name not in fn.__globals__:
                continue  # sent already, or a builtin
            value = fn.__globals__[name]
            reached = python_function(value)
            if isinstance(value, types.ModuleType):
                lines[name] = f"import {value.__name__} as {name}\n"
            elif (text := _literal(value)) is not None:
                lines[name] = f"{name} = {text}\n"
            elif isinstance(value, device.Device):  # the notebook's DEVICE: the child's own
                lines[name] = f"import {device.__name__} as _course_device\n"
                lines[name] += f"{name} = _course_device.current()\n"
            elif reached is not None and reached.__module__ == home:
                lines[name] = ""
                visit(value)
            elif reached is not None:
                lines[name] = f"from {reached.__module__} import {reached.__name__} as {name}\n"
        bodies.append(source(obj))

    visit(factory)
    return [line for line in lines.values() if line] + bodies


PRELUDE = "import math\n\nimport torch\nimport triton\nimport triton.language as tl\n\n\n"


def load_sources(sources: Sequence[str], folder: Path, name: str) -> types.ModuleType:
    """The module `name` made of `sources` after PRELUDE, written into `folder` (Triton reads a
    kernel's source from its file) and imported: what the child runs of the code `each` sends."""
    from grader.runtime import verify

    path = folder / f"{name}.py"
    path.write_text(PRELUDE + "\n\n".join(sources) + "\n")
    return verify.load_module(path, name)


# -- the profiled process -------------------------------------------------------------------------


def _child(spec_path: str) -> int:
    """Under ncu: make each problem's call, run it once to compile and tune, then once more (after
    a MARKER) between cudaProfilerStart and cudaProfilerStop, the range profiled."""
    spec = json.loads(Path(spec_path).read_text())
    device.setup(device.GPU)
    import torch

    from grader.runtime.profile_marker import Marker

    # a folder of the child's own: the spec's may be the grader's, which it only reads
    load_sources(spec["sources"], Path(tempfile.mkdtemp()), SOURCES_MODULE)
    mark = Marker()
    for problem in spec["problems"]:
        module, _, name = problem["problem"].partition(":")
        call = getattr(importlib.import_module(module), name)(**problem["params"])
        call()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        mark()
        call()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        del call  # its inputs, before the next call makes its own
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
