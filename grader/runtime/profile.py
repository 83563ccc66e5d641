"""The hardware counters that explain a kernel, read by NVIDIA Nsight Compute in a child process.

`profile(target, kernels)` runs the code `target` names in a fresh Python process under Nsight
Compute's command-line profiler (`ncu`) and returns a `Profile`: one `KernelProfile` per profiled
launch of the Triton kernels named in `kernels` (its duration; DRAM bytes read and written; L1
and L2 sectors per request for global loads and stores, which say how well the accesses
coalesce; the L2 hit rate; achieved occupancy; tensor-pipe utilization; the stall reasons that
held its warps most, with their share), and the `Conditions` they were measured under: the
device, ncu's version, clocks locked to base (`--clock-control base`), caches flushed before each
replayed pass (`--cache-control all`), and what that means for the figures. `show(profile)`
prints it, and is kept by a recorded cell (grader.runtime.recorded) as its data, so a laptop
replays the same table. `canary()` profiles a vector add whose traffic is known and says whether
the counters can be believed on this machine; run it first on a new GPU box. `METRICS` is the
table of what is read: ncu's metric name, the field it fills, its unit and its meaning.

A notebook profiles its own functions with `of(factory, kernels=..., params=...)`, or several
calls at once with `each({label: Call(factory, kernels, params)})`: one child process, one start
of Python, torch and ncu (seconds each) for them all, a marker kernel launched before each call
telling its launches apart.

`target` is either importable code, "module:function" (a factory, called with `params` in the
child, that makes its inputs on the GPU and returns a function of no arguments that launches the
kernels), or the path of a Python script. A factory's function is called once unprofiled, so
Triton compiles and any autotuner tunes, then once more between `cudaProfilerStart` and
`cudaProfilerStop` (ncu `--profile-from-start off`): only that call's launches are profiled. A
script is profiled from its start (`launch_skip` passes over launches of the kernels first).

Why ncu, in a child process, rather than CUPTI in the notebook's process. Hardware counters are
collected by replaying each kernel: the GPU has too few counters to read them all at once, so the
kernel runs once per pass, its memory saved and restored between passes, clocks locked, caches
flushed, every other kernel serialized. Done in the notebook's process, the notebook's own
kernels would be replayed and slowed, its later timings disturbed, and the session would clash
with torch's profiler, which the speed cells' census (grader.runtime.census) holds over CUPTI in
that process; a profiler fault (no permission, a driver mismatch) would take the notebook's
kernel down with it. CUPTI's counter API is C and has no supported Python binding (torch's
profiler reads activities, not counters), while ncu is NVIDIA's own tool, with the metric names,
units and replay the Nsight Compute documentation describes, so the figures are those a student
sees in Nsight Compute's own report. In a child process, as in grader.runtime.integrity's
isolated measurement, the notebook's state does not reach the profiled code either.

What a GPU box needs: an NVIDIA GPU of sm_80 or newer (the metric names are those of Nsight
Compute 2025.x for Ampere and Hopper); Nsight Compute's `ncu`, found on PATH, at COURSE_NCU, or
where the CUDA Toolkit installs it (/usr/local/cuda/bin/ncu), with a driver that version
supports; permission to read the performance counters (root, or the driver's
NVreg_RestrictProfilingToAdminUsers=0: https://developer.nvidia.com/ERR_NVGPUCTRPERM); no other
profiler holding the counters (another ncu, DCGM's profiling metrics); a CUDA build of torch with
its Triton. On a laptop nothing can be profiled (`ProfileError` "no-gpu"): show the recording.

Reading sectors per request. A request is one warp-wide load or store instruction, a sector 32
bytes, so the fewest sectors a request can touch is the bytes it moves over 32: 4 where each of
the 32 threads moves one float32, 16 where each moves 16 bytes, as Triton's vector loads of
contiguous data do (32 x 16 B = 512 B). On an H200 a coalesced float32 copy, the canary and a
tl.dot matmul all showed 16 at L1, the fewest they could; a float32 copy reading with a stride
of 33 elements showed 32 (a sector per thread), a 9% L2 hit rate and 16 times the useful bytes
read from DRAM, and took 12 times as long. Compare the figure with the bytes a request moves,
not with 1 or 4.

Every failure is a `ProfileError` whose `reason` names it ("no-gpu", "no-ncu", "permission",
"unknown-metric", "child-failed", "no-match", "no-rows", "bad-values", "bad-output", "timeout")
and whose message says what to do. A metric this ncu or this GPU does not have is "unknown-metric"
however ncu says so: Nsight Compute 2025.3 leaves it out of its CSV without an error (the
metric's column is missing), and an ==ERROR== line naming it is taken too.
"""

from __future__ import annotations

import csv
import dataclasses
import dis
import glob
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.runtime import device, recorded

NCU_ENV = "COURSE_NCU"  # the path of ncu, where it is not on PATH
# Where ncu is looked for after COURSE_NCU and PATH: the CUDA Toolkit's places, then Nsight
# Compute's own installer's (the newest version first).
NCU_PLACES = (
    "/usr/local/cuda/bin/ncu",
    "/usr/local/cuda-*/bin/ncu",
    "/opt/nvidia/nsight-compute/*/ncu",
)
CLOCK_CONTROL = "base"  # ncu's default: SM and memory clocks locked to the GPU's base clocks
CLOCK_CONTROLS = ("base", "none")  # "none": the GPU picks its clocks, as in a timed run
CACHE_CONTROL = "all"  # ncu's default: every cache flushed before each replayed pass
PERMISSION_PAGE = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
CANARY_TOLERANCE = 0.02  # the canary's DRAM reads may differ from 2*N*4 bytes by this share


