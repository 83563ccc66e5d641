"""Speed checks as ratios: a kernel against a baseline, or against the copy bandwidth, both timed
in the same run on the same device. Thresholds are ratios, never absolute times.

No figure is scored that the device cannot produce: a speed cell whose timer disagrees with the
host clock, whose timers were replaced, whose output is wrong for the inputs of a timed call, or
whose bandwidth or FLOP rate is above what a copy or cuBLAS reaches on this device in the same run
is flagged (a line beginning with FLAGGED, one per reason, and the reasons in its published
verdict's flags) and scores 0."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import torch

from grader.runtime import checks, device, launches, timing
from grader.runtime.published import SPEED_MIMETYPE

# How a speed cell off the supported GPU class begins its message.
NOT_GRADED_HERE = "Speed is graded on an NVIDIA GPU"


@dataclass(frozen=True)
class Verdict:
    """One comparison of a speed cell, published as data. `measured` and `needed` are in `unit`:
    "x" (a speedup over `comparison`) or "%" (a share of the copy bandwidth); `measured` is None
    where the measurement stopped. `flags` say why the figure cannot be trusted (`flagged`): a
    flagged verdict never passes."""

    comparison: str
    measured: float | None
    needed: float
    unit: str = "x"
    flags: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.measured is not None and self.measured >= self.needed and not self.flags

    def line(self) -> str:
        """The verdict for people: "1.53x eager (needs 1.2x)", "71% of copy bandwidth (needs
        80%)"."""
        if self.measured is None:
            return f"no figure against {self.comparison} (needs {self.needed:g}{self.unit})"
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


# How each printed reason for not scoring a speed cell begins (the records carry them as data).
FLAGGED = "SPEED FLAGGED"
# A kernel may beat the copy's bandwidth or cuBLAS's FLOP rate measured in the same run by this
# much at most; beyond, the figure is not one this device produces.
BANDWIDTH_MARGIN = 0.10
FLOP_MARGIN = 0.15
CEILING_SIZES = (4096, 8192)  # the square matmuls whose best FLOP rate is the ceiling


@dataclass(frozen=True)
class Comparison:
    """Two timings from one run; speedup > 1 means the candidate is faster."""

    candidate_name: str
    candidate: timing.Timing
    baseline_name: str
    baseline: timing.Timing
    flags: tuple[str, ...] = ()  # why these times cannot be trusted; empty when they can

    @property
    def speedup(self) -> float:
        return self.baseline.median_ms / self.candidate.median_ms

    def __str__(self) -> str:
        return (
            f"{self.candidate_name}: {self.candidate}\n{self.baseline_name}: {self.baseline}\n"
            f"speedup {self.speedup:.2f}x"
        )


class Versions:
    """A `before` hook: writes one of several versions of the inputs into `inputs` in place,
    drawn at random and never the one already there, so that no timed call sees the values of the
    call before it. An output kept from an earlier call, or a call skipped because its inputs
    look like the last one's, is wrong at the next check. `now` is the version written last."""

    def __init__(self, inputs: Sequence[torch.Tensor], versions: Sequence[Sequence[torch.Tensor]]):
        if len(versions) < 3:
            raise ValueError("give at least 3 versions: with 2, every other call sees the same")
        self.inputs, self.versions = list(inputs), [list(v) for v in versions]
        self.now = 0

    def __call__(self) -> None:
        step = 1 + timing.randbelow(len(self.versions) - 1)
        self.now = (self.now + step) % len(self.versions)
        for dst, src in zip(self.inputs, self.versions[self.now], strict=True):
            dst.copy_(src)


def versions_of(inputs: Sequence[torch.Tensor]) -> Versions | None:
    """Versions (see `Versions`) of the floating-point tensors in `inputs`: their values as
    given, negated, randomly permuted, and permuted and negated. For inputs drawn independently
    from a distribution symmetric about 0 (all the course's speed inputs), every version is
    another draw from it. None when no input is floating-point."""
    tensors = [t for t in inputs if t.is_floating_point()]
    if not tensors:
        return None
    plain = [t.clone() for t in tensors]
    permuted = [
        p.flatten()[torch.randperm(p.numel(), device=p.device)].view(p.shape) for p in plain
    ]
    return Versions(tensors, [plain, [-p for p in plain], permuted, [-p for p in permuted]])


