"""Correctness checks for kernels: random inputs (drawn afresh at grading, from a fixed seed
elsewhere), outputs poisoned with a recognisable NaN before the kernel runs, float64 references,
dtype-aware tolerances, and messages that say where the first mismatch is and what to fix."""

from __future__ import annotations

import functools
import math
import os
import secrets
from collections.abc import Callable, Sequence
from contextlib import nullcontext

import numpy as np
import torch

from grader.runtime import device, handin, launches, precision, recorded, stubs
from grader.runtime import hints as hints_

if os.environ.get("TRITON_INTERPRET") == "1":  # device.setup chose the interpreter, which runs
    from grader.runtime import interpreted  # no libdevice function; every notebook's setup cell

    interpreted.supply()  # imports this module

# Tolerances follow torch.testing.assert_close's defaults for each dtype; the reference is float64.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}

# Quiet NaNs with a payload no arithmetic produces, so "never written" is told from "wrote NaN".
_POISON_BITS = {
    torch.float64: (torch.int64, 0x7FF8_0000_DEAD_BEEF),
    torch.float32: (torch.int32, 0x7FC0_BEEF),
    torch.float16: (torch.int16, 0x7E5A),
    torch.bfloat16: (torch.int16, 0x7FDA),
}
_INT_POISON = -0x5A5A5A5A
MAX_LISTED = 5
TF32_TO_FLOAT32 = 2.0**13  # TF32's unit roundoff (2^-11) over float32's (2^-24)
GUARD = 16384  # poisoned elements on each side of an output: more than any block oversteps
VISIBLE_SEED = 0  # of every draw outside grading: a visible test's verdict is the same every run


class KernelCheckError(hints_.HintedError):
    """A kernel's output is wrong; the message says where and by how much, and, after its first
    line, the likely cause of each pattern in `hints` (grader.runtime.hints)."""


def tolerance(
    dtype: torch.dtype, rtol: float | None = None, atol: float | None = None
) -> tuple[float, float]:
    """(rtol, atol) for comparing an output of `dtype` with a float64 reference; `rtol` and
    `atol`, where given, in place of the dtype's."""
    if dtype in TOLERANCES:
        found = TOLERANCES[dtype]
    elif not dtype.is_floating_point:
        found = (0.0, 0.0)
    else:
        raise ValueError(f"no tolerance known for {dtype}")
    return (found[0] if rtol is None else rtol, found[1] if atol is None else atol)


def new_seed() -> int:
    """The seed of a check's inputs: while nbgrader grades, a fresh one from the operating system,
    so the hidden tests draw anew for every submission; elsewhere VISIBLE_SEED, so a visible test
    fails a wrong kernel on every run, or on none."""
    if os.environ.get(recorded.GRADING_ENV) == recorded.GRADING:
        return secrets.randbits(48)
    return VISIBLE_SEED


def generator(seed: int, where: str | None = None) -> torch.Generator:
    return torch.Generator(device=where or device.current().torch_device).manual_seed(seed)


def randn(shape, *, gen: torch.Generator, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    """Normal random numbers of `dtype`, on the generator's device."""
    values = torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float32) * scale
    return values.to(dtype)


