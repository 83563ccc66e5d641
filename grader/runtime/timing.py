"""The course's one way to time GPU work: the protocol of triton.testing.do_bench (warm-up, L2
flushed before every call, CUDA events), repeated in rounds until the median stops moving;
reports median and spread.

Every round ends with an independent clock: a batch of calls, the whole device synchronized
before and after it, timed by the CUDA events and by the host's monotonic clock. The events see
only the current stream; the host clock, waiting for the whole device, also sees work on another
stream or thread. `clock_disagreement` flags a timing whose two clocks differ on those batches by
more than CLOCK_TOLERANCE, and `replaced` names the timers (and the runtime's own timing
functions) that code has swapped out since this module was imported."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from grader.runtime import device

# The host clock as it was when this module was imported, before any notebook or submitted code
# ran: a later `time.perf_counter_ns = ...` does not reach it.
_host_ns = time.perf_counter_ns
_sync = torch.cuda.synchronize
randbelow = random.SystemRandom().randrange  # the OS's randomness, not `random`'s state

# On a round's synchronized batch of up to CLOCK_CALLS calls, the events may differ from the host
# clock by this fraction of it, plus CLOCK_SLACK_MS for the submission of the first event and the
# wake-up from the synchronization (up to about 0.2 ms on the course's H100 machines).
CLOCK_TOLERANCE = 0.10
CLOCK_SLACK_MS = 0.5
CLOCK_CALLS = 20
CHECKED_CALLS = 3  # timed calls a round, drawn at random, whose output `check` examines
FLUSH_BYTES = 256 * 1024 * 1024  # as do_bench: more than any current GPU's L2 cache

Sampler = Callable[[Callable[[], object], int, int], "Round | list[float]"]


class TimingUnavailable(RuntimeError):
    """Timing was asked for where it means nothing (no GPU)."""


@dataclass(frozen=True)
class Round:
    """One round of timed calls: milliseconds per call by the timer, and its synchronized batch
    as (timer ms, host clock ms, calls)."""

    samples: tuple[float, ...]
    clock: tuple[tuple[float, float, int], ...] = ()


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call: the median of the pooled samples and their interquartile spread.
    `clock` pools the rounds' synchronized batches; empty when the sampler gave no host clock."""

    samples: tuple[float, ...]
    rounds: int
    stable: bool
    clock: tuple[tuple[float, float, int], ...] = ()

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
            self.samples + other.samples,
            self.rounds + other.rounds,
            self.stable and other.stable,
            self.clock + other.clock,
        )

    def __str__(self) -> str:
        note = "" if self.stable else ", not yet stable"
        return (
            f"{self.median_ms * 1e3:.1f} us (median of {len(self.samples)}, "
            f"spread {self.spread:.1%}{note})"
        )


def clock_disagreement(t: Timing, tolerance: float = CLOCK_TOLERANCE) -> str | None:
    """Why `t`'s timer cannot be trusted, or None: over the synchronized batches, the timer's
    total differs from the host clock's by more than `tolerance` of it (plus CLOCK_SLACK_MS a
    batch)."""
    if not t.clock:
        return None
    timer = sum(c[0] for c in t.clock)
    host = sum(c[1] for c in t.clock)
    calls = sum(c[2] for c in t.clock)
    if abs(timer - host) <= tolerance * host + CLOCK_SLACK_MS * len(t.clock):
        return None
    return (
        f"the timer measured {timer:.2f} ms over {calls} calls, the host clock {host:.2f} ms "
        f"over the same calls with the whole device synchronized (more than {tolerance:.0%} "
        "apart): is work launched on another stream or thread, or is a timer patched?"
    )


# -- timers that code may not replace --------------------------------------------------------------

_watched: dict[tuple[int, str], tuple[object, str, object]] = {}


def watch(owner: object, names: list[str], label: str) -> None:
    """Remember `owner.<name>` for each name now, so that `replaced` notices a swap later."""
    for name in names:
        _watched[(id(owner), name)] = (owner, f"{label}.{name}", getattr(owner, name))


def replaced() -> list[str]:
    """The watched timers and timing functions that are no longer the ones first seen."""
    return [
        label
        for owner, label, original in _watched.values()
        if getattr(owner, label.rpartition(".")[2], None) is not original
    ]


def _watch_own() -> None:
    import sys

    watch(time, ["perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time"], "time")
    watch(torch.cuda, ["synchronize", "Event", "current_stream"], "torch.cuda")
    watch(torch.cuda.Event, ["record", "elapsed_time", "synchronize"], "torch.cuda.Event")
    own = sys.modules[__name__]
    names = ["bench", "measure_until_stable", "device_sampler", "clock_disagreement", "replaced"]
    watch(own, names, "grader.runtime.timing")
    try:
        import triton.testing
    except ImportError:  # pragma: no cover (triton is a dependency)
        return
    watch(triton.testing, ["do_bench"], "triton.testing")