class ProfileError(RuntimeError):
    """The profiler gave no record that can be believed. `reason` names the failure (see the
    module's docstring); the message says what to do about it."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


# -- what is read ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """One ncu metric: its name (Nsight Compute 2025.x), the `KernelProfile` field or figure it
    feeds, its unit as ncu prints it with `--print-units base` ("" where it has none), what it
    means, and the GPU generations (compute capability majors) that have it (None: all of sm_80
    and sm_90)."""

    name: str
    feeds: str
    unit: str
    meaning: str
    majors: tuple[int, ...] | None = None


METRICS: tuple[Metric, ...] = (
    Metric(
        "gpu__time_duration.sum",
        "duration_ns",
        "nsecond",
        "the launch's duration on the GPU, clocks locked to base",
    ),
    Metric("dram__bytes_read.sum", "dram_bytes_read", "byte", "bytes read from DRAM (HBM)"),
    Metric(
        "dram__bytes_write.sum",
        "dram_bytes_written",
        "byte",
        "bytes written to DRAM; dirty lines still in L2 at the end are not counted",
    ),
    Metric(
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
        "l1_sectors_per_load",
        "sector",
        "32-byte sectors L1 looked up for global loads (LDG). Copies by TMA (Triton's tensor "
        "descriptors) are not counted here; a tl.dot matmul of pointer loads, pipelined "
        "(num_stages=3), had every byte it loads counted here on an H200 with Triton 3.6",
    ),
    Metric(
        "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
        "l1_sectors_per_load",
        "request",
        "requests (one per warp-wide load instruction) for global loads; the fewest sectors a "
        "request can touch is its bytes over 32: 4 for a float32 per thread, 16 for 16-byte "
        "vector loads",
    ),
    Metric(
        "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
        "l1_sectors_per_store",
        "sector",
        "32-byte sectors L1 handled for global stores",
    ),
    Metric(
        "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
        "l1_sectors_per_store",
        "request",
        "requests (one per warp-wide store instruction) for global stores",
    ),
    Metric(
        "lts__t_sectors_srcunit_tex_op_read.sum",
        "l2_sectors_per_load",
        "sector",
        "L2 sectors read for L1 (loads that missed L1)",
    ),
    Metric(
        "lts__t_requests_srcunit_tex_op_read.sum",
        "l2_sectors_per_load",
        "request",
        "L2 read requests from L1",
    ),
    Metric(
        "lts__t_sectors_srcunit_tex_op_write.sum",
        "l2_sectors_per_store",
        "sector",
        "L2 sectors written for L1 (stores)",
    ),
    Metric(
        "lts__t_requests_srcunit_tex_op_write.sum",
        "l2_sectors_per_store",
        "request",
        "L2 write requests from L1",
    ),
    Metric(
        "lts__t_sector_hit_rate.pct",
        "l2_hit_rate_pct",
        "%",
        "share of L2 sector lookups that hit",
    ),
    Metric(
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "achieved_occupancy_pct",
        "%",
        "achieved occupancy: resident warps per active cycle, as a share of the SM's maximum",
    ),
    Metric(
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        "memory_throughput_pct",
        "%",
        "memory throughput, of its peak: the busiest of the memory units (DRAM, L2, L1, "
        "shared memory), as Nsight Compute's Speed of Light section shows it",
    ),
    Metric(
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "compute_throughput_pct",
        "%",
        "compute (SM) throughput, of its peak: the busiest of the SMs' pipes and issue, as "
        "Nsight Compute's Speed of Light section shows it",
    ),
    Metric(
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "tensor_pipe_pct",
        "%",
        "cycles the tensor pipe ran floating-point MMA, of its peak: warp-level mma.sync (HMMA, "
        "Ampere's tl.dot) and, on Hopper, warpgroup wgmma too (HGMMA, QGMMA: Hopper's tl.dot); "
        "integer MMA (IMMA) is not counted",
    ),
)
# The warp states between two issued instructions (Nsight Compute's Warp State Statistics): each
# metric is the average cycles per issued instruction that warps spent in that state. "selected"
# is the cycle of issuing itself, not a stall. "gmma" (waiting on warpgroup MMA) is Hopper's.
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
STALL_REASONS: tuple[tuple[str, tuple[int, ...] | None], ...] = (
    ("barrier", None),
    ("branch_resolving", None),
    ("dispatch_stall", None),
    ("drain", None),
    ("gmma", (9,)),
    ("imc_miss", None),
    ("lg_throttle", None),
    ("long_scoreboard", None),
    ("math_pipe_throttle", None),
    ("membar", None),
    ("mio_throttle", None),
    ("misc", None),
    ("no_instruction", None),
    ("not_selected", None),
    ("selected", None),
    ("short_scoreboard", None),
    ("sleeping", None),
    ("tex_throttle", None),
    ("wait", None),
)
NOT_A_STALL = "selected"


def _has(majors: tuple[int, ...] | None, major: int | None) -> bool:
    return majors is None or major in majors


def metric_names(major: int | None) -> list[str]:
    """The names ncu is asked for on a GPU of compute capability `major` (8 Ampere, 9 Hopper)."""
    names = [m.name for m in METRICS if _has(m.majors, major)]
    names += [STALL_METRIC.format(r) for r, majors in STALL_REASONS if _has(majors, major)]
    return list(dict.fromkeys(names))


# -- the record -----------------------------------------------------------------------------------

CLOCK_NOTES = {
    "base": "Clocks locked to the GPU's base clocks (ncu --clock-control base): durations are "
    "longer than at the boost clocks a timed run uses; compare them only with each other.",
    "none": "Clocks not locked (ncu --clock-control none): the GPU chose its clocks as it ran, "
    "so durations move with its boost and temperature from one profile to the next.",
}
CLOCK_NOTE = CLOCK_NOTES[CLOCK_CONTROL]
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


def _tuple(value) -> tuple | None:
    return None if value is None else tuple(value)


@dataclass(frozen=True)
class Stall:
    """One warp state that held a kernel's warps: average cycles per issued instruction spent
    in it, and its share of all the stalled cycles (every state but issuing)."""

    reason: str
    cycles_per_issue: float
    share: float


@dataclass(frozen=True)
class KernelProfile:
    """The counters of one profiled launch, in base units (bytes, nanoseconds, percent). None
    where the GPU has no such counter or the ratio has no denominator (no global stores, say).
    `raw` keeps every metric asked for that ncu returned for the launch, by name, in base
    units."""

    kernel: str
    launch: int  # ncu's ID of the launch: its order among the profiled launches
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    duration_ns: float | None
    dram_bytes_read: float | None
    dram_bytes_written: float | None
    l1_sectors_per_load: float | None
    l1_sectors_per_store: float | None
    l2_sectors_per_load: float | None
    l2_sectors_per_store: float | None
    l2_hit_rate_pct: float | None
    achieved_occupancy_pct: float | None
    tensor_pipe_pct: float | None
    memory_throughput_pct: float | None = None
    compute_throughput_pct: float | None = None
    stalls: tuple[Stall, ...] = ()  # the top reasons, most first
    raw: dict[str, float | None] = field(default_factory=dict)

    @property
    def l1_load_sectors(self) -> float | None:
        """The 32-byte sectors L1 looked up for global loads, in all (not per request)."""
        return self.raw.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")

    def __post_init__(self):  # JSON and recordings give lists and dicts back
        object.__setattr__(self, "grid", _tuple(self.grid))
        object.__setattr__(self, "block", _tuple(self.block))
        stalls = tuple(s if isinstance(s, Stall) else Stall(**s) for s in self.stalls)
        object.__setattr__(self, "stalls", stalls)


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
    """The profiled launches and the conditions they were measured under. `to_json()` and
    `Profile.from_json(text)` keep it as data; `show(profile)` prints it (and records it)."""

    kernels: tuple[KernelProfile, ...]
    conditions: Conditions

    def __post_init__(self):
        kernels = tuple(k if isinstance(k, KernelProfile) else _kernel(k) for k in self.kernels)
        object.__setattr__(self, "kernels", kernels)
        if isinstance(self.conditions, Mapping):
            object.__setattr__(self, "conditions", Conditions(**self.conditions))

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping) -> Profile:
        return cls(data["kernels"], data["conditions"])

    @classmethod
    def from_json(cls, text: str) -> Profile:
        return cls.from_dict(json.loads(text))

    def __str__(self) -> str:
        return "\n".join(lines(self))


def _kernel(data: Mapping) -> KernelProfile:
    return KernelProfile(**data)


# -- reading ncu's CSV ----------------------------------------------------------------------------

_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d*)?([eE][+-]?\d+)?$")
_PREFIXES = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_PREFIXES.update({"m": 1e-3, "u": 1e-6, "n": 1e-9, "p": 1e-12})
_BASES = ("byte", "second", "sector", "request")
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
    """`value`, printed in `unit`, in the metric's `expected` unit ("byte", "nsecond", "sector",
    "request", "%", or "" for any): ncu scales units unless told `--print-units base`, so
    "Mbyte" and "usecond" are converted, and "ns" is "nsecond". A count printed with no unit is
    taken as it is. Nsight Compute 2025.3.1 on an H200, with `--print-units base`, printed
    gpu__time_duration in "ns", l1tex__t_requests_pipe_lsu_mem_global_op_ld and _st with no
    unit, and the stall ratios in "inst". A unit of another kind is an error."""
    unit = _SHORT_TIME.get(unit, unit)
    if value is None or expected == "" or unit == expected:
        return value
    if unit == "" and expected in _COUNTS:
        return value
    want = "second" if expected.endswith("second") else expected
    scale = 1e9 if want == "second" else 1.0  # time in nanoseconds
    for base in _BASES:
        if base == want and unit.endswith(base) and unit[: -len(base)] in _PREFIXES:
            return value * _PREFIXES[unit[: -len(base)]] * scale
    raise ProfileError(
        "bad-output",
        f"ncu gave a value in {unit!r} where {expected!r} was expected: the metric's meaning may "
        "have changed in this version of Nsight Compute; check it with `ncu --query-metrics`",
    )


def _launch_shape(text: str | None) -> tuple[int, int, int] | None:
    m = _TUPLE.match((text or "").strip())
    return tuple(int(g) for g in m.groups()) if m else None


def parse_csv(
    text: str, *, top_stalls: int = 3, asked: Sequence[str] | None = None
) -> list[KernelProfile]:
    """The launches of ncu's `--csv --page raw` output: a header row of column names (ncu's own
    columns, "ID", "Kernel Name", "Block Size", "Grid Size", ..., then one per metric), a row of
    units, then one row per profiled launch; quoted fields, numbers with thousands separators.
    Only the columns of the metrics asked for (METRICS and the stall metrics) are read as
    numbers, into each launch's `raw`; ncu's other columns stay text: its own ones, the
    hundreds of "__" ones it adds unasked (device__attribute_display_name,
    device__attribute_confidential_computing_mode, which reads "No-CC" on an H200), and the
    .avg, .min and .max it adds beside a .sum asked for. Lines that are not CSV rows (==PROF==
    and ==WARNING== lines, the program's own output) are passed over. An empty list where ncu
    printed no header. Where `asked` names the metrics ncu was asked for, one with no column
    is "unknown-metric": ncu leaves out a metric it does not know, without an error."""
    expected = {m.name: m.unit for m in METRICS}  # every metric asked for, on any GPU
    expected.update({STALL_METRIC.format(r): "" for r, _ in STALL_REASONS})
    rows = [r for r in csv.reader(line for line in text.splitlines() if line.startswith('"'))]
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
    metric_columns = [i for i, name in enumerate(header) if name in expected]
    found = []
    for row in rows[start + 2 :]:
        if row == header:  # a second process's table
            continue
        if len(row) != len(header):
            raise ProfileError(
                "bad-output",
                f"a row of ncu's CSV has {len(row)} fields where its header has {len(header)}",
            )
        cells = dict(zip(header, row, strict=True))
        raw = {
            header[i]: in_base_units(number(row[i]), units[i], expected.get(header[i], ""))
            for i in metric_columns
        }
        found.append(_record(cells, raw, top_stalls))
    return found


def _ratio(raw: Mapping, top: str, bottom: str) -> float | None:
    a, b = raw.get(top), raw.get(bottom)
    if a is None or b is None or b == 0 or math.isnan(b):
        return None
    return a / b


def stalls_of(raw: Mapping[str, float | None], top: int = 3) -> tuple[Stall, ...]:
    """The `top` warp states other than issuing that held the warps most, with each one's share
    of the stalled cycles."""
    cycles = {}
    for reason, _ in STALL_REASONS:
        value = raw.get(STALL_METRIC.format(reason))
        if reason != NOT_A_STALL and value is not None and not math.isnan(value):
            cycles[reason] = value
    total = sum(cycles.values())
    if total <= 0:
        return ()
    ranked = sorted(cycles.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return tuple(Stall(reason, value, value / total) for reason, value in ranked if value > 0)


def _record(cells: Mapping[str, str], raw: dict, top_stalls: int) -> KernelProfile:
    return KernelProfile(
        kernel=cells.get("Kernel Name", ""),
        launch=int(number(cells.get("ID", "")) or 0),
        grid=_launch_shape(cells.get("Grid Size")),
        block=_launch_shape(cells.get("Block Size")),
        duration_ns=raw.get("gpu__time_duration.sum"),
        dram_bytes_read=raw.get("dram__bytes_read.sum"),
        dram_bytes_written=raw.get("dram__bytes_write.sum"),
        l1_sectors_per_load=_ratio(
            raw,
            "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
            "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
        ),
        l1_sectors_per_store=_ratio(
            raw,
            "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
            "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
        ),
        l2_sectors_per_load=_ratio(
            raw, "lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_requests_srcunit_tex_op_read.sum"
        ),
        l2_sectors_per_store=_ratio(
            raw,
            "lts__t_sectors_srcunit_tex_op_write.sum",
            "lts__t_requests_srcunit_tex_op_write.sum",
        ),
        l2_hit_rate_pct=raw.get("lts__t_sector_hit_rate.pct"),
        achieved_occupancy_pct=raw.get("sm__warps_active.avg.pct_of_peak_sustained_active"),
        tensor_pipe_pct=raw.get(
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
        ),
        memory_throughput_pct=raw.get(
            "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
        ),
        compute_throughput_pct=raw.get("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        stalls=stalls_of(raw, top_stalls),
        raw=raw,
    )


# -- what ncu said went wrong ---------------------------------------------------------------------


def _tail(text: str, n: int = 8) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-n:]
    return " | ".join(kept)


def _available_kernels(output: str) -> list[str]:
    """The kernels ncu lists after "No kernels were profiled." ("Available Kernels: 1. name")."""
    _, _, after = output.partition("Available Kernels:")
    return re.findall(r"^\s*\d+\.\s+(\S.*?)\s*$", after, flags=re.M)


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


def failure(output: str, returncode: int, kernel_filter: str) -> ProfileError | None:
    """What ncu's output (its log, the program's stdout and stderr) says went wrong, as the
    error to raise, or None where it says nothing wrong."""
    if "ERR_NVGPUCTRPERM" in output:
        return ProfileError(
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
        return unknown_metric([unknown[0].strip()], "does not know")
    if "The application returned an error code" in output or (
        returncode != 0 and "Traceback (most recent call last)" in output
    ):
        return ProfileError(
            "child-failed",
            "the profiled program failed before its kernels could be profiled; fix it so that "
            f"it runs on its own first. Its last lines: {_tail(output)}",
        )
    if "No kernels were profiled" in output:
        seen = _available_kernels(output)
        listed = f" It launched: {', '.join(seen)}." if seen else ""
        return ProfileError(
            "no-match",
            (
                f"ncu profiled no kernel matching {kernel_filter}: name the Triton kernels as "
                f"their `def` names them (the function under @triton.jit).{listed}"
            )
            if kernel_filter
            else "ncu profiled no kernel: the profiled call launched none",
        )
    if returncode != 0:
        return ProfileError(
            "no-rows", f"ncu exited with status {returncode}. Its last lines: {_tail(output)}"
        )
    return None


def refuse_bad_values(launches: Sequence[KernelProfile]) -> None:
    """Raise "bad-values" for a launch whose counters ncu returned as NaN, or as zeros where a
    kernel that ran cannot have zero (its duration, or all of its memory traffic at once)."""
    for k in launches:
        nan = sorted(n for n, v in k.raw.items() if v is not None and math.isnan(v))
        sectors = [k.raw.get(m.name) for m in METRICS if m.unit == "sector"]
        traffic = [k.dram_bytes_read, k.dram_bytes_written, *sectors]
        wrong = [f"{n} (NaN)" for n in nan]
        if k.duration_ns is None:
            wrong.append("no duration")
        elif k.duration_ns == 0:
            wrong.append("a duration of zero")
        if all(v == 0 for v in traffic):
            wrong.append("zero for all of its DRAM and cache traffic")
        if wrong:
            what = ", ".join(wrong)
            raise ProfileError(
                "bad-values",
                f"ncu returned {what} for {k.kernel}: the counters were not read. Another "
                "profiler may hold them (another ncu, DCGM's profiling metrics: stop it), or "
                "this Nsight Compute does not support this GPU and driver. Run "
                "grader.runtime.profile.canary() to check the machine.",
            )


# -- running ncu ----------------------------------------------------------------------------------


def find_ncu(explicit: str | os.PathLike | None = None) -> Path:
    """The ncu to run: `explicit`, else COURSE_NCU, else `ncu` on PATH, else the first of
    NCU_PLACES that exists (the newest version first). Raises "no-ncu" saying where to get it."""
    given = explicit or os.environ.get(NCU_ENV)
    if given:
        path = Path(given)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        source = "given" if explicit else f"named by {NCU_ENV}"
        raise ProfileError("no-ncu", f"the ncu {source}, {path}, is not an executable file.")
    on_path = shutil.which("ncu")
    if on_path:
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
    """The folder Nsight Compute is installed in, which a sandbox that binds only /usr must bind
    too (grader.grading.jail), or None where no ncu is found. The CUDA Toolkit's bin/ncu is a
    script that runs the newest `nsight-compute-*` folder beside bin/, or else the newest under
    /opt/nvidia/nsight-compute/; the ncu of an install itself is in it, beside its sections/."""
    try:
        tool = Path(os.path.realpath(find_ncu()))
    except ProfileError:
        return None
    if (tool.parent / "sections").is_dir():
        return tool.parent
    places = [str(tool.parent.parent / "nsight-compute-*"), "/opt/nvidia/nsight-compute/*"]
    for place in places:
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
    """ncu's `-k` argument for exactly these kernel names; "" for every kernel (no kernels
    named)."""
    if not kernels:
        return ""
    if not all(isinstance(k, str) and re.fullmatch(r"[A-Za-z_]\w*", k) for k in kernels):
        raise ValueError(f"name the Triton kernels to profile by their def names, not {kernels!r}")
    return f"regex:^({'|'.join(kernels)})$"


def command(
    ncu: Path,
    target: str | os.PathLike,
    spec: Path,
    log: Path,
    *,
    kernels: Sequence[str],
    metrics: Sequence[str],
    launch_count: int | None,
    launch_skip: int = 0,
    clock_control: str = CLOCK_CONTROL,
) -> list[str]:
    """The ncu command line that profiles `target` (see `profile`)."""
    if clock_control not in CLOCK_CONTROLS:
        raise ValueError(f"clock_control is one of {CLOCK_CONTROLS}, not {clock_control!r}")
    script = _is_script(target)
    argv = [str(ncu), "--csv", "--page", "raw", "--print-units", "base"]
    argv += ["--metrics", ",".join(metrics), "--print-kernel-base", "function"]
    argv += ["-k", kernel_filter(kernels)] if kernels else []
    argv += ["--launch-count", str(launch_count)] if launch_count else []
    argv += ["--launch-skip", str(launch_skip)]
    argv += ["--clock-control", clock_control, "--cache-control", CACHE_CONTROL]
    argv += ["--replay-mode", "kernel", "--profile-from-start", "on" if script else "off"]
    argv += ["--log-file", str(log), sys.executable]
    argv += [os.path.abspath(target)] if script else ["-m", "grader.runtime.profile", str(spec)]
    return argv


def _is_script(target: str | os.PathLike) -> bool:
    return isinstance(target, os.PathLike) or str(target).endswith(".py")


def collect(
    target: str | os.PathLike,
    kernels: Sequence[str],
    *,
    major: int | None,
    params: Mapping | None = None,
    launch_count: int | None = None,
    launch_skip: int = 0,
    clock_control: str = CLOCK_CONTROL,
    top_stalls: int = 3,
    ncu: str | os.PathLike | None = None,
    timeout: float = 600,
    sources: Sequence[str] = (),
    problems: Sequence[Mapping] = (),
) -> list[KernelProfile]:
    """Run ncu on `target` and read its launches, refusing any failure it reports; no device
    check (`profile` does that, and adds the conditions). `sources`: code the child loads as the
    module SOURCES_MODULE before it resolves `target`. `problems` ({"problem": target, "params":
    params} each) replace `target` and `params`: the child makes each call in turn, a MARKER
    launched before each, and every launch `kernels` matches is read (`each`)."""
    if not problems and not _is_script(target) and ":" not in str(target):
        raise ValueError(f"target is 'module:function' or a script's path, not {target!r}")
    tool = find_ncu(ncu)
    regex = kernel_filter(kernels)
    # one launch per kernel named, or every launch of the call where none is; of several calls,
    # every launch that matches
    count = None if problems else launch_count or len(kernels) or None
    asked = metric_names(major)
    env = dict(os.environ)
    # the parent's imports, its working folder ("" in sys.path) included: the child runs in a
    # folder of its own
    paths = dict.fromkeys(os.path.abspath(p or ".") for p in sys.path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if Path(p).is_dir())
    env["COURSE_MODE"] = device.GPU
    with tempfile.TemporaryDirectory(prefix="profile-") as tmp:
        spec, log = Path(tmp) / "spec.json", Path(tmp) / "ncu.csv"
        single = [{"problem": str(target), "params": dict(params or {})}]
        spec.write_text(
            json.dumps(
                {
                    "problems": [dict(p) for p in problems] or single,
                    "markers": bool(problems),
                    "sources": list(sources),
                }
            )
        )
        argv = command(
            tool,
            target,
            spec,
            log,
            kernels=kernels,
            metrics=asked,
            launch_count=count,
            launch_skip=launch_skip,
            clock_control=clock_control,
        )
        returncode, stdout, stderr = _run(argv, cwd=tmp, env=env, timeout=timeout)
        logged = log.read_text(errors="replace") if log.exists() else ""
    output = "\n".join([logged, stdout, stderr])
    error = failure(output, returncode, regex)
    if error is not None:
        raise error
    launches = parse_csv(logged, top_stalls=top_stalls, asked=asked) or parse_csv(
        stdout, top_stalls=top_stalls, asked=asked
    )
    if not launches:
        raise ProfileError(
            "no-rows",
            f"ncu printed no rows of counters (exit {returncode}). Its last lines: {_tail(output)}",
        )
    missing = [k for k in kernels if not any(p.kernel == k for p in launches)]
    if missing and len(launches) < (count or 0):
        raise ProfileError(
            "no-match",
            f"ncu profiled {', '.join(sorted({p.kernel for p in launches}))} but not "
            f"{', '.join(missing)}: the profiled call never launched it, or under another name",
        )
    refuse_bad_values(launches)
    return launches


def _run(argv: list[str], *, cwd: str, env: dict, timeout: float) -> tuple[int, str, str]:
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
                "profile fewer launches (launch_count) or a smaller problem",
            ) from None
    return proc.returncode, stdout, stderr


@dataclass(frozen=True)
class _Gpu:
    name: str
    major: int
    minor: int
    l2_bytes: int | None


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


def profile(
    target: str | os.PathLike,
    kernels: Sequence[str],
    *,
    params: Mapping | None = None,
    launch_count: int | None = None,
    launch_skip: int = 0,
    clock_control: str = CLOCK_CONTROL,
    top_stalls: int = 3,
    ncu: str | os.PathLike | None = None,
    timeout: float = 600,
    sources: Sequence[str] = (),
) -> Profile:
    """Profile the launches of `kernels` (Triton kernels' def names) made by `target`
    ("module:function", a factory called with `params` in the child that returns the call to
    profile; or a script's path) under ncu in a child process, and return them with the
    conditions. At most `launch_count` launches (one per kernel by default), after `launch_skip`
    of them. Clocks locked to base unless `clock_control` is "none"; caches always flushed.
    Raises ProfileError (its `reason` and message say what failed and what to do). `sources`:
    code loaded in the child as the module SOURCES_MODULE, which `target` may name (`of` uses
    it)."""
    gpu = _gpu()
    tool = find_ncu(ncu)
    launches = collect(
        target,
        kernels,
        major=gpu.major,
        params=params,
        launch_count=launch_count,
        launch_skip=launch_skip,
        clock_control=clock_control,
        top_stalls=top_stalls,
        ncu=tool,
        timeout=timeout,
        sources=sources,
    )
    return Profile(tuple(launches), _conditions(gpu, tool, clock_control, kernels))


def _conditions(gpu: _Gpu, tool: Path, clock_control: str, kernels: Sequence[str]) -> Conditions:
    l2 = f", {gpu.l2_bytes:,} bytes here" if gpu.l2_bytes else ""
    return Conditions(
        device=gpu.name,
        capability=f"sm_{gpu.major}{gpu.minor}",
        l2_bytes=gpu.l2_bytes,
        ncu_version=ncu_version(tool),
        clock_control=clock_control,
        kernel_filter=kernel_filter(kernels),
        notes=(CLOCK_NOTES[clock_control], CACHE_NOTE, REPLAY_NOTE, WRITE_NOTE.format(l2=l2)),
        date=time.strftime("%Y-%m-%d"),
    )


# -- showing --------------------------------------------------------------------------------------


def _fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if math.isnan(value):
        return "NaN"
    return f"{value:,.{digits}f}{unit}"


def _bytes(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1e6:,.2f} MB"


def lines(p: Profile) -> list[str]:
    """The profile for people: the conditions, then each launch's figures, then the notes."""
    c = p.conditions
    clocks = "locked to base" if c.clock_control == "base" else "not locked"
    out = [
        f"Nsight Compute {c.ncu_version} on {c.device} ({c.capability}), {c.date}: clocks "
        f"{clocks} (--clock-control {c.clock_control}), caches flushed before each pass "
        f"(--cache-control {c.cache_control})"
    ]
    for k in p.kernels:
        shape = f"grid {k.grid}, block {k.block}" if k.grid else "launch shape n/a"
        duration = None if k.duration_ns is None else k.duration_ns / 1e3
        sectors = (
            f"L1 loads {_fmt(k.l1_sectors_per_load, '', 2)}, "
            f"stores {_fmt(k.l1_sectors_per_store, '', 2)}; "
            f"L2 loads {_fmt(k.l2_sectors_per_load, '', 2)}, "
            f"stores {_fmt(k.l2_sectors_per_store, '', 2)}"
        )
        rows = (
            ("duration", _fmt(duration, " us", 2)),
            (
                "DRAM read / written",
                f"{_bytes(k.dram_bytes_read)} / {_bytes(k.dram_bytes_written)}",
            ),
            ("sectors per request", sectors),
            ("L2 hit rate", _fmt(k.l2_hit_rate_pct, "%")),
            ("achieved occupancy", _fmt(k.achieved_occupancy_pct, "%")),
            ("tensor pipes", _fmt(k.tensor_pipe_pct, "%")),
            (
                "memory / compute",
                f"{_fmt(k.memory_throughput_pct, '%')} / "
                f"{_fmt(k.compute_throughput_pct, '%')} of peak",
            ),
            ("top stalls (of stalled)", ", ".join(f"{s.reason} {s.share:.0%}" for s in k.stalls)),
        )
        out.append(f"{k.kernel} (launch {k.launch}; {shape})")
        out += [f"  {name:<24} {value or 'n/a'}" for name, value in rows]
    out += [f"Note: {note}" for note in c.notes]
    return out


@recorded.replayable("grader.runtime.profile:show", figure=False)
def show(profile_: Profile) -> None:
    """Print a profile. In a recorded cell the profile is kept as data, and a laptop replays
    this call with it."""
    print("\n".join(lines(profile_)))


# A column of `compare`: its header, and how it reads a launch.
COLUMNS: dict[str, tuple[str, Callable[[KernelProfile], str]]] = {
    "duration": ("us", lambda k: _fmt(None if k.duration_ns is None else k.duration_ns / 1e3)),
    "dram_read": ("DRAM read MB", lambda k: _mb(k.dram_bytes_read)),
    "dram_written": ("DRAM written MB", lambda k: _mb(k.dram_bytes_written)),
    "l1_load": ("L1 sectors/load", lambda k: _fmt(k.l1_sectors_per_load, "", 2)),
    "l1_read": (
        "L1 load MB",
        lambda k: _mb(None if k.l1_load_sectors is None else 32 * k.l1_load_sectors),
    ),
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


def _mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1e6:,.1f}"


# The columns a row summing a profile's launches fills: what adds up across launches.
SUMMED = {
    "duration": "duration_ns",
    "dram_read": "dram_bytes_read",
    "dram_written": "dram_bytes_written",
}


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
    """One row per profiled launch of each entry of `profiles` (label: Profile), the `columns`
    named (keys of COLUMNS) side by side, under the conditions of the first; a profile of
    several launches adds a row of their sum (duration and DRAM bytes). With `minimum_read`
    (label: bytes), a last column of the DRAM bytes read (all launches) over that minimum. In a
    recorded cell the profiles are kept as data, and a laptop replays this call with them."""
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown:
        raise ValueError(f"columns are among {', '.join(COLUMNS)}, not {', '.join(unknown)}")
    rows = []
    for label, p in profiles.items():
        several = len(p.kernels) > 1
        for k in p.kernels:
            rows.append([f"{label}: {k.kernel}" if several else label])
            rows[-1] += [COLUMNS[c][1](k) for c in columns]
        if several:
            summed = KernelProfile(label, 0, None, None, *([None] * 10))
            summed = dataclasses.replace(summed, **{f: total(p, f) for f in SUMMED.values()})
            rows.append([f"{label}: all {len(p.kernels)}"])
            rows[-1] += [COLUMNS[c][1](summed) if c in SUMMED else "" for c in columns]
        if minimum_read is not None:
            least, read = minimum_read.get(label), total(p, "dram_bytes_read")
            rows[-1].append(_fmt(read / least if least and read else None, "x", 2))
            for row in rows[-len(p.kernels) - several : -1]:
                row.append("")
    header = [""] + [COLUMNS[c][0] for c in columns]
    header += ["read / minimum"] if minimum_read is not None else []
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    first = next(iter(profiles.values()), None)
    if first is not None:
        print(lines(first)[0])
    for r in [header, *rows]:
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())


def recorded_profiles(key: str, nth: int = 0) -> dict[str, Profile]:
    """The profiles the recorded cell `key` compared (in the `nth` `compare` it called), rebuilt
    from the recording that ships with the course: the same figures on every machine, for the
    exercises that read them (while this run records, the run's own: recorded.entry). Raises
    RecordingError where none was recorded."""
    entry = recorded.entry(key)
    calls = (
        []
        if entry is None
        else [o for o in entry["outputs"] if o.get("call") == "grader.runtime.profile:compare"]
    )
    if len(calls) <= nth:
        raise recorded.RecordingError(
            f"no recorded profiles under {key} (comparison {nth}): run `make recordings` on a GPU "
            "with Nsight Compute"
        )
    return dict(recorded.rebuilt(calls[nth]["args"])[0])


# -- the canary -----------------------------------------------------------------------------------

CANARY_PROBLEM = "grader.runtime.profile:canary_problem"


def canary_problem(n: int):
    """The call the canary profiles: PyTorch's add of x = 0, 1, ..., n - 1 and y = 2x into an
    output made beforehand (one elementwise kernel: 2*n*4 bytes read, n*4 stored; 3x, for a test
    to check), on this mode's device. PyTorch's kernel, not a Triton one written here: the
    runtime ships to students, and a Triton vector add is an exercise's answer."""
    import torch

    where = device.current().torch_device
    x = torch.arange(n, dtype=torch.float32, device=where)
    y = 2 * x
    out = torch.empty_like(x)
    return lambda: torch.add(x, y, out=out)


@dataclass(frozen=True)
class CanaryResult:
    """The canary's verdict: a vector add of `n` float32 elements reads 2*n*4 bytes from DRAM
    (within CANARY_TOLERANCE) and writes between n*4 less the L2's size and n*4 (the rest may
    still be dirty in L2 when it ends). `problems` says what was wrong; empty when it passed."""

    n: int
    l2_bytes: int
    dram_bytes_read: float | None
    dram_bytes_written: float | None
    problems: tuple[str, ...]
    profile: Profile | None = None

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def expected_read(self) -> int:
        return 2 * self.n * 4

    @property
    def written_range(self) -> tuple[int, int]:
        return max(0, self.n * 4 - self.l2_bytes), self.n * 4

    def __str__(self) -> str:
        low, high = self.written_range
        head = (
            f"profiler canary, a vector add of {self.n:,} float32: DRAM read "
            f"{_fmt(self.dram_bytes_read, ' B', 0)} (expected {self.expected_read:,} B within "
            f"{CANARY_TOLERANCE:.0%}), written {_fmt(self.dram_bytes_written, ' B', 0)} "
            f"(expected {low:,} to {high:,} B)"
        )
        if self.passed:
            return head + ": the counters can be believed here."
        return head + ": FAILED: " + "; ".join(self.problems)


def judge_canary(
    n: int,
    l2_bytes: int,
    dram_bytes_read: float | None,
    dram_bytes_written: float | None,
    profile_: Profile | None = None,
) -> CanaryResult:
    """The canary's verdict on the counters ncu returned for its vector add of `n` float32."""
    problems = []
    expected = 2 * n * 4
    low, high = max(0, n * 4 - l2_bytes), n * 4
    for what, value in (("read", dram_bytes_read), ("written", dram_bytes_written)):
        if value is None:
            problems.append(f"no DRAM bytes {what}: the counter was not returned")
        elif math.isnan(value):
            problems.append(f"DRAM bytes {what} is NaN: the counter was not read")
        elif value == 0:
            problems.append(
                f"DRAM bytes {what} is zero: the counters were not read (another profiler "
                "holding them, or an unsupported GPU and driver)"
            )
    if dram_bytes_read and not math.isnan(dram_bytes_read):
        off = dram_bytes_read / expected - 1
        if abs(dram_bytes_read - expected) > CANARY_TOLERANCE * expected:
            problems.append(
                f"DRAM bytes read {dram_bytes_read:,.0f} is {off:+.1%} off 2*N*4 = {expected:,}: "
                + (
                    "too many bytes (caches not flushed, or another kernel counted)"
                    if off > 0
                    else "too few bytes (inputs found in a cache that was not flushed)"
                )
            )
    if dram_bytes_written and not math.isnan(dram_bytes_written):
        if dram_bytes_written > high:
            problems.append(
                f"DRAM bytes written {dram_bytes_written:,.0f} is more than the N*4 = {high:,} "
                "the kernel stores: too many bytes (another kernel counted?)"
            )
        elif dram_bytes_written < low:
            problems.append(
                f"DRAM bytes written {dram_bytes_written:,.0f} is less than N*4 less the L2's "
                f"size = {low:,}: more stayed in L2 than it holds"
            )
    return CanaryResult(n, l2_bytes, dram_bytes_read, dram_bytes_written, tuple(problems), profile_)


def canary(n: int = 1 << 25, *, ncu: str | os.PathLike | None = None) -> CanaryResult:
    """Profile a vector add of `n` float32 elements (the default moves 384 MiB, well past any
    L2) and judge its DRAM counters (`judge_canary`). Raises ProfileError where nothing could be
    profiled (no GPU, no ncu, no permission), and returns a failed result where ncu returned
    numbers that cannot be right."""
    gpu = _gpu()
    if not gpu.l2_bytes:
        raise ProfileError(
            "no-gpu", "torch does not report this GPU's L2 size (L2_cache_size): update torch"
        )
    try:
        found = profile(CANARY_PROBLEM, [], params={"n": n}, ncu=ncu)
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
CONSTANTS = (bool, int, float, str)  # the values `each` sends by their repr
MARKER = "course_profile_marker"  # launched before each call `each` profiles (profile_marker)


@dataclass(frozen=True)
class Call:
    """One call for `each` to profile: `factory(**params)`, a function defined in the notebook,
    makes it in the child; the launches of `kernels` it makes are profiled, the first of each
    (every launch it makes where none is named: PyTorch's own kernels too, by their function
    names)."""

    factory: Callable
    kernels: Sequence[str] = ()
    params: Mapping = field(default_factory=dict)

    def __post_init__(self):
        if not callable(self.factory) or getattr(self.factory, "__name__", None) is None:
            raise TypeError(
                f"the factory is the function to call in the child, not {self.factory!r}"
            )
        kernel_filter(self.kernels)  # plain names, or ValueError


def of(
    factory: Callable,
    *,
    kernels: Sequence[str],
    params: Mapping | None = None,
    **options,
) -> Profile:
    """Profile the call `factory(**params)` makes (a `Call` by itself: see `each`)."""
    return each({"": Call(factory, kernels, params or {})}, **options)[""]


def each(
    calls: Mapping[str, Call],
    *,
    clock_control: str = CLOCK_CONTROL,
    top_stalls: int = 3,
    ncu: str | os.PathLike | None = None,
    timeout: float = 600,
) -> dict[str, Profile]:
    """Profile several calls, {label: Call}, in one child process under one ncu: {label:
    Profile}, at the cost of one start of Python, torch and ncu (seconds each) for them all.
    The child gets each factory's source and what it reaches (`sources_for`): the notebook's
    functions and Triton kernels it names, and theirs, by their source; constants (numbers,
    text) by value; modules and importable functions by an import. It makes each call in
    turn, runs it once to compile and tune, then once more between cudaProfilerStart and
    cudaProfilerStop, just after a launch of MARKER, which tells where the call's own launches
    begin in what ncu lists."""
    if not calls:
        raise ValueError("name at least one call to profile")
    gpu = _gpu()
    tool = find_ncu(ncu)
    every = any(not c.kernels for c in calls.values())
    named = [] if every else [*dict.fromkeys(k for c in calls.values() for k in c.kernels), MARKER]
    launches = collect(
        "",
        named,
        major=gpu.major,
        clock_control=clock_control,
        top_stalls=top_stalls,
        ncu=tool,
        timeout=timeout,
        sources=list(dict.fromkeys(s for c in calls.values() for s in sources_for(c.factory))),
        problems=[
            {"problem": f"{SOURCES_MODULE}:{c.factory.__name__}", "params": dict(c.params)}
            for c in calls.values()
        ],
    )
    found = {}
    for (label, call), own in zip(calls.items(), _split(launches, len(calls)), strict=True):
        firsts = {k: _first(own, k) for k in call.kernels}  # the first launch of each named
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
        found[label] = Profile(tuple(kept), _conditions(gpu, tool, clock_control, call.kernels))
    return found


def _first(launches: Sequence[KernelProfile], kernel: str) -> KernelProfile | None:
    return next((k for k in launches if k.kernel == kernel), None)


def _split(launches: Sequence[KernelProfile], calls: int) -> list[list[KernelProfile]]:
    """The launches of each call: those after each MARKER, in ncu's order."""
    ordered = sorted(launches, key=lambda k: k.launch)
    if (
        not ordered
        or ordered[0].kernel != MARKER
        or sum(k.kernel == MARKER for k in ordered) != calls
    ):
        raise ProfileError(
            "bad-output",
            f"ncu's launches do not begin with one {MARKER} per call ({calls} calls): "
            f"{', '.join(k.kernel for k in ordered[:12])}",
        )
    split: list[list[KernelProfile]] = []
    for k in ordered:
        if k.kernel == MARKER:
            split.append([])
        else:
            split[-1].append(k)
    return split


def _global_names(code: types.CodeType) -> list[str]:
    """The global names `code` and the code nested in it (lambdas, comprehensions) load."""
    names = [
        i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")
    ]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _global_names(const)
    return list(dict.fromkeys(names))


def sources_for(factory: Callable) -> list[str]:
    """What the child needs to run `factory`: an import for each module and importable
    function it reaches, an assignment for each constant, and the source of each function and
    Triton kernel of the factory's own module (the notebook) it reaches, callees first. Names
    it reaches that are none of these (a tensor, a dict) are not sent: the child fails if it
    uses one."""
    from grader.runtime.integrity import source_of
    from grader.runtime.precision import python_function as _function

    home = getattr(_function(factory), "__module__", None)
    lines: dict[str, str] = {}
    bodies: list[str] = []
    visiting: set[int] = set()

    def visit(obj) -> None:
        fn = _function(obj)
        if fn is None or id(fn) in visiting:
            return
        visiting.add(id(fn))
        for name in _global_names(fn.__code__):
            if name in lines or name not in fn.__globals__:
                continue  # sent already, or a builtin
            value = fn.__globals__[name]
            if isinstance(value, types.ModuleType):
                lines[name] = f"import {value.__name__} as {name}\n"
            elif isinstance(value, CONSTANTS):
                lines[name] = f"{name} = {value!r}\n"
            elif _function(value) is not None and _function(value).__module__ == home:
                lines[name] = ""
                visit(value)
            elif _function(value) is not None:
                module = _function(value).__module__
                lines[name] = f"from {module} import {_function(value).__name__} as {name}\n"
        bodies.append(source_of(obj))

    visit(factory)
    return [line for line in lines.values() if line] + bodies


# -- the profiled process -------------------------------------------------------------------------


def _child(spec_path: str) -> int:
    """Under ncu: for each problem in turn, make its call, run it once to compile and tune, then
    once more between cudaProfilerStart and cudaProfilerStop, the launches ncu profiles; with
    markers, a MARKER launched first inside that range."""
    spec = json.loads(Path(spec_path).read_text())
    device.setup(device.GPU)
    import importlib

    import torch

    if spec.get("sources"):
        from grader.runtime import integrity

        integrity.load_sources(spec["sources"], Path(spec_path).parent, SOURCES_MODULE)
    mark = None
    if spec.get("markers"):
        from grader.runtime.profile_marker import Marker

        mark = Marker()
    for problem in spec["problems"]:
        module, _, name = problem["problem"].partition(":")
        call = getattr(importlib.import_module(module), name)(**problem["params"])
        call()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        if mark is not None:
            mark()
        call()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        del call  # its inputs, before the next call makes its own
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
