"""A KernelBench-style audit of a candidate kernel against a reference.

`audit(candidate, reference, cases)` runs a sweep of cases (sizes of 1, odd and larger, several
dtypes, non-contiguous views, flags such as causal, extreme values), each on several seeds
written into the same memory, with every tensor the candidate allocates poisoned and every call to
the reference watched; it prints a table of what failed, where and by how much, and returns a
`Report`. One crashing case does not stop the sweep. Nothing in it needs a GPU.

Also here: the course's taxonomy of defects in attention kernels (`TAXONOMY`), a review of 32-bit
offset arithmetic (`offset_review`, for the one defect no small run can show), and a loader for
kernels kept as files (`load_module`).
"""

from __future__ import annotations

import ast
import importlib.util
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from grader.runtime import checks, handin, integrity, precision, syntax

INT32_MAX = 2**31 - 1


# -- the taxonomy ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Defect:
    """One kind of defect: a short stable id, what it is, and how it fails in the audit (`shows`:
    the kinds of failure a Result names, or "review" for the offset review). The cases built to
    catch it name it in their `catches`."""

    id: str
    title: str
    shows: tuple[str, ...]


# How a Result names each kind of failure, in the words its message uses.
KINDS = {
    "wrong": "wrong at",
    "nonfinite": "NaN/inf",
    "poison": "poison",
    "calls": "called torch",
    "stale": "cached?",
    "review": "review FAIL",
}
# The same kinds as evidence, in a sentence.
EVIDENCE = {
    "wrong": "wrong values",
    "nonfinite": "NaN/inf",
    "poison": "poison",
    "calls": "calls to torch",
    "stale": "a cached output",
    "review": "a failed review",
}
OFFSET_REVIEW = "offset review"  # what shows int32-offset: the review, not a case

TAXONOMY: dict[str, Defect] = {
    d.id: d
    for d in (
        Defect("missing-mask", "missing boundary mask: keys past N take weight", ("wrong",)),
        Defect("wrong-scale", "wrong softmax scale, or exp/exp2 mismatch", ("wrong",)),
        Defect("no-rescale", "accumulator not rescaled when the running max rises", ("wrong",)),
        Defect("causal-off-by-one", "causal mask off by one", ("wrong", "nonfinite")),
        Defect("zero-fill", "masked scores filled with 0 instead of -inf", ("wrong",)),
        Defect("fp16-accum", "accumulation in fp16", ("wrong", "nonfinite")),
        Defect("int32-offset", "int32 offset overflow at large sizes", ("review",)),
        Defect("assumes-contiguous", "assumes contiguous inputs", ("wrong", "nonfinite")),
        Defect("uninit-read", "reads memory it never wrote", ("nonfinite", "poison")),
        Defect("torch-fallback", "a fallback that calls the PyTorch reference", ("calls",)),
        Defect("address-cache", "results cached by input address", ("stale",)),
    )
}


def taxonomy_table() -> str:
    """The taxonomy as a plain-text table: id, what it is, and how it fails in the audit."""
    rows = [("id", "defect", "fails as")]
    rows += [(d.id, d.title, ", ".join(KINDS[k] for k in d.shows)) for d in TAXONOMY.values()]
    w0, w1 = (max(len(r[i]) for r in rows) for i in range(2))
    return "\n".join(f"{r[0]:{w0}}  {r[1]:{w1}}  {r[2]}" for r in rows)