def compare(
    candidate: Callable[[], object],
    baseline: Callable[[], object],
    *,
    names: tuple[str, str] = ("yours", "baseline"),
    verify: Callable[[], None] | None = None,
    before: Callable[[], None] | None = None,
    passes: int = 2,
    sampler: timing.Sampler | None = None,
) -> Comparison:
    """Time candidate and baseline alternately (A B A B ...) so drift affects both alike.

    `before()` runs before every call, outside the timed region, to change the inputs
    (`versions_of`); `verify`, when given, must check the output against the inputs as they are now.
    It runs after a few timed calls drawn at random, after the last timed call of each pass, and
    after each pass. A wrong output there, a timer that disagrees with the host clock, or a
    replaced timer is listed in `flags`.
    `sampler` goes to timing.bench (the GPU's device_sampler by default).
    """
    if sampler is None:
        timing.require_gpu("Comparing speed")
    checks.call_graded(candidate, what="the timed code")  # an unfilled stub, said plainly
    mine = theirs = None
    try:
        for _ in range(passes):
            t = timing.bench(candidate, sampler=sampler, before=before, check=verify)
            mine = t if mine is None else mine.pooled(t)
            if verify is not None:
                verify()
            t = timing.bench(baseline, sampler=sampler, before=before)
            theirs = t if theirs is None else theirs.pooled(t)
    except checks.KernelCheckError as wrong:
        first = str(wrong).strip().splitlines()[0] if str(wrong).strip() else type(wrong).__name__
        reason = (
            f"the output of a timed call is wrong for the inputs of that call ({first}): is the "
            "output cached or reused between timed calls, or written on another stream?"
        )
        empty = timing.Timing((float("nan"),), 0, False)
        return Comparison(names[0], mine or empty, names[1], theirs or empty, (reason,))
    flags = [
        f"{who}: {why}"
        for who, t in zip(names, (mine, theirs), strict=True)
        if (why := timing.clock_disagreement(t))
    ]
    swapped = timing.replaced()
    if swapped:
        flags.append(
            f"{', '.join(swapped)} replaced while timing: these times are not the course's "
            "timer's; is a timer patched?"
        )
    return Comparison(names[0], mine, names[1], theirs, tuple(flags))


def own_work_flags(
    candidate: Callable[[], object],
    kernels: Sequence[str],
    inputs: Sequence[torch.Tensor],
    out: torch.Tensor | None,
    verify: Callable[[], None] | None = None,
) -> list[str]:
    """Why the timed code's result is not the work of `kernels` (empty when it is): one untimed
    call on the speed cell's own inputs, with `out` poisoned first, recorded as the correctness
    checks record theirs (`launches.kernel_work`), then `verify`. Run before and after timing, so
    that a launcher which lets torch compute the answer cannot earn speed points either."""
    if not kernels:
        return []
    if out is None:
        raise ValueError("kernels= needs out=: the tensor the timed code writes")
    out.copy_(checks.poisoned(out.shape, out.dtype, out.device.type))
    try:
        with launches.kernel_work(kernels, inputs, out, "the timed code"):
            checks.call_graded(candidate, what="the timed code")
        if verify is not None:
            verify()
    except (launches.IntegrityError, checks.KernelCheckError) as wrong:
        first = str(wrong).strip().splitlines()[0] if str(wrong).strip() else type(wrong).__name__
        return [f"the timed code's result is not the work of {' or '.join(kernels)}: {first}"]
    return []


def ceiling_flags(
    t: timing.Timing,
    *,
    bytes_moved: float | None = None,
    copy: timing.Timing | None = None,
    flops: float | None = None,
    matmul: tuple[str, float] | None = None,
) -> list[str]:
    """Why `t` is beyond this device: its bandwidth above the `copy` of the same bytes (timed in
    the same run) by more than BANDWIDTH_MARGIN, or its FLOP rate above `matmul` (a label and
    cuBLAS's FLOP/s, measured by `matmul_ceiling`) by more than FLOP_MARGIN."""
    found = []
    if bytes_moved and copy is not None:
        mine, limit = t.per_second(bytes_moved), copy.per_second(bytes_moved)
        if mine > limit * (1 + BANDWIDTH_MARGIN):
            found.append(
                f"measured {mine / 1e12:.3g} TB/s, above this GPU's measured copy bandwidth of "
                f"{limit / 1e12:.3g} TB/s (+{BANDWIDTH_MARGIN:.0%} allowed): is the output cached "
                "between timed calls?"
            )
    if flops and matmul is not None:
        label, limit = matmul
        mine = t.per_second(flops)
        if mine > limit * (1 + FLOP_MARGIN):
            found.append(
                f"measured {mine / 1e12:.3g} TFLOP/s, above this GPU's measured matmul ceiling "
                f"of {limit / 1e12:.3g} TFLOP/s ({label}, +{FLOP_MARGIN:.0%} allowed): is the "
                "output cached between timed calls?"
            )
    return found