# -- samplers ----------------------------------------------------------------------------------


def _checked_calls(n: int) -> set[int]:
    """CHECKED_CALLS indices among n timed calls, drawn from the OS's randomness, and the last."""
    return {randbelow(n) for _ in range(CHECKED_CALLS)} | {n - 1}


def device_sampler(
    fn: Callable[[], object],
    warmup_ms: int,
    rep_ms: int,
    *,
    before: Callable[[], None] | None = None,
    check: Callable[[], None] | None = None,
) -> Round:
    """One round by do_bench's protocol, then a batch of up to CLOCK_CALLS calls under both
    clocks, the whole device synchronized before and after it. `before()` runs before every
    timed call, outside the timed region (it changes the inputs); `check()` runs after the last
    timed call and a few drawn at random, the whole device synchronized first."""
    sync = _sync  # the one seen at import
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
    checked = _checked_calls(n) if check is not None else set()
    for i in range(n):
        prepare()
        starts[i].record()
        fn()
        ends[i].record()
        if i in checked:
            sync()
            check()
    sync()
    samples = tuple(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
    calls = max(1, min(n, CLOCK_CALLS))
    host_start = _host_ns()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    sync()
    host_ms = (_host_ns() - host_start) / 1e6
    return Round(samples, ((start.elapsed_time(end), host_ms, calls),))


def cpu_sampler(
    fn: Callable[[], object],
    warmup_ms: int,
    rep_ms: int,
    *,
    before: Callable[[], None] | None = None,
    check: Callable[[], None] | None = None,
) -> Round:
    """A wall clock for the grader's own tests on machines without a GPU: one warm-up call, then
    three timed ones, with `before` and `check` as in device_sampler. What it measures is CPU
    time, never a GPU speed."""
    if before is not None:
        before()
    fn()
    samples = []
    checked = _checked_calls(3) if check is not None else set()
    host_start = _host_ns()
    for i in range(3):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
        if i in checked:
            check()
    host_ms = (_host_ns() - host_start) / 1e6
    return Round(tuple(samples), ((host_ms, host_ms, 3),))


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
    A sampler returns a Round, or a bare list of samples (no independent clock: tests' fakes).
    """
    if max_rounds < 2:
        raise ValueError("max_rounds must be at least 2: stability compares two rounds")

    def sample() -> Timing:
        got = sampler(fn, warmup_ms, rep_ms)
        if isinstance(got, Round):
            return Timing(got.samples, 1, True, got.clock)
        return Timing(tuple(got), 1, True)

    previous = sample()
    for rounds in range(2, max_rounds + 1):
        latest = sample()
        before, now = previous.median_ms, latest.median_ms
        stable = abs(now - before) <= tolerance * before
        if stable or rounds == max_rounds:
            both = previous.pooled(latest)
            return Timing(both.samples, rounds, stable, both.clock)
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


def bench(
    fn: Callable[[], object],
    *,
    warmup_ms: int = 25,
    rep_ms: int = 100,
    tolerance: float = 0.01,
    max_rounds: int = 6,
    sampler: Sampler | None = None,
    before: Callable[[], None] | None = None,
    check: Callable[[], None] | None = None,
) -> Timing:
    """Time `fn()` on the GPU (device_sampler); refuses with a clear message in interpreter mode.
    `before` and `check` go to the sampler (see device_sampler). `sampler` replaces
    device_sampler (cpu_sampler, or a fake, for the grader's own tests)."""
    if sampler is None:
        require_gpu()
        sampler = device_sampler
    if before is not None or check is not None:
        sampler = partial(sampler, before=before, check=check)
    return measure_until_stable(
        fn, sampler, warmup_ms=warmup_ms, rep_ms=rep_ms, tolerance=tolerance, max_rounds=max_rounds
    )


_watch_own()


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
    sync = _sync
    fn()
    sync()
    start = _host_ns()
    for _ in range(calls):
        fn()
    sync()
    estimate_ns = (_host_ns() - start) / calls  # an upper bound: host and GPU time together
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
        start = _host_ns()
        for _ in range(calls):
            fn()
        elapsed_ns = _host_ns() - start
        pending = not queued.query()
        sync()
        if pending:
            samples.append(elapsed_ns / calls / 1e3)
        else:
            products *= 2
    return HostTime(statistics.median(samples), calls, batches)