def poisoned(shape, dtype: torch.dtype, where: str | None = None) -> torch.Tensor:
    """A tensor whose every element is the grader's poison value."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    int_dtype, bits = _POISON_BITS.get(dtype, (dtype, _INT_POISON))
    where = where or device.current().torch_device
    return torch.full(shape, bits, dtype=int_dtype, device=where).view(dtype)


def guarded(shape: torch.Size, dtype: torch.dtype, where: str):
    """A poisoned output with poisoned guards before and after it in the same buffer, as large as
    the output (GUARD to 4 Mi elements), so that a tile's missing row mask, which writes whole
    rows past the end, lands in them too. Returns (out, check): check(name, context) raises
    KernelCheckError if anything was written into the guards."""
    numel = math.prod(shape)
    guard = max(GUARD, min(numel, 1 << 22))
    buffer = poisoned(numel + 2 * guard, dtype, where)

    def check(name: str, context: str) -> None:
        __tracebackhide__ = True
        before = int((~poison_mask(buffer[:guard])).sum())
        after = int((~poison_mask(buffer[guard + numel :])).sum())
        if before or after:
            raise KernelCheckError(
                f"your kernel wrote outside `{name}`: {after} elements past its end and "
                f"{before} before its start were overwritten ({context}).",
                [hints_.out_of_bounds(loads=False)],
            )

    return buffer[guard : guard + numel].view(shape), check


def poison_mask(t: torch.Tensor) -> torch.Tensor:
    """True where `t` still holds the poison value, compared bit for bit."""
    int_dtype, bits = _POISON_BITS.get(t.dtype, (t.dtype, _INT_POISON))
    return t.contiguous().view(int_dtype) == bits


def unravel(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    """The index of element `flat` of a contiguous tensor of `shape` (not torch.unravel_index,
    which imports sympy on its first call: a third of a second, in every kernel that reports a
    mismatch)."""
    return tuple(int(i) for i in np.unravel_index(flat, tuple(shape)))


def agreement(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float):
    """(ok, untouched, got, want, error, finite), flat, on the output's own device (a GPU output
    of hundreds of MiB stays there): an element is ok where it is within tolerance, or NaN where
    the reference is NaN, or the same infinity. An element still holding the poison (untouched)
    was never written, even where NaN is expected."""
    untouched = poison_mask(actual).flatten()
    got = actual.detach().to(torch.float64).flatten()
    want = expected.detach().to(device=got.device, dtype=torch.float64).flatten()
    finite = want.isfinite() & got.isfinite()
    error = (got - want).abs()
    within = finite & (error <= atol + rtol * want.abs())
    same_inf = got.isinf() & want.isinf() & (got == want)
    ok = within | (got.isnan() & want.isnan() & ~untouched) | same_inf
    return ok, untouched, got, want, error, finite


def compare(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    name: str = "out",
    context: str = "",
    hint: hints_.Hint | None = None,
) -> None:
    """Raise KernelCheckError unless `actual` matches `expected` within tolerance.

    NaN must appear exactly where the reference has NaN, infinities must match exactly, and the
    message names the first mismatches, the worst one, and whether any element was never written.
    `hint`: the likely cause of a failure, where the caller knows it from evidence the output
    alone does not hold (grader.runtime.hints.unrescaled_merge); by default, `hints.diagnose`'s.
    """
    __tracebackhide__ = True
    where = f" ({context})" if context else ""
    if tuple(actual.shape) != tuple(expected.shape):
        raise KernelCheckError(
            f"`{name}` has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}{where}"
        )
    rtol, atol = tolerance(actual.dtype, rtol, atol)
    ok, untouched, got, want, error, finite = agreement(actual, expected, rtol, atol)
    if untouched.numel() and bool(untouched.all()):
        raise KernelCheckError(stubs.untouched_output(name) + where)
    if bool(ok.all()):
        return

    views = (t.view(actual.shape) for t in (got, want, ok, untouched))
    found = [hint] if hint is not None else hints_.diagnose(*views, actual.dtype, rtol, atol)
    bad = (~ok).nonzero().flatten()
    lines = [f"`{name}` is wrong at {len(bad)} of {got.numel()} elements{where}."]
    if bool(untouched.any()):
        first = int(untouched.nonzero()[0])
        lines.append(
            f"{int(untouched.sum())} elements were never written (they still hold the "
            f"NaN poison), the first at {list(unravel(first, actual.shape))}: does the grid "
            "cover every element, and does the mask let the last block's valid elements through?"
        )
    finite_bad = finite & ~ok
    if bool(finite_bad.any()):
        worst = int(torch.where(finite_bad, error, torch.zeros_like(error)).argmax())
        lines.append(
            f"max abs error {float(error[worst]):.6g} at {list(unravel(worst, actual.shape))} "
            f"(expected {float(want[worst]):.6g}, got {float(got[worst]):.6g}; "
            f"tolerance atol={atol:g} + rtol={rtol:g}*|expected|)."
        )
    listed = ", ".join(
        f"{list(unravel(int(i), actual.shape))}: expected {float(want[i]):.6g}, got "
        + ("poison (never written)" if untouched[i] else f"{float(got[i]):.6g}")
        for i in bad[:MAX_LISTED]
    )
    lines.append(f"first mismatches: {listed}")
    raise KernelCheckError("\n".join(lines), found)


def _floats(args, fn) -> tuple:
    """`args` with `fn` applied to each floating-point tensor."""
    return tuple(
        fn(a) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
    )


def upcast(args) -> tuple:
    return _floats(args, lambda t: t.to(torch.float64))


def _unchanged(before: torch.Tensor, after: torch.Tensor) -> bool:
    """Whether a tensor holds what it held (NaN equal to NaN). Float8 tensors are compared bit
    for bit: torch has no nan_to_num for them."""
    if before.is_floating_point() and before.element_size() == 1:
        return torch.equal(before.view(torch.uint8), after.view(torch.uint8))
    return torch.equal(before.nan_to_num(), after.nan_to_num())


def refill(old, new):
    """`new`'s values in `old`'s memory, when the two are tensors of one shape and dtype."""
    if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor):
        if (old.shape, old.dtype) == (new.shape, new.dtype):
            return old.copy_(new)
    return new


def _describe(a) -> str:
    if not isinstance(a, torch.Tensor):
        return repr(a)
    layout = "" if a.is_contiguous() else f" strides {tuple(a.stride())}"
    return f"{str(a.dtype).removeprefix('torch.')}{list(a.shape)}{layout}"


def expect_count(
    fn: Callable,
    args: Sequence,
    want: float,
    *,
    unit: str,
    within: float = 0.0,
    counted_by: str | None = None,
    wrong: dict[float, str] | None = None,
    what: str | None = None,
) -> None:
    """`fn(*args)`, a count the student wrote (bytes, FLOPs), must be a number within a share
    `within` of `want` (exactly `want` by default); `counted_by` names who counted `want` (a
    profiler); `wrong` maps known wrong counts to their likely cause, said in the message;
    `what` names the call there (by default, the function and its arguments)."""
    __tracebackhide__ = True
    got = call_graded(fn, *args)
    what = what or f"{getattr(fn, '__name__', 'your function')}{tuple(args)}"
    if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
        raise AssertionError(f"{what} must return a number of {unit}, got {got!r}")
    if abs(got - want) <= within * abs(want):
        return
    said = f"{counted_by} counted" if counted_by else "expected"
    message = f"{what} = {got:,.6g} {unit}; {said} {want:,.6g}"
    message += f" ({got / want:.3g}x; within {within:.0%} passes)" if within and want else ""
    cause = next(
        (why for v, why in (wrong or {}).items() if math.isclose(got, v, rel_tol=1e-9)), None
    )
    raise AssertionError(message + (f": likely, {cause}" if cause else ""))


def explained(exc: Exception, who: str) -> Exception:
    """`exc`, raised by the student's `who`, as the checks say it: nbgrader's unfilled stub as
    one plain sentence, an error of Triton's type checks (a dtype an operation refuses, shapes
    that do not broadcast) as a KernelCheckError that names the operation
    (grader.runtime.hints.raised), the course's own error raised inside an interpreted kernel
    (interpreted.NotInInterpreter) as itself, any other as it is."""
    sentence = stubs.explain(exc, who)
    if sentence is not None:
        return stubs.StubNotFilled(sentence)
    innermost = exc
    while innermost.__cause__ is not None:
        innermost = innermost.__cause__
    if innermost is not exc and isinstance(innermost, hints_.HintedError):
        return innermost  # the course's own, raised inside an interpreted kernel
    found = hints_.raised(exc)
    if found is None:
        return exc
    said = str(innermost).strip()
    message = f"{who} raised {type(innermost).__name__}: {said.splitlines()[-1] if said else ''}"
    made = KernelCheckError(message + (f"\n{said}" if "\n" in said else ""), [found])
    made.__cause__ = exc
    return made


def call_graded(fn: Callable, *args, what: str | None = None, **kwargs):
    """Call student code, its failure `explained`; first, say if an answer leans on a cell that
    grading will not run (grader.runtime.handin)."""
    __tracebackhide__ = True
    handin.advise()
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        said = explained(exc, what or f"`{getattr(fn, '__name__', 'your code')}`")
        if said is exc:
            raise
        raise said from said.__cause__


def _run(candidate, args, *, expected, dtype, writes_out, context, kernels=()):
    """The candidate's output for `args` (its guards checked), and the launches it made."""
    __tracebackhide__ = True
    with launches.recording() as seen:
        if not writes_out:
            return call_graded(candidate, *args), seen.launches
        out, check_guards = guarded(expected.shape, dtype, expected.device.type)
        who = launches.who(candidate)
        with launches.kernel_work(kernels, args, out, who) if kernels else nullcontext():
            call_graded(candidate, *args, out=out)
    check_guards("out", context)
    return out, seen.launches