def check_defects(answer: Mapping, draft: str, report: Report, count: int | None = None) -> set:
    """The set of defect ids named for `draft`, after checking its form and its evidence. The
    answer maps each id to what shows it in `report`, the audit of `draft`: the name of a case
    built to catch the id that the draft fails the way the id fails, or OFFSET_REVIEW for
    int32-offset; and together the ids must account for every way the draft fails
    (Report.unexplained). Raises AssertionError with a plain message when the answer is not
    that, or, given the `count` of defects the draft has, when it names another number of them.
    Only `draft`'s entry is read: each draft is graded on its own."""
    handin.advise()
    __tracebackhide__ = True
    named = answer.get(draft) if isinstance(answer, Mapping) else None
    if not isinstance(named, Mapping):
        raise AssertionError(
            f"DEFECTS[{draft!r}] must map each defect id to the name of the case that shows it, "
            "a string: {'<id>': '<case name>', ...}"
        )
    unknown = sorted(str(n) for n in named if n not in TAXONOMY)
    if unknown:
        raise AssertionError(
            f"DEFECTS[{draft!r}] names unknown ids {unknown}; known: {', '.join(TAXONOMY)}"
        )
    has = f"{draft} has {count} defects" if count else "every draft has at least one defect"
    if not named:
        raise AssertionError(f"DEFECTS[{draft!r}] is empty: {has}")
    if count and len(named) != count:
        raise AssertionError(
            f"{has}; you named {len(named)}: for each id, find the line of its code that does the "
            "wrong thing and what in the audit or the offset review shows it"
        )
    for defect, witness in named.items():
        why = report.unshown(TAXONOMY[defect], witness)
        if why:
            raise AssertionError(f"DEFECTS[{draft!r}][{defect!r}]: {why}")
    why = report.unexplained(named)
    if why:
        raise AssertionError(f"DEFECTS[{draft!r}]: {why}")
    return set(named)


# -- cases, results, reports -----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One line of the sweep: inputs built from a generator, keyword arguments for both the
    candidate and the reference, the defect ids it was built to catch, its tolerance, and the ids
    it rules out: a kernel whose key blocks are one tile long and whose only defects are among
    those passes it (`rules_out`)."""

    name: str
    make_inputs: Callable[[torch.Generator], Sequence]
    kwargs: Mapping = field(default_factory=dict)
    catches: tuple[str, ...] = ()
    rtol: float | None = None
    atol: float | None = None
    trials: int = 2
    rules_out: tuple[str, ...] = ()


@dataclass(frozen=True)
class Result:
    """How one case went: max abs error over finite elements, the first mismatching index, and a
    one-line message; `detail` keeps the checker's full text."""

    case: str
    passed: bool
    seeds: tuple[int, ...]
    max_abs_error: float | None = None
    first_mismatch: tuple[int, ...] | None = None
    message: str = "ok"
    detail: str = ""
    kinds: tuple[str, ...] = ()  # how it failed: keys of KINDS, or crash, type, shape, ...


class AuditFailed(AssertionError):
    """At least one case of an audit failed; the message is the audit's table."""


