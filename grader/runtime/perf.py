"""Speed, graded one way: every speed cell of the course calls `grade` (08's isolated measurement
calls `measure` in its own process and scores with `score`); no cell times by another route
(tests/test_lint.py fails on one that does).

A cell describes one or more `Case`s: the call under test, the exercise's kernels it must run,
its inputs and output, a check of the output against the inputs as they are, and the baselines
to beat, each with its threshold, a ratio measured in the same run on the same device, never an
absolute time. `measure` then, for each case, on a GPU:

1. calls it once (a first call may tune), and once more with `out` poisoned inside a census of
   the GPU's work (grader.runtime.census), checking the output: with nothing but the exercise's
   kernels run in that call, every element is their work (`checked_flags`);
2. times the call and the baselines alternately (`compare_all`), every input drawn afresh before
   every timed call (`Redraw`: independent draws, in the same memory), the output checked after
   calls drawn at random, the host clock beside the CUDA events, each timed call of the
   candidate inside the census;
3. checks the call's own work again after timing, as in 1;
4. reads the census: a kernel, copy or fill in a checked or timed call that is not one of the
   exercise's kernels is named, another Triton kernel included (a released side module's, say:
   the launchers are the release's, and launch the exercise's kernels alone), and so is a timed
   call that launched none of the exercise's kernels (`census_flags`);
5. compares the output, bit for bit, with each baseline marked `distinct` (a library whose result
   no Triton kernel reproduces exactly on these shapes: cuDNN's and SDPA's attention);
6. flags a bandwidth above a copy of the same bytes timed now, and a FLOP rate above cuBLAS's.

Anything found is a flag: a line beginning with FLAGGED in the cell, the reasons in its published
verdicts, and 0 points. No figure is scored that the device cannot produce. The grader's own
tests time on the CPU, where the call's own work is checked by recording its Triton launches
(`own_work_flags`) instead of a census."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field

import torch

from grader.runtime import census, checks, device, launches, profile, recorded, timing
from grader.runtime.published import SPEED_MIMETYPE

# How a speed cell off the supported GPU class begins its message.
NOT_GRADED_HERE = "Speed is graded on an NVIDIA GPU"
# How each printed reason for not scoring a speed cell begins (the records carry them as data).
FLAGGED = "SPEED FLAGGED"
# A kernel may beat the copy's bandwidth or cuBLAS's FLOP rate measured in the same run by this
# much at most; beyond, the figure is not one this device produces.
BANDWIDTH_MARGIN = 0.10
FLOP_MARGIN = 0.15
# A call may move this many times the fewest DRAM bytes it needs, as Nsight Compute counts them.
DRAM_MARGIN = 1.1
CEILING_SIZES = (4096, 8192)  # the square matmuls whose best FLOP rate is the ceiling
COPY = "copy bandwidth"  # a baseline of this name is a copy of the case's bytes, in percent
TIMED, CHECKED = "timed", "checked"  # the census's windows


@dataclass(frozen=True)
class Verdict:
    """One comparison of a speed cell, published as data. `measured` and `needed` are in `unit`:
    "x" (a speedup over `comparison`) or "%" (a share of the copy bandwidth); `measured` is None
    where the measurement stopped. `flags` say why the figure cannot be trusted: a
    flagged verdict never passes."""

    comparison: str
    measured: float | None
    needed: float
    unit: str = "x"
    flags: tuple[str, ...] = ()
    at_most: bool = False  # `needed` is a ceiling: the DRAM bytes counted over the fewest

    @property
    def passed(self) -> bool:
        if self.measured is None or self.flags:
            return False
        return self.measured <= self.needed if self.at_most else self.measured >= self.needed

    def line(self) -> str:
        """The verdict for people: "1.53x eager (needs 1.2x)", "71% of copy bandwidth (needs
        80%)", "1.02x the fewest DRAM bytes (at most 1.1x)"."""
        bound = "at most" if self.at_most else "needs"
        if self.measured is None:
            return f"no figure against {self.comparison} ({bound} {self.needed:g}{self.unit})"
        if self.at_most:
            return f"{self.measured:.2f}x {self.comparison} (at most {self.needed:g}x)"
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
    recorded.note_verdict(verdict.record())
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