def _passes(actual, expected, rtol, atol, loosen: float = 1.0) -> bool:
    """Whether `actual` matches `expected` within the tolerance times `loosen`."""
    rtol, atol = tolerance(actual.dtype, rtol, atol)
    try:
        compare(actual, expected, rtol=rtol * loosen, atol=atol * loosen)
    except KernelCheckError:
        return False
    return True


def _right_again(again, args, expected, rtol, atol) -> bool:
    """Whether the call `again` makes is right on `args` (a probe for a hint: any failure,
    an exception included, is a no)."""
    try:
        return _passes(again(args)[0], expected, rtol, atol)
    except Exception:
        return False


def _padded_contiguous(t):
    """A contiguous copy of tensor `t`, followed by zeros for reads past its end."""
    if not isinstance(t, torch.Tensor) or t.is_contiguous():
        return t
    buffer = torch.zeros(t.numel() + GUARD, dtype=t.dtype, device=t.device)
    return buffer[: t.numel()].view(t.shape).copy_(t)


def _probed(failure, again, args, reference, rtol, atol) -> KernelCheckError | None:
    """The failure with a hint that another run shows, where its own hint asks for one: a
    factor per row that sorting every row largest first removes (a running sum not rescaled),
    or float16 numbers that are right on float16 inputs (arithmetic in float16, not a float16
    store)."""
    patterns = [h.pattern for h in failure.hints]
    if patterns == ["row-normalisation"]:
        probe = _floats(args, lambda t: t.float().sort(dim=-1, descending=True).values.to(t.dtype))
        hint = hints_.largest_first()
    elif patterns == ["store-dtype"]:
        low = torch.bfloat16 if "bfloat16" in failure.hints[0].evidence else torch.float16
        probe = _floats(args, lambda t: t.to(low).to(t.dtype))
        hint = hints_.computed_in_low_precision(str(low).removeprefix("torch."))
    else:
        return None
    if not _right_again(again, probe, reference(*upcast(probe)), rtol, atol):
        return None
    return KernelCheckError(failure.detail, [hint])