@dataclass
class Report:
    """Every case's result, and the offset review if one was made."""

    candidate: str
    results: list[Result]
    review: OffsetReview | None = None
    catches: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # case -> defect ids
    rules_out: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # case -> defect ids

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results) and (self.review is None or self.review.ok)

    @property
    def failed(self) -> list[Result]:
        return [r for r in self.results if not r.passed]

    def result(self, case: str) -> Result:
        return next(r for r in self.results if r.case == case)

    def unshown(self, defect: Defect, witness: object) -> str | None:
        """Why `witness` (a case's name, or OFFSET_REVIEW) does not show `defect` in this
        report, or None when it does: a case built to catch it, failed the way it fails."""
        built = [c for c, ids in self.catches.items() if defect.id in ids]
        built += [OFFSET_REVIEW] if "review" in defect.shows else []
        if witness not in [*self.catches, OFFSET_REVIEW]:
            return f"no case is named {str(witness)[:60]!r}; their names: {', '.join(self.catches)}"
        if witness not in built:
            return f"{witness!r} was not built to catch it; these were: {', '.join(built)}"
        if witness == OFFSET_REVIEW:
            return None if self.review and not self.review.ok else "the offset review passes"
        r = self.result(witness)
        if r.passed:
            return f"{self.candidate} passes {witness!r}"
        if not set(r.kinds) & set(defect.shows):
            shows = ", ".join(KINDS[k] for k in defect.shows)
            found = f"{self.candidate} fails {witness!r} with {r.message}"
            return f"{found}, where {defect.id} fails as {shows}: which defect fails that way?"
        return None

    def unexplained(self, named: Iterable[str]) -> str | None:
        """Why the defect ids `named` do not account for this report, or None when they do: each
        way each case fails (wrong values, NaN/inf, poison, calls to torch, a cached output, the
        offset review) must be a way one of them fails, by an id the case does not rule out."""
        named = [TAXONOMY[n] for n in named]
        known = {kind for d in TAXONOMY.values() for kind in d.shows}
        failed = [(r.case, r.kinds) for r in self.failed]
        if self.review is not None and not self.review.ok:
            failed.append((OFFSET_REVIEW, ("review",)))
        for case, kinds in failed:
            ruled = self.rules_out.get(case, ())
            for kind in (k for k in kinds if k in known):
                if any(kind in d.shows and d.id not in ruled for d in named):
                    continue
                ruling = [d.id for d in named if kind in d.shows and d.id in ruled]
                why = f" (the case rules out {' and '.join(ruling)})" if ruling else ""
                return (
                    f"{self.candidate} shows {EVIDENCE[kind]} in {case!r}, and none of the ids "
                    f"named gives that there{why}: which defect does?"
                )
        return None

    def table(self, width: int = 72) -> str:
        good = sum(r.passed for r in self.results)
        head = f"audit of {self.candidate}: {good} of {len(self.results)} cases pass"
        rows = [("case", "verdict", "max abs err", "first mismatch", "message")]
        for r in self.results:
            message = r.message if len(r.message) <= width else r.message[: width - 3] + "..."
            error = "-" if r.max_abs_error is None else f"{r.max_abs_error:.2e}"
            index = "-" if r.first_mismatch is None else str(list(r.first_mismatch))
            rows.append((r.case, "pass" if r.passed else "FAIL", error, index, message))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = [head] + [
            "  ".join([*(f"{c:{w}}" for c, w in zip(row[:4], widths, strict=True)), row[4]])
            for row in rows
        ]
        if self.review is not None:
            lines.append(str(self.review))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def explain(self, case: str) -> str:
        """The full text behind one case's message: seeds, every trial's finding, first
        mismatches."""
        r = self.result(case)
        return f"{r.case} (seeds {list(r.seeds)}): {r.message}\n{r.detail}".rstrip()

    def check(self) -> None:
        """Raise AuditFailed, with the table, unless every case passed."""
        __tracebackhide__ = True
        if not self.passed:
            raise AuditFailed(self.table(width=200))


# -- running the sweep -----------------------------------------------------------------------------

_ALLOCATORS = {"empty", "empty_like", "new_empty", "empty_strided"}


class PoisonAllocations(integrity.WatchMode):
    """While active, every tensor made by torch.empty / empty_like / empty_strided /
    Tensor.new_empty is filled with the grader's NaN poison, so that a kernel which reads memory
    it never wrote sees NaN rather than whatever (often zeros) the allocator handed out."""

    def remote(self, codec) -> dict:
        return {"kind": "poison"}

    def absorb(self, report: dict, context) -> None:
        pass

    def watch(self, func, args, kwargs):
        result = func(*args, **kwargs)
        if getattr(func, "__name__", "") in _ALLOCATORS and isinstance(result, torch.Tensor):
            if result.numel():
                poison = checks.poisoned(result.shape, result.dtype, where=result.device.type)
                result.copy_(poison)
        return result