def matmul_ceiling(dtype: torch.dtype) -> tuple[str, float]:
    """(label, FLOP/s) of torch.matmul on square `dtype` matrices of each of CEILING_SIZES, timed
    now, with TF32 allowed for float32: the fastest this device multiplies matrices of that
    type (the larger size is not always the faster: an H100 measured 642 TFLOP/s at 8192^3 in a
    run whose 4096^3 reached 741)."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        rates = []
        for n in CEILING_SIZES:
            a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
            c = torch.empty_like(a)
            t = timing.bench(lambda a=a, b=b, c=c: torch.matmul(a, b, out=c))
            rates.append((t.per_second(2.0 * n**3), n))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    rate, n = max(rates)
    return f"cuBLAS {str(dtype).removeprefix('torch.')} {n}^3", rate


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


def flagged(reasons: Sequence[str], points: float, verdict: Verdict | None = None) -> float:
    """The score of a speed cell whose figures cannot be trusted, each reason on its own line;
    `verdict`, when given, is published with the reasons as its flags (07's cell publishes its
    comparisons, flagged, itself)."""
    for reason in reasons:
        print(f"{FLAGGED}: {reason}")
    text = f"NOT SCORED: the speed above cannot be trusted: 0 of {points:g} points"
    if verdict is None:
        print(text)
    else:
        publish_verdict(replace(verdict, flags=tuple(reasons)), text)
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
    inputs: Sequence[torch.Tensor] = (),
    bytes_moved: float | None = None,
    flops: float | None = None,
    dtype: torch.dtype | None = None,
    kernels: Sequence[str] = (),
    out: torch.Tensor | None = None,
) -> float:
    """Full points when candidate is at least `at_least` times as fast as baseline, else 0.
    `inputs` change before every call (`versions_of`); `verify` checks the output against them
    as they are (`compare`). With `bytes_moved`, the candidate's bandwidth may not
    exceed a copy of those bytes timed now; with `flops` (and the inputs' `dtype`), its FLOP rate
    may not exceed the higher of cuBLAS's (`matmul_ceiling`) and the baseline's on the same
    problem in this run; beyond either, the cell is flagged. With `kernels` and `out`, the
    candidate's result must be those kernels' work before and after timing (`own_work_flags`)."""
    if not device.current().grades_speed:
        return not_graded_here(points)
    mine = own_work_flags(candidate, kernels, inputs, out, verify)
    if mine:
        return flagged(mine, points, Verdict(names[1], None, at_least))
    result = compare(candidate, baseline, names=names, verify=verify, before=versions_of(inputs))
    if not (result.candidate.rounds and result.baseline.rounds):  # stopped: output wrong
        return flagged(result.flags, points, Verdict(names[1], None, at_least))
    print(result)
    reasons = list(result.flags) + own_work_flags(candidate, kernels, inputs, out, verify)
    if not reasons:
        copy = timing.bench(copy_baseline(int(bytes_moved))) if bytes_moved else None
        matmul = None
        if flops:  # the baseline computes the same product: its rate in this run counts too
            matmul = max(
                matmul_ceiling(dtype or torch.float32),
                (f"{names[1]} on this problem", result.baseline.per_second(flops)),
                key=lambda ceiling: ceiling[1],
            )
        reasons += ceiling_flags(
            result.candidate, bytes_moved=bytes_moved, copy=copy, flops=flops, matmul=matmul
        )
    verdict = Verdict(names[1], result.speedup, at_least)
    if reasons:
        return flagged(reasons, points, verdict)
    return score_verdict(verdict, points)


def grade_bandwidth(
    candidate: Callable[[], object],
    *,
    bytes_moved: int,
    at_least: float,
    points: float,
    name: str = "yours",
    verify: Callable[[], None] | None = None,
    inputs: Sequence[torch.Tensor] = (),
    kernels: Sequence[str] = (),
    out: torch.Tensor | None = None,
) -> float:
    """Full points when candidate moves its bytes at `at_least` of the copy bandwidth measured
    now, on a copy of the same number of bytes; flagged above that bandwidth (BANDWIDTH_MARGIN).
    `inputs` change before every call (`versions_of`); `verify` checks the output against them
    as they are (`compare`). With `kernels` and `out`, the candidate's result must be those
    kernels' work before and after timing (`own_work_flags`)."""
    if not device.current().grades_speed:
        return not_graded_here(points)
    mine = own_work_flags(candidate, kernels, inputs, out, verify)
    if mine:
        return flagged(mine, points, Verdict("copy bandwidth", None, 100 * at_least, "%"))
    result = compare(
        candidate,
        copy_baseline(bytes_moved),
        names=(name, "device copy"),
        verify=verify,
        before=versions_of(inputs),
    )
    fraction = result.speedup  # same bytes: time ratio is bandwidth ratio
    if not (result.candidate.rounds and result.baseline.rounds):  # stopped: output wrong
        return flagged(result.flags, points, Verdict("copy bandwidth", None, 100 * at_least, "%"))
    print(result)
    print(
        f"{name}: {result.candidate.per_second(bytes_moved) / 1e9:.0f} GB/s, "
        f"copy: {result.baseline.per_second(bytes_moved) / 1e9:.0f} GB/s"
    )
    reasons = list(result.flags) or ceiling_flags(
        result.candidate, bytes_moved=bytes_moved, copy=result.baseline
    )
    reasons += own_work_flags(candidate, kernels, inputs, out, verify)
    verdict = Verdict("copy bandwidth", 100 * fraction, 100 * at_least, "%")
    if reasons:
        return flagged(reasons, points, verdict)
    return score_verdict(verdict, points)


timing.watch(
    sys.modules[__name__],
    [
        "compare",
        "grade_speedup",
        "grade_bandwidth",
        "ceiling_flags",
        "own_work_flags",
        "matmul_ceiling",
        "flagged",
    ],
    "grader.runtime.perf",
)
timing.watch(launches, ["kernel_work", "recording", "verify"], "grader.runtime.launches")
