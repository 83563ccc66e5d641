"""The course's one way to time GPU work: triton.testing.do_bench (warm-up, L2 flushed before every
call, CUDA events), repeated in rounds until the median stops moving; reports median and spread."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from grader.runtime import device

Sampler = Callable[[Callable[[], object], int, int], list[float]]


class TimingUnavailable(RuntimeError):
    """Timing was asked for where it means nothing (no GPU)."""


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call: the median of the pooled samples and their interquartile spread."""

    samples: tuple[float, ...]
    rounds: int
    stable: bool

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> float:
        """Interquartile range over the median: 0.02 means the middle half lies within 2%."""
        if len(self.samples) < 4:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.samples, n=4)
        return (q3 - q1) / self.median_ms

    def per_second(self, amount: float) -> float:
        """`amount` (bytes, FLOPs) per second at the median time."""
        return amount / (self.median_ms * 1e-3)

    def pooled(self, other: Timing) -> Timing:
        return Timing(
            self.samples + other.samples, self.rounds + other.rounds, self.stable and other.stable
        )

    def __str__(self) -> str:
        note = "" if self.stable else ", not yet stable"
        return (
            f"{self.median_ms * 1e3:.1f} us (median of {len(self.samples)}, "
            f"spread {self.spread:.1%}{note})"
        )


def _do_bench(fn: Callable[[], object], warmup_ms: int, rep_ms: int) -> list[float]:
    from triton.testing import do_bench

    return list(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all"))


def measure_until_stable(
    fn: Callable[[], object],
    sampler: Sampler,
    *,
    warmup_ms: int = 25,
    rep_ms: int = 100,
    tolerance: float = 0.01,
    max_rounds: int = 6,
) -> Timing:
    """Take rounds of samples until two successive round medians agree within `tolerance`.

    The result pools the last two rounds; earlier rounds (clocks ramping, caches cold) are dropped.
    """
    if max_rounds < 2:
        raise ValueError("max_rounds must be at least 2: stability compares two rounds")
    previous = sampler(fn, warmup_ms, rep_ms)
    for rounds in range(2, max_rounds + 1):
        latest = sampler(fn, warmup_ms, rep_ms)
        before, now = statistics.median(previous), statistics.median(latest)
        stable = abs(now - before) <= tolerance * before
        if stable or rounds == max_rounds:
            return Timing(tuple(previous) + tuple(latest), rounds, stable)
        previous = latest
    raise AssertionError("unreachable")


def require_gpu(purpose: str = "Timing") -> None:
    """Raise TimingUnavailable, with the reason, unless this notebook runs on a GPU."""
    dev = device.current()
    if not dev.supports("timing"):
        raise TimingUnavailable(
            f"{purpose} needs a CUDA GPU. This notebook runs on {dev.describe()}, where kernels "
            "execute as Python on the CPU, so their times say nothing about GPU speed. "
            "Run it on a GPU to measure; correctness is checked here all the same."
        )


def cpu_sampler(fn: Callable[[], object], warmup_ms: int, rep_ms: int) -> list[float]:
    """A wall clock for the grader's own tests on machines without a GPU: one warm-up call, then
    three timed ones. What it measures is CPU time, never a GPU speed."""
    fn()
    samples = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def bench(
    fn: Callable[[], object],
    *,
    warmup_ms: int = 25,
    rep_ms: int = 100,
    tolerance: float = 0.01,
    max_rounds: int = 6,
    sampler: Sampler | None = None,
) -> Timing:
    """Time `fn()` on the GPU with do_bench; refuses with a clear message in interpreter mode.
    `sampler` replaces do_bench (cpu_sampler, for the grader's own tests)."""
    if sampler is None:
        require_gpu()
        sampler = _do_bench
    return measure_until_stable(
        fn, sampler, warmup_ms=warmup_ms, rep_ms=rep_ms, tolerance=tolerance, max_rounds=max_rounds
    )