def _one_line(exc: BaseException) -> str:
    first = next(iter(str(exc).strip().splitlines()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().cpu().view(torch.uint8)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def _mismatch(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float):
    """((kind, what is wrong in words) or None, max abs error over finite elements, first bad
    index)."""
    ok, untouched, got, want, error, finite = checks.agreement(actual, expected, rtol, atol)
    max_abs = float(error[finite].max()) if finite.any() else None
    if ok.all():
        return None, max_abs, None
    bad = ~ok
    first = checks.unravel(int(bad.nonzero()[0]), actual.shape)
    total = got.numel()
    if untouched.any():
        what = (
            "poison",
            f"poison at {int(untouched.sum())}/{total}: never written, or read unwritten memory",
        )
    elif (bad & ~got.isfinite() & want.isfinite()).any():
        count = int((bad & ~got.isfinite()).sum())
        what = ("nonfinite", f"NaN/inf at {count}/{total} (reference finite)")
    else:
        what = ("wrong", f"wrong at {int(bad.sum())}/{total}")
    return what, max_abs, first


def _name(fn) -> str:
    module = getattr(fn, "__module__", None) or ""
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    short = module.rsplit(".", 1)[-1]
    return f"{short}.{qual}" if short and short not in {"__main__", "builtins"} else qual


def _run_case(candidate, reference, case: Case, forbid, seed: int | None) -> Result:
    notes: dict[str, str] = {}  # kind -> the first trial's words for it
    details: list[str] = []
    seeds: list[int] = []
    max_abs: float | None = None
    first_bad: tuple[int, ...] | None = None
    first_args = None
    previous = None
    seed = checks.new_seed() if seed is None else seed
    for trial in range(case.trials):
        trial_seed = seed + trial
        seeds.append(trial_seed)
        tag = f"seed {trial + 1}" if case.trials > 1 else "the call"
        try:
            args = tuple(case.make_inputs(checks.generator(trial_seed)))
            if first_args is None:
                first_args = args
            else:  # new values in the first trial's memory: a cache keyed on addresses goes stale
                args = tuple(checks.refill(o, n) for o, n in zip(first_args, args, strict=True))
            expected = reference(*checks.upcast(args), **case.kwargs)
        except Exception as exc:  # a broken case is the harness's fault: say so, keep going
            return Result(case.name, False, tuple(seeds), message=f"case setup failed: {exc}")
        saved = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        watch = integrity.ReferenceWatch(forbid)
        try:
            # NaN the candidate makes is reported below, not warned about by NumPy
            with watch, np.errstate(all="ignore"), PoisonAllocations():
                out = checks.call_graded(candidate, *args, **case.kwargs)
            if isinstance(out, torch.Tensor) and out.is_cuda:
                torch.cuda.synchronize()
        except Exception as exc:
            notes.setdefault("crash", f"crashed: {_one_line(exc)}")
            details.append(f"{tag}: {exc}")
            break
        if watch.calls:
            notes.setdefault("calls", f"called {', '.join(sorted(set(watch.calls)))}")
        if not isinstance(out, torch.Tensor):
            notes.setdefault("type", f"returned {type(out).__name__}, not a tensor")
            break
        if tuple(out.shape) != tuple(expected.shape):
            got, want = tuple(out.shape), tuple(expected.shape)
            notes.setdefault("shape", f"returned shape {got}, expected {want}")
            break
        want_dtype = next(
            (a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()),
            out.dtype,
        )
        if out.dtype != want_dtype:
            notes.setdefault("dtype", f"returned {out.dtype} for {want_dtype} inputs")
        changed = [
            i
            for i, (before, after) in enumerate(zip(saved, args, strict=True))
            if isinstance(before, torch.Tensor) and not _same_bits(before, after)
        ]
        if changed:
            notes.setdefault("input", f"wrote to input {changed[0]}")
        rounded = expected.to(out.dtype)
        informative = bool(out.isfinite().any())  # all NaN twice says nothing about caching
        if previous is not None and informative and _same_bits(out, previous[0]):
            if not _same_bits(rounded, previous[1]):  # new inputs, new answer, old output
                notes.setdefault("stale", f"{tag} returned seed {trial}'s output: cached?")
        previous = (out.detach().clone(), rounded)
        rtol, atol = checks.tolerance(out.dtype, case.rtol, case.atol)
        what, err, first = _mismatch(out, expected, rtol, atol)
        if err is not None:
            max_abs = err if max_abs is None else max(max_abs, err)
        if what is not None:
            notes.setdefault(*what)
            first_bad = first_bad if first_bad is not None else first
            try:
                checks.compare(out, expected, rtol=rtol, atol=atol, context=f"seed {trial_seed}")
            except checks.KernelCheckError as failure:
                # without the checker's hints: their patterns are the taxonomy's ids, which
                # naming is the audit's exercise
                details.append(f"{tag}: {failure.detail}")
    return Result(
        case.name,
        not notes,
        tuple(seeds),
        max_abs,
        first_bad,
        "; ".join(notes.values()) if notes else "ok",
        "\n".join(details),
        tuple(notes),
    )


def audit(
    candidate: Callable,
    reference: Callable,
    cases: Sequence[Case],
    *,
    forbid: Iterable[str] = integrity.REFERENCE_OPS,
    review: OffsetReview | None = None,
    seed: int | None = None,
    show: bool = True,
    name: str | None = None,
) -> Report:
    """Run every case against `candidate`, each isolated from the others; print and return the
    Report.

    Each case is called as candidate(*inputs, **case.kwargs) and compared with
    reference(*inputs upcast to float64, **case.kwargs). Every case runs `case.trials` seeds; from
    the second on, the new values are written into the first seed's tensors. While the candidate
    runs, tensors it allocates with torch.empty and friends hold NaN poison, and calls
    to the functions named in `forbid` are recorded and fail the case. `review` (see
    offset_review) is added to the report and counts toward `passed`. `seed` fixes the seeds
    (for reproducing a failure); by default they follow checks.new_seed().
    """
    handin.advise()
    forbid = frozenset(forbid)
    results = []
    lost = None  # the case after which the GPU context was unusable
    for case in cases:
        if lost is not None:
            results.append(Result(case.name, False, (), message=f"not run: {lost}"))
            continue
        try:
            results.append(_run_case(candidate, reference, case, forbid, seed))
        except Exception as exc:  # the harness itself failed on this case: report, go on
            results.append(Result(case.name, False, (), message=f"audit error: {_one_line(exc)}"))
        if results[-1].message.startswith("crashed") and torch.cuda.is_initialized():
            try:
                torch.cuda.synchronize()
            except Exception:  # an illegal memory access ends the process's CUDA context
                lost = f"the CUDA context was lost in case {case.name!r}; restart the kernel"
    catches = {case.name: case.catches for case in cases}
    rules_out = {case.name: case.rules_out for case in cases}
    report = Report(name or _name(candidate), results, review, catches, rules_out)
    if show:
        print(report.table())
    return report


# -- 32-bit offsets --------------------------------------------------------------------------------


def int32_wrap(value: int) -> int:
    """What `value` becomes when computed in 32-bit two's-complement integers."""
    return (int(value) + 2**31) % 2**32 - 2**31


@dataclass(frozen=True)
class OffsetFinding:
    line: int
    code: str
    product: str


@dataclass(frozen=True)
class OffsetReview:
    """Products of a program id and a run-time size computed in int32, and, per shape, the
    largest element offset a kernel must form."""

    kernel: str
    findings: tuple[OffsetFinding, ...]
    shapes: tuple[tuple[tuple[int, ...], int], ...]
    limit: int = INT32_MAX

    @property
    def needs_int64(self) -> bool:
        return any(largest > self.limit for _, largest in self.shapes)

    @property
    def ok(self) -> bool:
        return not (self.findings and self.needs_int64)

    def __str__(self) -> str:
        lines = [f"offset review of {self.kernel}:"]
        for shape, largest in self.shapes:
            fits = "fits in" if largest <= self.limit else "does NOT fit in"
            lines.append(
                f"  shape {shape}: largest element offset {largest:,} {fits} int32 "
                f"(max {self.limit:,}); computed in int32 it would read {int32_wrap(largest):,}"
            )
        if not self.findings:
            lines.append("  no program-id offset is multiplied by a run-time size in int32")
        for f in self.findings:
            lines.append(f"  line {f.line}: {f.code}")
            lines.append(f"    `{f.product}`: a program id times a run-time size, in int32")
        if self.ok:
            verdict = "ok" if not self.findings else "ok at these shapes (would wrap at larger)"
        else:
            verdict = "FAIL: cast the program-id term to tl.int64 before multiplying"
        lines.append(f"  verdict: {verdict}")
        return "\n".join(lines)


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _calls(node, attr: str) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr
        for n in ast.walk(node)
    )


def offset_review(kernel, shapes: Iterable[Sequence[int]] = (), *, limit: int = INT32_MAX):
    """Review `kernel`'s offset arithmetic for int32 overflow, for tensors of `shapes`.

    Triton computes with 32-bit integers unless told otherwise: program ids, and run-time integer
    arguments that fit in 32 bits, are int32. An offset such as `pid_bh * stride_h` is right until
    the product passes 2^31 - 1, then wraps to a negative number. This reads the kernel's source
    and lists each product of a scalar derived from `tl.program_id` (not widened with
    `.to(tl.int64)`) and a run-time argument; vector offsets built from `tl.arange` stay within
    one head and are not listed. It is a review aid, not a proof: offsets formed another way are
    not seen. The review fails when something is listed and a shape's largest offset does not fit.
    """
    source = precision.source(kernel)
    lines = source.splitlines()
    func = next(n for n in syntax.parse(source).body if isinstance(n, ast.FunctionDef))
    params = [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
    constexpr = {
        a.arg
        for a in params
        if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)
    }
    runtime = {a.arg for a in params} - constexpr
    pid: set[str] = set()
    vec: set[str] = set()
    wide: set[str] = set()

    def is_wide(n) -> bool:
        wide_attr = any(
            isinstance(x, ast.Attribute) and x.attr in {"int64", "uint64"} for x in ast.walk(n)
        )
        return wide_attr or bool(_names(n) & wide)

    def is_pid(n) -> bool:
        return _calls(n, "program_id") or bool(_names(n) & pid)

    def is_vec(n) -> bool:
        return _calls(n, "arange") or bool(_names(n) & vec)

    kinds = ast.Assign | ast.AugAssign | ast.AnnAssign
    assigns = [n for n in ast.walk(func) if isinstance(n, kinds)]
    for _ in range(4):  # propagate through chains of assignments, loops included
        for node in assigns:
            if node.value is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            targets = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if is_wide(node.value):
                wide |= targets
            if is_pid(node.value):
                pid |= targets
            if is_vec(node.value):
                vec |= targets
            if _names(node.value) & runtime:
                runtime |= targets

    def scalar_pid(n) -> bool:
        return is_pid(n) and not is_vec(n) and not is_wide(n)

    def sized(n) -> bool:
        return bool(_names(n) & runtime) and not is_wide(n)

    findings: dict[int, OffsetFinding] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            left, right = node.left, node.right
            if (scalar_pid(left) and sized(right)) or (scalar_pid(right) and sized(left)):
                line = precision.first_line(kernel) + node.lineno - 1
                code = lines[node.lineno - 1].strip()
                findings.setdefault(line, OffsetFinding(line, code, ast.unparse(node)))
    shapes = [tuple(int(s) for s in shape) for shape in shapes]
    sizes = tuple((shape, math.prod(shape) - 1) for shape in shapes)
    return OffsetReview(
        func.name, tuple(sorted(findings.values(), key=lambda f: f.line)), sizes, limit
    )


# -- kernels kept as files -------------------------------------------------------------------------


def load_module(path: str | Path, name: str | None = None, **overrides) -> ModuleType:
    """Import the Python file at `path` as a module (so that @triton.jit can read its source),
    then set each of `overrides` (e.g. BLOCK_M=32) on it; every override must already exist."""
    path = Path(path)
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:  # no __pycache__ beside the drafts: course/ must stay as built
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes_bytecode
    for key, value in overrides.items():
        if not hasattr(module, key):
            raise AttributeError(f"{path.name} defines no {key} to override")
        setattr(module, key, value)
    return module