# -- what a speed cell describes ---------------------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    """What the call under test is timed against. `at_least`: the speedup it needs (a fraction
    of the bandwidth for COPY), None for a comparison shown but not graded. `distinct`: the
    call's output must differ, bit for bit, from this baseline's on the same inputs (a library no
    Triton kernel reproduces exactly on the case's shapes; equal outputs mean it computed it)."""

    name: str
    fn: Callable[[], object]
    at_least: float | None
    distinct: bool = False
    bytes_moved: float | None = None  # COPY's: the bytes it reads and writes

    @property
    def unit(self) -> str:
        return "%" if self.name == COPY else "x"


def copy_bandwidth(bytes_moved: int, at_least: float | None) -> Baseline:
    """A device-to-device copy of `bytes_moved` bytes (read and written), as a baseline: the
    call then needs `at_least` of its bandwidth."""
    return Baseline(COPY, copy_baseline(bytes_moved), at_least, bytes_moved=bytes_moved)


@dataclass(frozen=True)
class Traffic:
    """The DRAM bytes a case's call may move, counted on a GPU by Nsight Compute
    (grader.runtime.profile): `factory(**params)`, a function of the notebook, makes the same
    call on inputs of its own in a process of its own (`profile.of`); what the case's kernels
    read and write there must be at most `margin` times `fewest`. A count of bytes does not
    drift with the clocks, and no timer patched in the notebook changes it."""

    factory: Callable[..., Callable[[], object]]
    params: Mapping[str, object]
    fewest: float
    margin: float = DRAM_MARGIN

    comparison = "the fewest DRAM bytes, counted by Nsight Compute"


@dataclass(frozen=True)
class Case:
    """One problem a speed cell times. `candidate()` is the graded call; it must run `kernels`
    (the exercise's Triton kernels) on `inputs` and write `out` (or return its result where
    `out` is None); `verify()` checks the output against the inputs as they are now (they change
    before every timed call). `bytes_moved` and `flops` set the ceilings; `dtype` is the inputs'
    for cuBLAS's FLOP rate. `name` tells cases of one cell apart ("D=64, causal"). `traffic`,
    where given, adds a graded verdict: the DRAM bytes the call moves, counted."""

    candidate: Callable[[], object]
    kernels: Sequence[str]
    inputs: Sequence[torch.Tensor]
    out: torch.Tensor | None
    verify: Callable[[], None]
    baselines: Sequence[Baseline]
    name: str = ""
    bytes_moved: float | None = None
    flops: float | None = None
    dtype: torch.dtype | None = None
    traffic: Traffic | None = None

    def __post_init__(self):
        if not self.kernels:
            raise ValueError("a speed case names the exercise's kernels it must run")
        if not any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in self.inputs):
            raise ValueError("a speed case needs its floating-point inputs, to draw them afresh")
        if not self.baselines:
            raise ValueError("a speed case needs a baseline")

    @property
    def moved(self) -> float | None:
        """The bytes the call moves: `bytes_moved`, else those of its COPY baseline."""
        copies = [b.bytes_moved for b in self.baselines if b.name == COPY]
        return self.bytes_moved or (copies[0] if copies else None)

    def label(self, baseline: Baseline) -> str:
        return f"{self.name} vs {baseline.name}" if self.name else baseline.name


@dataclass(frozen=True)
class Measured:
    """What `measure` found for one case, as data: the medians in milliseconds of the call
    (None where the measurement stopped) and of each baseline by name; why the figures cannot be
    trusted; the timings as lines for people; the DRAM bytes counted, or why not."""

    case: str
    candidate_ms: float | None = None
    baseline_ms: dict[str, float] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()
    dram_bytes: float | None = None  # read and written, counted (Case.traffic)
    uncounted: str | None = None  # why the DRAM bytes of a case with traffic were not counted

    def speedup(self, baseline: str) -> float | None:
        """The call's speedup over `baseline` (None where either was not timed)."""
        theirs = self.baseline_ms.get(baseline)
        if self.candidate_ms is None or theirs is None:
            return None
        return theirs / self.candidate_ms


# -- timing ------------------------------------------------------------------------------------


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