def check(
    candidate: Callable,
    reference: Callable,
    make_inputs: Callable[[torch.Generator], Sequence],
    *,
    trials: int = 2,
    out_dtype: torch.dtype | None = None,
    writes_out: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int | None = None,
    kernels: Sequence[str] = (),
) -> None:
    """Check `candidate` against `reference` on `trials` sets of inputs, seeds `seed`, `seed` + 1,
    ... (`seed` from new_seed() where not given).

    make_inputs(gen) returns the positional arguments. The reference receives them upcast to
    float64 and returns the expected output. With writes_out (the course's convention for kernel
    launchers), the candidate is called as candidate(*args, out=out) with `out` poisoned and
    guarded by poisoned memory on both sides; otherwise its return value is checked. Inputs must
    come back unchanged. From the second trial on, the new values are written into the first
    trial's tensors, so a result cached by input address is caught. With `kernels` (names of
    Triton kernels; needs writes_out), the result must be their work: they were launched, given
    every input tensor, and wrote every element of `out` (`grader.runtime.launches`).

    The verdict is the one a GPU would give: in the interpreter, which multiplies float32 blocks
    in full precision, a call whose kernels use tl.dot in TF32 (their GPU default) on float32
    inputs is checked again with its float32 inputs rounded to TF32, as a GPU's tensor cores
    round them (`grader.runtime.precision`). A failure on strided inputs is tried again on
    contiguous copies, and the message says when that is right; so is a failure whose hint
    another run can confirm or correct (`_probed`).
    """
    __tracebackhide__ = True
    if kernels and not writes_out:
        raise ValueError("kernels= needs writes_out: the output must be known before the call")
    on_gpu = device.current().is_gpu
    first_args = None
    seed = new_seed() if seed is None else seed
    for trial in range(trials):
        trial_seed = seed + trial
        args = tuple(make_inputs(generator(trial_seed)))
        if first_args is None:
            first_args = args
        else:
            args = tuple(refill(old, new) for old, new in zip(first_args, args, strict=True))
        expected = reference(*upcast(args))
        dtype = out_dtype or next(
            (a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()),
            expected.dtype,
        )
        context = f"inputs {', '.join(map(_describe, args))}, seed {trial_seed}"

        saved = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        again = functools.partial(
            _run, candidate, expected=expected, dtype=dtype, writes_out=writes_out, context=context
        )
        actual, launched = again(args, kernels=kernels)
        if not writes_out:
            if not isinstance(actual, torch.Tensor):
                raise KernelCheckError(
                    f"`{getattr(candidate, '__name__', 'candidate')}` returned "
                    f"{type(actual).__name__}, expected a tensor ({context})"
                )
            if actual.dtype != dtype:
                raise KernelCheckError(
                    f"`out` has dtype {actual.dtype}, expected {dtype} ({context})"
                )
        for position, (before, after) in enumerate(zip(saved, args, strict=True)):
            if isinstance(before, torch.Tensor) and not _unchanged(before, after):
                raise KernelCheckError(
                    f"input {position} was modified by the call: kernels must not write to their "
                    f"inputs ({context})"
                )
        tf32 = sorted({d.function for launch in launched for d in launch.tf32_dots})

        try:
            compare(actual, expected, rtol=rtol, atol=atol, context=context)
        except KernelCheckError as failure:
            __tracebackhide__ = True
            strided = any(isinstance(a, torch.Tensor) and not a.is_contiguous() for a in args)
            contiguous = tuple(_padded_contiguous(a) for a in args) if strided else ()
            if strided and _right_again(again, contiguous, expected, rtol, atol):
                raise KernelCheckError(failure.detail, [hints_.strided_inputs()]) from None
            if on_gpu and tf32 and _passes(actual, expected, rtol, atol, TF32_TO_FLOAT32):
                raise KernelCheckError(failure.detail, [hints_.tf32(tf32)]) from None
            probed = _probed(failure, again, args, reference, rtol, atol)
            if probed is not None:
                raise probed from None
            raise
        float32 = any(isinstance(a, torch.Tensor) and a.dtype == torch.float32 for a in args)
        if tf32 and not on_gpu and float32:  # with no float32 input, the same call again
            rounded = again(
                _floats(args, lambda t: precision.tf32_copy(t) if t.dtype == torch.float32 else t)
            )[0]
            try:
                compare(rounded, expected, rtol=rtol, atol=atol, context=context)
            except KernelCheckError as failure:
                raise KernelCheckError(
                    "on a GPU, "
                    + failure.detail
                    + "\n(The interpreter multiplies float32 in full precision, so the check ran "
                    "your call again with its float32 inputs rounded to TF32, as tl.dot rounds "
                    "them on a GPU by default.)",
                    [hints_.tf32(tf32)],
                ) from None
