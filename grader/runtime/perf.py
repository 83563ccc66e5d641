"""Speed, graded one way: every speed cell calls `grade` (tests/test_lint.py fails on one that
times by another route). At grading the judge measures each case (grader.grading.judge, asked
through grader.runtime.watches.elsewhere); in a student's own notebook `measure` does.

A cell describes one or more `Case`s: the call under test, the exercise's kernels it must run,
its inputs and output, a check of the output against the inputs as they are, and the baselines
to beat, each with its threshold: a ratio measured in the same run on the same device, never an
absolute time. On a GPU `measure` times the call and the baselines alternately (`compare_all`),
every input drawn afresh before every timed call (`Redraw`) and the output checked after each
pass, each timed call of the candidate inside a census of the GPU's work
(grader.runtime.census), and names a kernel, copy or fill in a timed call that is not one of the
exercise's kernels, and a timed call that launched none (`census_flags`): feedback for the
student's own run, where nothing stops her process from rewriting it. At grading the judge
checks the call's own work, the output of calls it picks, a `distinct` baseline's output
(`identity_flags`) and the device's ceilings (`ceiling_flags_of`) itself.

Anything found is a flag (a line beginning with FLAGGED, the reasons in the published verdicts)
and 0 points."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import torch

from grader.runtime import census, checks, device, launches, profile, recorded, timing, watches
from grader.runtime.published import SPEED_MIMETYPE, Verdict

NOT_GRADED_HERE = "Speed is graded on an NVIDIA GPU"  # begins the message off the GPU class
FLAGGED = "SPEED FLAGGED"  # begins each printed reason a speed cell is not scored
# A kernel may beat the copy's bandwidth or cuBLAS's FLOP rate measured in the same run by this
# much at most; beyond, the figure is not one this device produces.
BANDWIDTH_MARGIN = 0.10
FLOP_MARGIN = 0.15
DRAM_MARGIN = 1.1  # times the fewest DRAM bytes a call needs, as Nsight Compute counts them
CEILING_SIZES = (4096, 8192)  # the square matmuls whose best FLOP rate is the ceiling
COPY = "copy bandwidth"  # a baseline of this name is a copy of the case's bytes, in percent
TIMED = "timed"  # the census's window of a timed call


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
        recorded.say(text, {"verdict": verdict.record()})
    else:
        recorded.note_verdict(verdict.record())
        display({SPEED_MIMETYPE: verdict.record(), "text/plain": text}, raw=True)
    return verdict.passed


# -- what a speed cell describes ---------------------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    """What the call under test is timed against. `at_least`: the speedup it needs (for COPY, a
    fraction of its bandwidth), None where only shown; `distinct`: the call's output must differ
    from this baseline's, bit for bit (`identity_flags`)."""

    name: str
    fn: Callable[[], object]
    at_least: float | None
    distinct: bool = False
    bytes_moved: float | None = None  # COPY's: the bytes it reads and writes

    @property
    def unit(self) -> str:
        return "%" if self.name == COPY else "x"


def copy_bandwidth(bytes_moved: int, at_least: float | None) -> Baseline:
    """A copy of `bytes_moved` bytes (read and written) as a baseline: the call needs `at_least`
    of its bandwidth."""
    return Baseline(COPY, copy_baseline(bytes_moved), at_least, bytes_moved=bytes_moved)


@dataclass(frozen=True)
class Traffic:
    """The DRAM bytes a case's call may move, counted by Nsight Compute (grader.runtime.profile)
    in a process of its own, where `factory(**params)`, of the notebook, makes the same call: at
    most `margin` times `fewest`. A count of bytes drifts neither with clocks nor patched timers."""

    factory: Callable[..., Callable[[], object]]
    params: Mapping[str, object]
    fewest: float
    margin: float = DRAM_MARGIN

    comparison = "the fewest DRAM bytes, counted by Nsight Compute"


