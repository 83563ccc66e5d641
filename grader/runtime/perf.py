"""Speed checks as ratios: a kernel against a baseline, or against the copy bandwidth, both timed
in the same run on the same device. Thresholds are ratios, never absolute times."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from grader.runtime import checks, device, timing

# How a speed cell off the supported GPU class begins its message.
NOT_GRADED_HERE = "Speed is graded on an NVIDIA GPU"
# The display-data type of a speed verdict (`Verdict`): the batch grader's report, its checks of
# the scores and bench/trust.py read verdicts only from it, never from printed text.
SPEED_MIMETYPE = "application/vnd.gpu-kernels-course.speed+json"


@dataclass(frozen=True)
class Verdict:
    """One comparison of a speed cell, published as data. `measured` and `needed` are in `unit`:
    "x" (a speedup over `comparison`) or "%" (a share of the copy bandwidth). `flags` name doubts
    about the measurement itself (empty when there are none)."""

    comparison: str
    measured: float
    needed: float
    unit: str = "x"
    flags: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.measured >= self.needed

    def line(self) -> str:
        """The verdict for people: "1.53x eager (needs 1.2x)", "71% of copy bandwidth (needs
        80%)"."""
        if self.unit == "%":
            return f"{self.measured:.0f}% of {self.comparison} (needs {self.needed:g}%)"
        return f"{self.measured:.2f}x {self.comparison} (needs {self.needed:g}x)"

    def record(self) -> dict:
        """The JSON published under SPEED_MIMETYPE."""
        return {**asdict(self), "flags": list(self.flags), "passed": self.passed}


def publish_verdict(verdict: Verdict, text: str | None = None) -> bool:
    """Show `text` (the verdict's own line by default) and publish `verdict` beside it as
    SPEED_MIMETYPE display data; outside IPython, only print the text. Returns verdict.passed."""
    text = verdict.line() if text is None else text
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # a plain Python process without IPython
        shell = None
    else:
        shell = get_ipython()
    if shell is None:
        print(text)
    else:
        display({SPEED_MIMETYPE: verdict.record(), "text/plain": text}, raw=True)
    return verdict.passed


@dataclass(frozen=True)
class Comparison:
    """Two timings from one run; speedup > 1 means the candidate is faster."""

    candidate_name: str
    candidate: timing.Timing
    baseline_name: str
    baseline: timing.Timing

    @property
    def speedup(self) -> float:
        return self.baseline.median_ms / self.candidate.median_ms

    def __str__(self) -> str:
        return (
            f"{self.candidate_name}: {self.candidate}\n{self.baseline_name}: {self.baseline}\n"
            f"speedup {self.speedup:.2f}x"
        )


def compare(
    candidate: Callable[[], object],
    baseline: Callable[[], object],
    *,
    names: tuple[str, str] = ("yours", "baseline"),
    verify: Callable[[], None] | None = None,
    passes: int = 2,
    sampler: timing.Sampler | None = None,
) -> Comparison:
    """Time candidate and baseline alternately (A B A B ...) so drift affects both alike.

    `verify`, when given, runs after every timed pass of the candidate: a kernel must still be
    right after it has been timed. `sampler` goes to timing.bench (the GPU's do_bench by default).
    """
    if sampler is None:
        timing.require_gpu("Comparing speed")
    checks.call_graded(candidate, what="the timed code")  # an unfilled stub, said plainly
    mine = theirs = None
    for _ in range(passes):
        t = timing.bench(candidate, sampler=sampler)
        mine = t if mine is None else mine.pooled(t)
        if verify is not None:
            verify()
        t = timing.bench(baseline, sampler=sampler)
        theirs = t if theirs is None else theirs.pooled(t)
    return Comparison(names[0], mine, names[1], theirs)


def copy_baseline(bytes_moved: int) -> Callable[[], object]:
    """A device-to-device copy that reads and writes `bytes_moved` bytes in all."""
    n = max(1, bytes_moved // 2)
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def not_graded_here(points: float) -> float:
    """The score of a speed cell off the supported GPU class, said out loud."""
    dev = device.current()
    print(
        f"{NOT_GRADED_HERE}, sm_80 or newer; this notebook runs on "
        f"{dev.describe()}. This cell scores 0 of {points:g} here; correctness points are "
        "not affected."
    )
    return 0.0


def score_verdict(verdict: Verdict, points: float) -> float:
    """Publish `verdict` with the cell's score: full points when it passed, else 0."""
    if verdict.passed:
        publish_verdict(verdict, f"PASS {verdict.line()}: {points:g} of {points:g} points")
        return float(points)
    publish_verdict(verdict, f"NOT YET {verdict.line()}: 0 of {points:g} points")
    return 0.0


def grade_speedup(
    candidate: Callable[[], object],
    baseline: Callable[[], object],
    *,
    at_least: float,
    points: float,
    names: tuple[str, str] = ("yours", "baseline"),
    verify: Callable[[], None] | None = None,
) -> float:
    """Full points when candidate is at least `at_least` times as fast as baseline, else 0."""
    if not device.current().grades_speed:
        return not_graded_here(points)
    result = compare(candidate, baseline, names=names, verify=verify)
    print(result)
    return score_verdict(Verdict(names[1], result.speedup, at_least), points)


def grade_bandwidth(
    candidate: Callable[[], object],
    *,
    bytes_moved: int,
    at_least: float,
    points: float,
    name: str = "yours",
    verify: Callable[[], None] | None = None,
) -> float:
    """Full points when candidate moves its bytes at `at_least` of the copy bandwidth measured
    now, on a copy of the same number of bytes."""
    if not device.current().grades_speed:
        return not_graded_here(points)
    result = compare(
        candidate, copy_baseline(bytes_moved), names=(name, "device copy"), verify=verify
    )
    fraction = result.speedup  # same bytes: time ratio is bandwidth ratio
    print(result)
    print(
        f"{name}: {result.candidate.per_second(bytes_moved) / 1e9:.0f} GB/s, "
        f"copy: {result.baseline.per_second(bytes_moved) / 1e9:.0f} GB/s"
    )
    return score_verdict(Verdict("copy bandwidth", 100 * fraction, 100 * at_least, "%"), points)