class Redraw:
    """A `before` hook: draws every floating-point tensor of `inputs` afresh, in place, from a
    normal distribution with the mean and standard deviation its values had when given, so that
    no timed call sees values a call has seen before (a result kept from an earlier call, or a
    call skipped because its inputs look like the last one's, is wrong at the next check)."""

    def __init__(self, inputs: Sequence[torch.Tensor]):
        self.inputs = [t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
        if not self.inputs:
            raise ValueError("nothing to draw afresh: no floating-point input")
        self.moments = [(float(t.float().mean()), float(t.float().std())) for t in self.inputs]
        self.generator = torch.Generator(self.inputs[0].device)
        self.generator.manual_seed(timing.randbelow(2**62))

    def __call__(self) -> None:
        for t, (mean, std) in zip(self.inputs, self.moments, strict=True):
            if t.element_size() == 1:  # float8: torch draws no normal numbers in it
                drawn = torch.empty(t.shape, device=t.device)
                drawn.normal_(mean, std, generator=self.generator)
                limit = torch.finfo(t.dtype).max
                t.copy_(drawn.clamp_(-limit, limit))
            else:
                t.normal_(mean, std, generator=self.generator)


def compare_all(
    candidate: Callable[[], object],
    baselines: dict[str, Callable[[], object]],
    *,
    name: str = "yours",
    verify: Callable[[], None] | None = None,
    before: Callable[[], None] | None = None,
    passes: int = 2,
    sampler: timing.Sampler | None = None,
    session: Callable[[], AbstractContextManager] = nullcontext,
) -> list[Comparison]:
    """Time candidate and each baseline alternately (A B C A B C ...) so drift affects all alike.
    Each timing of the candidate runs inside `session()` (a census's, in `measure`).

    `before()` runs before every call, outside the timed region, to change the inputs (`Redraw`);
    `verify`, when given, must check the output against the inputs as they are now. It runs after
    a few timed calls drawn at random, after the last timed call of each pass, and after each
    pass. A wrong output there, a timer that disagrees with the host clock, or a replaced timer
    is listed in every comparison's `flags`. `sampler` goes to timing.bench (the GPU's
    device_sampler by default)."""
    if sampler is None:
        timing.require_gpu("Comparing speed")
    checks.call_graded(candidate, what="the timed code")  # an unfilled stub, said plainly
    mine, theirs = None, dict.fromkeys(baselines)
    empty = timing.Timing((float("nan"),), 0, False)
    try:
        for _ in range(passes):
            with session():
                t = timing.bench(candidate, sampler=sampler, before=before, check=verify)
            mine = t if mine is None else mine.pooled(t)
            if verify is not None:
                verify()
            for label, fn in baselines.items():
                t = timing.bench(fn, sampler=sampler, before=before)
                theirs[label] = t if theirs[label] is None else theirs[label].pooled(t)
    except checks.KernelCheckError as wrong:
        first = str(wrong).strip().splitlines()[0] if str(wrong).strip() else type(wrong).__name__
        reason = (
            f"the output of a timed call is wrong for the inputs of that call ({first}): is the "
            "output cached or reused between timed calls, or written on another stream?"
        )
        return [
            Comparison(name, mine or empty, label, theirs[label] or empty, (reason,))
            for label in baselines
        ]
    flags = [
        f"{who}: {why}"
        for who, t in [(name, mine), *theirs.items()]
        if (why := timing.clock_disagreement(t))
    ]
    swapped = timing.replaced()
    if swapped:
        flags.append(
            f"{', '.join(swapped)} replaced while timing: these times are not the course's "
            "timer's; is a timer patched?"
        )
    return [Comparison(name, mine, label, t, tuple(flags)) for label, t in theirs.items()]


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
    """`compare_all` against one baseline (the benchmarks' figures; speed cells use `grade`)."""
    (result,) = compare_all(
        candidate,
        {names[1]: baseline},
        name=names[0],
        verify=verify,
        before=before,
        passes=passes,
        sampler=sampler,
    )
    return result


# -- the checks around timing --------------------------------------------------------------------


def own_work_flags(
    candidate: Callable[[], object],
    kernels: Sequence[str],
    inputs: Sequence[torch.Tensor],
    out: torch.Tensor | None,
    verify: Callable[[], None] | None = None,
) -> list[str]:
    """Why the timed code's result is not the work of `kernels` (empty when it is), where no
    census can be taken: one untimed call on the case's own inputs, recorded as the correctness
    checks record theirs (`launches.kernel_work`), then `verify`. With `out`, it is poisoned
    first and every element must be written by `kernels`; without, the tensor the call returns
    must have been handed to one of their launches."""
    try:
        if out is not None:
            out.copy_(checks.poisoned(out.shape, out.dtype, out.device.type))
        with launches.recording(kernels, out) as rec:
            result = checks.call_graded(candidate, what="the timed code")
        returned = result if out is None and isinstance(result, torch.Tensor) else None
        launches.verify(rec, inputs, "the timed code", returned=returned)
        if verify is not None:
            verify()
    except (launches.IntegrityError, checks.KernelCheckError) as wrong:
        first = str(wrong).strip().splitlines()[0] if str(wrong).strip() else type(wrong).__name__
        return [f"the timed code's result is not the work of {' or '.join(kernels)}: {first}"]
    return []


def identity_flags(case: Case) -> list[str]:
    """The baselines marked `distinct` whose output equals the call's, bit for bit, on the same
    inputs (drawn afresh once more)."""
    distinct = [b for b in case.baselines if b.distinct]
    if not distinct:
        return []
    Redraw(case.inputs)()
    result = checks.call_graded(case.candidate, what="the timed code")
    output = case.out if case.out is not None else result
    if not isinstance(output, torch.Tensor):
        return []
    mine = launches.bits(output)
    found = []
    for b in distinct:
        theirs = b.fn()
        if (
            isinstance(theirs, torch.Tensor)
            and theirs.dtype == output.dtype
            and torch.equal(launches.bits(theirs), mine)
        ):
            found.append(
                f"the output equals {b.name}'s bit for bit on the same inputs, which no Triton "
                "kernel reproduces on this problem: did a library compute it?"
            )
    return found


def checked_flags(seen: census.Census, case: Case) -> list[str]:
    """One untimed call inside a census session, its window CHECKED: `out` poisoned first (by
    the harness, outside the window), the output checked against the inputs afterwards. With the
    census saying that nothing but the exercise's kernels ran in the window (`census_flags`),
    every element of `out` is their work: nothing else touched the device."""
    if case.out is not None:
        case.out.copy_(checks.poisoned(case.out.shape, case.out.dtype, case.out.device.type))
    with seen.session():
        seen.watch(lambda: checks.call_graded(case.candidate, what="the timed code"), CHECKED)()
    try:
        case.verify()
    except checks.KernelCheckError as wrong:
        first = str(wrong).strip().splitlines()[0] if str(wrong).strip() else type(wrong).__name__
        return [f"the timed code's result is not the work of {' or '.join(case.kernels)}: {first}"]
    return []


def census_flags(seen: census.Census, case: Case) -> list[str]:
    """What the census of the timed and checked calls says against the case: GPU work other than
    the exercise's kernels, or calls that ran none of them (a census that saw none vouches for
    nothing)."""
    ran = seen.names(TIMED) + seen.names(CHECKED)
    allowed = set(case.kernels)
    kernels = " or ".join(case.kernels)
    found = [
        f"`{name}` ran inside the timed calls: only the exercise's Triton kernels may run "
        "there. Did a library compute the result?"
        for name in census.foreign(ran, allowed)
    ]
    calls, idle = seen.without(TIMED, case.kernels)
    if not calls or idle == calls:
        found.append(
            f"the census of the GPU's work saw no launch of {kernels} in the timed calls: it "
            "cannot vouch for them"
        )
    elif idle:
        found.append(f"{idle} of {calls} timed calls launched none of {kernels}: is work skipped "
                     "on some calls?")  # fmt: skip
    checked, idle = seen.without(CHECKED, case.kernels)
    if idle:
        found.append(f"{idle} of {checked} checked calls launched none of {kernels}")
    return found


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
    """A device-to-device copy that reads and writes `bytes_moved` bytes in all; its buffers are
    made at the first call (a cell may describe it where no GPU is, and never call it)."""
    buffers = []

    def copy():
        if not buffers:
            src = torch.empty(max(1, bytes_moved // 2), dtype=torch.uint8, device="cuda")
            buffers.extend([src.random_(0, 255), torch.empty_like(src)])
        return buffers[1].copy_(buffers[0])

    return copy


# -- the one path ------------------------------------------------------------------------------


def _ceilings(case: Case, comparisons: dict[str, Comparison]) -> list[str]:
    """The case's ceiling flags: its bandwidth against a copy of its bytes (the COPY baseline's
    timing when there is one, else a copy timed now), its FLOP rate against the higher of
    cuBLAS's and each baseline's on the same problem."""
    mine = next(iter(comparisons.values())).candidate
    copy = None
    if case.moved:
        copy = comparisons[COPY].baseline if COPY in comparisons else None
        copy = copy or timing.bench(copy_baseline(int(case.moved)))
    matmul = None
    if case.flops:
        rates = [matmul_ceiling(case.dtype or torch.float32)]
        rates += [
            (f"{n} on this problem", c.baseline.per_second(case.flops))
            for n, c in comparisons.items()
            if n != COPY
        ]
        matmul = max(rates, key=lambda ceiling: ceiling[1])
    return ceiling_flags(mine, bytes_moved=case.moved, copy=copy, flops=case.flops, matmul=matmul)


def measure(case: Case, *, sampler: timing.Sampler | None = None) -> Measured:
    """One case through every check of the module's docstring, timed; never scores. `sampler`
    replaces the GPU's: the grader's own tests time on the CPU, where no census can be taken
    and the call's own work is checked by recording its Triton launches (`own_work_flags`)."""
    if sampler is not None:
        return _measured(case, *_timed_on_the_cpu(case, sampler))
    checks.call_graded(case.candidate, what="the timed code")  # the first call, which may tune
    seen = census.Census()
    try:
        flags = checked_flags(seen, case)
        if flags:
            return Measured(case.name or "this problem", flags=tuple(flags))
        results = compare_all(
            seen.watch(case.candidate, TIMED),
            {b.name: b.fn for b in case.baselines},
            verify=case.verify,
            before=Redraw(case.inputs),
            session=seen.session,
        )
        flags = list(results[0].flags)
        if not flags:
            flags += checked_flags(seen, case)
    except census.CensusUnavailable as unavailable:
        return Measured(case.name or "this problem", flags=(str(unavailable),))
    if _stopped(results):
        return Measured(case.name or "this problem", flags=tuple(flags))
    flags += census_flags(seen, case)
    if not flags:
        flags += identity_flags(case)
    if not flags:
        flags += _ceilings(case, {c.baseline_name: c for c in results})
    measured = _measured(case, results, flags)
    if case.traffic is None or flags:
        return measured
    return dataclasses.replace(measured, **_counted(case.traffic, case.kernels))


def _counted(traffic: Traffic, kernels: Sequence[str]) -> dict:
    """Measured's `dram_bytes` (what the kernels read and wrote), or `uncounted`: why not (no
    ncu, no permission: the ProfileError's message)."""
    try:
        found = profile.of(traffic.factory, kernels=list(kernels), params=dict(traffic.params))
    except profile.ProfileError as failed:
        return {"uncounted": str(failed)}
    read = profile.total(found, "dram_bytes_read")
    written = profile.total(found, "dram_bytes_written")
    if read is None or written is None:
        return {"uncounted": "Nsight Compute returned no DRAM bytes"}
    return {"dram_bytes": read + written}


def _timed_on_the_cpu(case: Case, sampler: timing.Sampler) -> tuple[list[Comparison], list[str]]:
    flags = own_work_flags(case.candidate, case.kernels, case.inputs, case.out, case.verify)
    if flags:
        return [], flags
    results = compare_all(
        case.candidate,
        {b.name: b.fn for b in case.baselines},
        verify=case.verify,
        before=Redraw(case.inputs),
        sampler=sampler,
    )
    flags = list(results[0].flags)
    if not flags and not _stopped(results):
        flags += own_work_flags(case.candidate, case.kernels, case.inputs, case.out, case.verify)
    if not flags and not _stopped(results):
        flags += identity_flags(case)
    return results, flags


def _stopped(results: list[Comparison]) -> bool:
    """Whether timing stopped (an output was wrong) before every timing was taken."""
    return not (results[0].candidate.rounds and all(c.baseline.rounds for c in results))


def _measured(case: Case, results: list[Comparison], flags: list[str]) -> Measured:
    label = case.name or "this problem"
    if not results or _stopped(results):
        return Measured(label, flags=tuple(flags))
    mine = results[0].candidate
    lines = [f"{label}: {mine}"] + [
        f"{c.baseline_name}: {c.baseline} (yours {c.speedup:.2f}x)" for c in results
    ]
    baselines = {c.baseline_name: c.baseline.median_ms for c in results}
    return Measured(label, mine.median_ms, baselines, tuple(flags), tuple(lines))


def verdicts_of(case: Case, measured: Measured) -> tuple[list[Verdict], list[str]]:
    """The graded verdicts of a measured case, its flags on each, and lines for the baselines
    shown but not graded."""
    graded, shown = [], []
    for b in case.baselines:
        speedup = measured.speedup(b.name)
        figure = None if speedup is None else (100 * speedup if b.unit == "%" else speedup)
        if b.at_least is None:
            if figure is not None:
                shown.append(f"{case.label(b)}: {figure:.2f}{b.unit} (shown, not graded)")
            continue
        needed = 100 * b.at_least if b.unit == "%" else b.at_least
        graded.append(Verdict(case.label(b), figure, needed, b.unit, measured.flags))
    if case.traffic is None or measured.flags:  # flagged: no count was taken, and 0 points
        return graded, shown
    if measured.dram_bytes is None:
        why = measured.uncounted or "no GPU to count them on"
        shown.append(f"DRAM bytes not counted, so not graded: {why}")
    else:
        label = f"{case.name}: {Traffic.comparison}" if case.name else Traffic.comparison
        ratio = measured.dram_bytes / case.traffic.fewest
        graded.append(Verdict(label, ratio, case.traffic.margin, at_most=True))
    return graded, shown


def score(verdicts: Sequence[Verdict], points: float) -> float:
    """Publish every verdict of a speed cell with its mark, then the cell's score: full points
    when each passed; 0 with every reason printed when any is flagged; else 0."""
    reasons = list(dict.fromkeys(f for v in verdicts for f in v.flags))
    for v in verdicts:
        mark = "FLAGGED" if v.flags else "ok" if v.passed else "TOO SLOW"
        publish_verdict(v, f"{v.line()} {mark}")
    if reasons:
        for reason in reasons:
            print(f"{FLAGGED}: {reason}")
        print(f"NOT SCORED: the speed above cannot be trusted: 0 of {points:g} points")
        return 0.0
    short = [v.comparison for v in verdicts if not v.passed]
    if short or not verdicts:
        print(f"NOT YET: short of {', '.join(short) or 'a figure'}: 0 of {points:g} points")
        return 0.0
    print(f"PASS: {points:g} of {points:g} points")
    return float(points)


def grade(*cases: Case, points: float, needs: str | None = None) -> float:
    """The score of a speed cell: `points` when every graded comparison of every case passes
    untouched by any flag (see the module's docstring), else 0; off the supported GPU class, or
    on a GPU without `needs` (a feature of grader.runtime.device, such as "sm_90"), 0 with a
    message that says why."""
    dev = device.current()
    if not dev.grades_speed or (needs is not None and not dev.supports(needs)):
        return not_graded_here(points, needs)
    with recorded.speed_cell():
        verdicts = []
        for case in cases:
            measured = measure(case)
            graded, shown = verdicts_of(case, measured)
            for line in (*measured.lines, *shown):
                print(line)
            verdicts += graded
        return score(verdicts, points)


def not_graded_here(points: float, needs: str | None = None) -> float:
    """The score of a speed cell off the supported GPU class (or, with `needs`, on a GPU that
    lacks the feature the cell measures), said out loud."""
    dev = device.current()
    lacks = needs is not None and dev.grades_speed  # a GPU of the class, without `needs`
    where = f" with {device.FEATURE_NAMES[needs]}" if lacks else ", sm_80 or newer"
    later = "this cell's speed on such a GPU" if lacks else "speed on a GPU"
    print(
        f"{NOT_GRADED_HERE}{where}; this notebook runs on {dev.describe()}. This cell scores 0 "
        f"of {points:g} here; correctness points are not affected. Your instructor grades "
        f"{later}."
    )
    recorded.show_speed()
    return 0.0


timing.watch(
    sys.modules[__name__],
    [
        "compare_all",
        "grade",
        "measure",
        "score",
        "ceiling_flags",
        "own_work_flags",
        "census_flags",
        "checked_flags",
        "identity_flags",
        "matmul_ceiling",
    ],
    "grader.runtime.perf",
)
timing.watch(launches, ["kernel_work", "recording", "verify"], "grader.runtime.launches")
timing.watch(census, ["attribute", "foreign", "Census"], "grader.runtime.census")