@dataclass(frozen=True)
class Case:
    """One problem a speed cell times. `candidate()`, the graded call, must run `kernels` (the
    exercise's Triton kernels) on `inputs` and write `out` (or return its result: `out` None);
    `verify()` checks the output against the inputs as they are now (redrawn before every timed
    call). `bytes_moved` and `flops` set the ceilings, `dtype` (the inputs') cuBLAS's FLOP rate;
    `name` tells cases of a cell apart ("D=64, causal"); `traffic` adds a graded DRAM count."""

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
    """What `measure` found for one case: the medians in milliseconds of the call (None where the
    measurement stopped) and of each baseline; flags, why the figures cannot be trusted; lines
    for people; the DRAM bytes counted, or why not."""

    case: str
    candidate_ms: float | None = None
    baseline_ms: dict[str, float] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()
    dram_bytes: float | None = None  # read and written, counted (Case.traffic)
    uncounted: str | None = None  # why the DRAM bytes of a case with traffic were not counted
    countable: bool = False  # the host can count them: the count missing fails the case
    unavailable: str | None = None  # why nothing could be measured here: 0 points, no flag

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
    """A `before` hook: every floating-point tensor of `inputs` drawn afresh, in place, from a
    normal distribution of the mean and std its values had, so that a result kept from an earlier
    call, or a call skipped because its inputs look like the last one's, is wrong when checked."""

    def __init__(self, inputs: Sequence[torch.Tensor]):
        self.inputs = [t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
        if not self.inputs:
            raise ValueError("nothing to draw afresh: no floating-point input")
        self.moments = [(float(t.float().mean()), float(t.float().std())) for t in self.inputs]
        self.generator = torch.Generator(self.inputs[0].device)
        self.generator.seed()

    def __call__(self) -> None:
        draw(self.inputs, self.moments, self.generator)


def draw(inputs: Sequence[torch.Tensor], moments: Sequence, generator: torch.Generator) -> None:
    """Each tensor of `inputs` drawn afresh, in place, from a normal distribution of its (mean,
    std) in `moments`: the same `generator` state on a device draws the same, in either process."""
    for t, (mean, std) in zip(inputs, moments, strict=True):
        if t.element_size() == 1:  # float8: torch draws no normal numbers in it
            drawn = torch.empty(t.shape, device=t.device).normal_(mean, std, generator=generator)
            limit = torch.finfo(t.dtype).max
            t.copy_(drawn.clamp_(-limit, limit))
        else:
            t.normal_(mean, std, generator=generator)


def compare_all(
    candidate: Callable[[], object],
    baselines: dict[str, Callable[[], object]],
    *,
    name: str = "yours",
    verify: Callable[[], None] | None = None,
    before: Callable[[], None] | None = None,
    sampler: timing.Sampler | None = None,
    session: Callable[[], AbstractContextManager] = nullcontext,
) -> list[Comparison]:
    """Time candidate and each baseline alternately (A B C A B C ...), in two passes, so drift
    affects all alike; each timing of the candidate inside `session()` (a census's, in `measure`).
    `before()` runs before every call, untimed, to change the inputs (`Redraw`); `verify` checks
    the output against the inputs as they are after each pass: a wrong output stops the timing
    and is in every comparison's `flags`. `sampler` goes to timing.bench (the GPU's
    device_sampler by default)."""
    if sampler is None:
        timing.require_gpu("Comparing speed")
    checks.call_graded(candidate, what="the timed code")  # an unfilled stub, said plainly
    mine, theirs = None, dict.fromkeys(baselines)
    try:
        for _ in range(2):
            with session():
                t = timing.bench(candidate, sampler=sampler, before=before)
            mine = t if mine is None else mine.pooled(t)
            if verify is not None:
                verify()
            for label, fn in baselines.items():
                t = timing.bench(fn, sampler=sampler, before=before)
                theirs[label] = t if theirs[label] is None else theirs[label].pooled(t)
    except checks.KernelCheckError as wrong:
        empty = timing.Timing((float("nan"),), 0, False)  # no figure of a wrong output
        return [
            Comparison(name, empty, label, empty, (wrong_output(wrong),)) for label in baselines
        ]
    return [Comparison(name, mine, label, t) for label, t in theirs.items()]


def compare(
    candidate: Callable[[], object],
    baseline: Callable[[], object],
    *,
    names: tuple[str, str] = ("yours", "baseline"),
    **options,
) -> Comparison:
    """`compare_all` against one baseline (the benchmarks' figures; speed cells use `grade`):
    `options` are its `verify`, `before` and `sampler`."""
    (result,) = compare_all(candidate, {names[1]: baseline}, name=names[0], **options)
    return result


def _first(wrong: Exception) -> str:
    """The first line of a failed check's message, or its type's name."""
    said = str(wrong).strip()
    return said.splitlines()[0] if said else type(wrong).__name__


def not_their_work(kernels: Sequence[str], wrong: Exception) -> list[str]:
    """The flag on a checked call whose result `wrong` says is not the kernels' work."""
    return [f"the timed code's result is not the work of {' or '.join(kernels)}: {_first(wrong)}"]


def wrong_output(wrong: Exception) -> str:
    """The flag on a timed call whose output `wrong` says is wrong for that call's inputs."""
    return (
        f"the output of a timed call is wrong for the inputs of that call ({_first(wrong)}): "
        "is the output cached or reused between timed calls, or written on another stream?"
    )


# -- the checks around timing --------------------------------------------------------------------


def identity_flags(case: Case) -> list[str]:
    """The `distinct` baselines whose output equals the call's bit for bit on fresh inputs."""
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


def census_flags(seen: census.Census, case: Case) -> list[str]:
    """What the census of the timed calls says against the case: GPU work other than the
    exercise's kernels, or calls that ran none (a census that saw none vouches for nothing)."""
    kernels = " or ".join(case.kernels)
    found = [
        f"`{census.short(name)}` ran inside the timed calls: only the exercise's Triton kernels "
        "may run there. Did a library compute the result?"
        for name in census.foreign(seen.names(TIMED), set(case.kernels))
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


@functools.cache
def matmul_ceiling(dtype: torch.dtype) -> tuple[str, float]:
    """(label, FLOP/s) of torch.matmul on square `dtype` matrices of each of CEILING_SIZES, timed
    at the first call for `dtype` in this process (a student's grading), with TF32 allowed for
    float32: the fastest this device multiplies matrices of that type (the larger size is not
    always the faster: an H100 measured 642 TFLOP/s at 8192^3 in a run whose 4096^3 reached 741)."""
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


def ceiling_flags_of(case: Case, comparisons: dict[str, Comparison]) -> list[str]:
    """The case's ceiling flags: its bandwidth against its COPY baseline, else a copy timed now;
    its FLOP rate against the higher of cuBLAS's and each baseline's on the same problem."""
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


def measure(case: Case) -> Measured:
    """One case timed, with the checks of the module's docstring; never scores."""
    away = watches.elsewhere()  # at grading, the judge: the call may run in another process
    found = away.measure(case) if away is not None else None
    if found is not None:
        return found
    seen = census.Census()
    try:
        results = compare_all(
            seen.watch(case.candidate, TIMED),
            {b.name: b.fn for b in case.baselines},
            verify=case.verify,
            before=Redraw(case.inputs),
            session=seen.session,
        )
    except census.CensusUnavailable as unavailable:
        return Measured(case.name or "this problem", flags=(str(unavailable),))
    flags = list(results[0].flags) or census_flags(seen, case)
    measured = measured_from(case, results, flags)
    if case.traffic is None or flags:
        return measured
    return dataclasses.replace(measured, **counted(case.traffic, case.kernels))


def counted(traffic: Traffic, kernels: Sequence[str], **options) -> dict:
    """Measured's `dram_bytes` (what the kernels read and wrote), or `uncounted`: why not, with
    `countable` where the failure is the call's, not the host's (it then fails the case).
    `options` go to profile.each (the judge's sources and runner)."""
    call = profile.Call(traffic.factory, list(kernels), dict(traffic.params))
    try:
        found = profile.each({"": call}, metrics=profile.TRAFFIC, **options)[""]
    except profile.ProfileError as failed:
        return {"uncounted": str(failed), "countable": failed.reason not in profile.HOST_CANNOT}
    read = profile.total(found, "dram_bytes_read")
    written = profile.total(found, "dram_bytes_written")
    if read is None or written is None:
        return {"uncounted": "Nsight Compute returned no DRAM bytes", "countable": True}
    return {"dram_bytes": read + written}


def _stopped(results: list[Comparison]) -> bool:
    """Whether timing stopped (an output was wrong) before every timing was taken."""
    return not (results[0].candidate.rounds and all(c.baseline.rounds for c in results))


def measured_from(case: Case, results: list[Comparison], flags: list[str]) -> Measured:
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
    """A measured case's graded verdicts, its flags on each, and lines for those shown only."""
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
    label = f"{case.name}: {Traffic.comparison}" if case.name else Traffic.comparison
    if measured.dram_bytes is None and measured.countable:  # failing closed: the count is owed
        graded.append(Verdict(label, None, case.traffic.margin, at_most=True))
        shown.append(f"DRAM bytes not counted: {measured.uncounted}")
    elif measured.dram_bytes is None:
        why = measured.uncounted or "no GPU to count them on"
        shown.append(f"DRAM bytes not counted, so not graded: {why}")
    else:
        ratio = measured.dram_bytes / case.traffic.fewest
        graded.append(Verdict(label, ratio, case.traffic.margin, at_most=True))
    return graded, shown


def score(verdicts: Sequence[Verdict], points: float) -> float:
    """Publish every verdict of a speed cell with its mark; the cell's score: full points when
    each passed, else 0 (with every reason printed where any is flagged)."""
    reasons = list(dict.fromkeys(f for v in verdicts for f in v.flags))
    for v in verdicts:
        mark = "FLAGGED" if v.flags else "ok" if v.passed else "TOO SLOW"
        mark = "NOT MEASURED" if v.measured is None and not v.flags else mark
        publish_verdict(v, f"{v.line()} {mark}")
    for reason in reasons:
        print(f"{FLAGGED}: {reason}")
    short = [v.comparison for v in verdicts if not v.passed]
    if reasons:
        return _scored(0.0, points, "NOT SCORED: the speed above cannot be trusted")
    if short or not verdicts:
        return _scored(0.0, points, f"NOT YET: short of {', '.join(short) or 'a figure'}")
    return _scored(float(points), points, "PASS")


def _scored(awarded: float, points: float, why: str) -> float:
    """Say a speed cell's score (kept as data where it is recorded) and return it."""
    line = f"{why}: {awarded:g} of {points:g} points"
    recorded.say(line, {"score": {"awarded": awarded, "points": points}})
    return awarded


def grade(*cases: Case, points: float, needs: str | None = None) -> float:
    """The score of a speed cell: `points` when every graded comparison of every case passes
    untouched by any flag, else 0; off the supported GPU class, or on a GPU without `needs` (a
    grader.runtime.device feature, such as "sm_90"), 0 with a message that says why."""
    dev = device.current()
    if not dev.grades_speed or (needs is not None and not dev.supports(needs)):
        return not_graded_here(points, needs)
    with recorded.speed_cell():
        verdicts = []
        for case in cases:
            measured = measure(case)
            if measured.unavailable:
                return _scored(0.0, points, f"NOT SCORED: {measured.unavailable}")
            graded, shown = verdicts_of(case, measured)
            for line in (*measured.lines, *shown):
                print(line)
            verdicts += graded
        return score(verdicts, points)


def not_graded_here(points: float, needs: str | None = None) -> float:
    """The score of a speed cell off the supported GPU class (or on a GPU that lacks `needs`),
    said out loud."""
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
