"""A census of the GPU's work during a speed cell's calls: every kernel, copy and fill the device
ran for the code under test, by name, read from torch's profiler (Kineto, over CUPTI's activity
records). The timed calls must run the exercise's Triton kernels and nothing else: a library
computing the result while the student's kernel only copies it (cuDNN's attention, cuBLAS's
matmul) keeps every value right and every launch check happy, and shows here, by name.

Each call of the code under test is a window on the host's timeline (`record_function`); each GPU
activity carries the correlation id of the host call that launched it (`cudaLaunchKernel`, or
`cuLaunchKernelEx` for Triton's launches) and belongs to the window its launch happened in,
whatever the thread or stream: the harness's own work between calls (new inputs, the L2 flush,
the output checks) falls outside every window. The trace is read as data (`export_chrome_trace`).

The profiler runs in the notebook's own process, so code that looks for it can tell it is on:
hence the census covers the timed calls themselves, not a rehearsal, and one that saw none of the
exercise's kernels vouches for nothing. Only the code under test is profiled (not the baselines),
so that the trace stays small.
"""

from __future__ import annotations

import bisect
import json
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PREFIX = "course.census:"  # the name of a window's record_function
LAUNCHES = ("cuda_runtime", "cuda_driver")  # trace categories of the host's launch calls
ACTIVITIES = ("kernel", "gpu_memcpy", "gpu_memset")  # what the device ran


class CensusUnavailable(RuntimeError):
    """The profiler could not take the census; the message says why."""


@dataclass(frozen=True)
class Seen:
    """One activity of the device, attributed to the window whose call launched it."""

    name: str  # a kernel's name, or the profiler's "Memcpy DtoD (Device -> Device)", "Memset"
    window: str  # the window's label
    call: int  # which window: its index among all windows, in the order they opened
    us: float = 0.0  # how long it ran on the device, in microseconds


def windows(trace: dict) -> list[tuple[str, float, float]]:
    """The census windows of a Chrome trace: (label, start, stop) in the order they opened."""
    found = [
        (e["name"].removeprefix(PREFIX), float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in trace.get("traceEvents", [])
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith(PREFIX)
    ]
    return sorted(found, key=lambda window: window[1])


def attribute(trace: dict) -> list[Seen]:
    """Every GPU activity of a Chrome trace (the profiler's `export_chrome_trace`) launched
    inside one of its census windows, in launch order. Windows follow one another (a call
    returns before the next opens), so the window of a launch is the last one opened before it."""
    events = trace.get("traceEvents", [])
    opened = windows(trace)
    starts = [start for _, start, _ in opened]
    launched = {
        e["args"]["correlation"]: float(e["ts"])
        for e in events
        if e.get("cat") in LAUNCHES and "correlation" in e.get("args", {})
    }
    found = []
    for e in events:
        if e.get("cat") not in ACTIVITIES:
            continue
        at = launched.get(e.get("args", {}).get("correlation"))
        call = -1 if at is None else bisect.bisect_right(starts, at) - 1
        if call >= 0 and at <= opened[call][2]:
            us = float(e.get("dur", 0.0))
            found.append((at, Seen(str(e["name"]), opened[call][0], call, us)))
    return [seen for _, seen in sorted(found, key=lambda pair: pair[0])]


class Census:
    """A census taken in sessions: `with census.session():` profiles its block, and calls made
    through `census.watch(fn, label)` inside one are windows. `census.seen` lists what the
    device ran in every window of every session so far, `census.calls` every window's label."""

    def __init__(self):
        self.seen: list[Seen] = []
        self.calls: list[str] = []  # the label of every window, in the order they opened

    @contextmanager
    def session(self) -> Iterator[None]:
        # torch.autograd.profiler's class, which torch.profiler.profile wraps: the wrapper's
        # first start imports torch._inductor (2 s of CPU on a first speed cell) for a setting
        # of its own, and the census needs nothing it adds
        from torch.autograd.profiler import profile

        try:
            with warnings.catch_warnings(action="ignore"):  # its notes on keeping events
                running = profile(use_device="cuda", use_kineto=True)
                running.__enter__()
        except Exception as exc:  # CUPTI missing, or taken by another profiler in this process
            raise CensusUnavailable(
                f"torch's profiler could not start ({type(exc).__name__}: {exc}); it records "
                "which GPU kernels the timed code runs. Is another profiler running in this "
                "notebook?"
            ) from exc
        try:
            yield
        finally:
            with warnings.catch_warnings(action="ignore"):
                running.__exit__(None, None, None)
        with tempfile.TemporaryDirectory(prefix="census-") as tmp:
            path = Path(tmp) / "trace.json"
            running.export_chrome_trace(str(path))
            trace = json.loads(path.read_text())
        first = len(self.calls)
        self.calls += [label for label, _, _ in windows(trace)]
        self.seen += [Seen(s.name, s.window, first + s.call, s.us) for s in attribute(trace)]

    def window(self, label: str):
        """A block that is a window named `label`."""
        from torch.profiler import record_function

        return record_function(PREFIX + label)

    def watch(self, fn: Callable[[], object], label: str) -> Callable[[], object]:
        """`fn`, each of its calls a window named `label`."""

        def watched():
            with self.window(label):
                return fn()

        return watched

    def durations(self, label: str) -> list[float]:
        """How long the device worked in each window named `label` (microseconds, the sum of
        what it ran there), in the order the windows opened."""
        calls = [i for i, window in enumerate(self.calls) if window == label]
        return [sum(s.us for s in self.seen if s.call == i) for i in calls]

    def names(self, label: str) -> list[str]:
        """What the device ran in the windows named `label`, in order, repeats included."""
        return [s.name for s in self.seen if s.window == label]

    def without(self, label: str, names: Iterable[str]) -> tuple[int, int]:
        """(calls, of which ran none of `names`) among the windows named `label`."""
        names = set(names)
        ran = {s.call for s in self.seen if s.window == label and s.name in names}
        calls = [i for i, window in enumerate(self.calls) if window == label]
        return len(calls), sum(1 for i in calls if i not in ran)


def short(name: str) -> str:
    """A kernel's name as a flag shows it: cuDNN's run to 90 characters, and the class report
    cuts a flag at 160, which would hide what the flag says of the kernel."""
    return name if len(name) <= 48 else name[:45] + "..."


def foreign(seen: Iterable[str], allowed: Iterable[str]) -> list[str]:
    """The names in `seen` that are not in `allowed`, each once, in order of first appearance."""
    allowed = set(allowed)
    return list(dict.fromkeys(name for name in seen if name not in allowed))
