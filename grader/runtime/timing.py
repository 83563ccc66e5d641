"""The course's one way to time GPU work: the protocol of triton.testing.do_bench (warm-up, L2
flushed before every call, CUDA events), repeated in rounds until the median stops moving;
reports median and spread. (At grading the student's call is timed by the judge from the GPU's
own activity log, grader.grading.activity: this module times the notebook's own runs.)"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from grader.runtime import device

FLUSH_BYTES = 256 * 1024 * 1024  # as do_bench: more than any current GPU's L2 cache

Sampler = Callable[[Callable[[], object], int, int], "list[float]"]


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


def device_sampler(
    fn: Callable[[], object],
    warmup_ms: int,
    rep_ms: int,
    *,
    before: Callable[[], None] | None = None,
) -> list[float]:
    """One round by do_bench's protocol: milliseconds per call. `before()` runs before every
    timed call, outside the timed region (it changes the inputs)."""
    sync = torch.cuda.synchronize
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def prepare():
        if before is not None:
            before()
        flush.zero_()

    prepare()
    fn()
    sync()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        prepare()
        fn()
    end.record()
    sync()
    estimate_ms = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(warmup_ms / estimate_ms))):
        prepare()
        fn()
    n = max(1, int(rep_ms / estimate_ms))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        prepare()
        starts[i].record()
        fn()
        ends[i].record()
    sync()
    return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


def measure_until_stable(
    fn: Callable[[], object], sampler: Sampler, *, tolerance: float = 0.01, max_rounds: int = 6
) -> Timing:
    """Take rounds of samples until two successive round medians agree within `tolerance`.

    The result pools the last two rounds; earlier rounds (clocks ramping, caches cold) are dropped.
    """
    if max_rounds < 2:
        raise ValueError("max_rounds must be at least 2: stability compares two rounds")

    def sample() -> Timing:
        return Timing(tuple(sampler(fn, 25, 100)), 1, True)  # 25 ms of warm-up, 100 of samples

    previous, rounds = sample(), 1
    while True:
        latest, rounds = sample(), rounds + 1
        stable = abs(latest.median_ms - previous.median_ms) <= tolerance * previous.median_ms
        if stable or rounds == max_rounds:
            return Timing(previous.samples + latest.samples, rounds, stable)
        previous = latest


def require_gpu(purpose: str = "Timing") -> None:
    """Raise TimingUnavailable, with the reason, unless this notebook runs on a GPU."""
    dev = device.current()
    if not dev.supports("timing"):
        raise TimingUnavailable(
            f"{purpose} needs a CUDA GPU. This notebook runs on {dev.describe()}, where kernels "
            "execute as Python on the CPU, so their times say nothing about GPU speed. "
            "Run it on a GPU to measure; correctness is checked here all the same."
        )


def bench(
    fn: Callable[[], object],
    *,
    sampler: Sampler | None = None,
    before: Callable[[], None] | None = None,
) -> Timing:
    """Time `fn()` on the GPU (device_sampler); refuses with a clear message in interpreter mode.
    `before` goes to the sampler (see device_sampler). `sampler` replaces device_sampler (a fake,
    for the grader's own tests)."""
    if sampler is None:
        require_gpu()
        sampler = device_sampler
    if before is not None:
        sampler = partial(sampler, before=before)
    return measure_until_stable(fn, sampler)


# -- host time per call ------------------------------------------------------------------------


MAX_BUSY_PRODUCTS = 256  # of 4096 x 4096 float32: a few ms each, far below the launch queue's depth


@dataclass(frozen=True)
class HostTime:
    """Host time to issue one call, in microseconds: the median over `batches` batches of `calls`
    back-to-back calls, each batch issued while the GPU was still busy with work queued before it
    (so no call waited for the GPU: what is measured is the Python and launch work alone)."""

    us: float
    calls: int
    batches: int


def host_time(fn: Callable[[], object], *, calls: int = 100, batches: int = 5) -> HostTime:
    """How long the host takes to issue one `fn()`, with the GPU kept busy: before each batch,
    matrix products are queued that take the GPU longer than the batch takes the host; an event
    recorded after them must still be pending once the batch is issued, else the batch is
    measured again with twice the busy work. The calls' own GPU work runs after the batch. Few,
    long products keep the launch queue short, so that no launch waits for a free slot either."""
    require_gpu("Measuring host time per call")
    sync, clock = torch.cuda.synchronize, time.perf_counter_ns
    fn()
    sync()
    start = clock()
    for _ in range(calls):
        fn()
    sync()
    estimate_ns = (clock() - start) / calls  # an upper bound: host and GPU time together
    busy = torch.randn(4096, 4096, device="cuda")
    busy_out = torch.empty_like(busy)
    ticks = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ticks[0].record()
    for _ in range(4):
        torch.mm(busy, busy, out=busy_out)
    ticks[1].record()
    sync()
    product_ns = max(ticks[0].elapsed_time(ticks[1]) / 4 * 1e6, 1e3)
    samples = []
    products = max(1, int(2 * estimate_ns * calls / product_ns) + 1)
    while len(samples) < batches:
        if products > MAX_BUSY_PRODUCTS:
            raise RuntimeError(
                f"the GPU finished its queued work before the host issued {calls} calls, even "
                f"with {products // 2} products queued: does each call wait for the GPU (a "
                ".item(), .cpu() or synchronize inside it)?"
            )
        for _ in range(products):
            torch.mm(busy, busy, out=busy_out)
        queued = torch.cuda.Event()
        queued.record()
        start = clock()
        for _ in range(calls):
            fn()
        elapsed_ns = clock() - start
        pending = not queued.query()
        sync()
        if pending:
            samples.append(elapsed_ns / calls / 1e3)
        else:
            products *= 2
    return HostTime(statistics.median(samples), calls, batches)
