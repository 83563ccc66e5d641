"""Where a wrong output is wrong, and what that usually means: a small diagnosis of a mismatch
between a kernel's output and its float64 reference, for the messages of `grader.runtime.checks`.

A `Hint` names a pattern of PATTERNS (a stable id, the one the tests look for), the evidence seen
and the likely cause. `diagnose` reads the output alone; `checks.check`, which can call the
kernel again, adds the patterns that need another run; `raised` reads the errors of Triton's type
checks, from the interpreter or the compiler.
"""

from __future__ import annotations

import itertools
import linecache
import math
import re
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

LOG2E = math.log2(math.e)
FLOAT16_MAX = 65504.0

# Every pattern a hint may name, with what shows it.
PATTERNS = {
    "missing-mask": "stores outside the output, or wrong only in the last part of an axis",
    "coverage": "never written from some index of an axis to its end",
    "causal-off-by-one": "NaN in the first row of every head, nowhere else",
    "non-finite": "inf or NaN where the reference is finite",
    "expected-nan": "numbers where the reference is NaN, and no other error",
    "wrong-scale": "the whole output off by one constant factor",
    "row-normalisation": "each row off by a constant factor of its own",
    "misplaced": "the right values in the wrong places",
    "low-precision": "float16 numbers in a float32 output, or errors of a few float16 units",
    "store-dtype": "the right result rounded once to float16, in a float32 output",
    "rescale": "a running sum (or a merge of two) not rescaled when its maximum grows",
    "assumes-contiguous": "wrong on strided inputs, right on contiguous copies of them",
    "tf32": "tl.dot on float32 blocks in TF32, off by about TF32's rounding",
    "loop-carried": "the GPU compiler refuses a variable that a loop reassigns with another type",
    "gpu-compile": "the GPU compiler refuses the kernel, which the interpreter ran",
    "operand-dtype": "an operation of the kernel refuses the dtype of its operand",
    "shape": "the operands of an operation of the kernel have shapes that do not broadcast",
    "wrong-formula": "the output is what a known wrong formula gives, which the hint names",
}


@dataclass(frozen=True)
class Hint:
    """A pattern in a failure: its id, what in the data shows it, and the likely cause."""

    pattern: str
    evidence: str
    cause: str

    def __post_init__(self):
        if self.pattern not in PATTERNS:
            raise ValueError(f"unknown pattern {self.pattern!r}: add it to PATTERNS")

    def __str__(self) -> str:
        return f"Likely cause [{self.pattern}]: {self.evidence}; {self.cause}"


class HintedError(AssertionError):
    """A failed check whose message carries, after its first line, the likely cause of each
    pattern in `hints`; `detail` is the message without them."""

    def __init__(self, message: str, hints: Sequence[Hint] = ()):
        first, _, rest = message.partition("\n")
        causes = "".join(f"\n{h}" for h in hints)
        super().__init__(first + causes + ("\n" + rest if rest else ""))
        self.detail = message
        self.hints = tuple(hints)


def out_of_bounds(loads: bool) -> Hint:
    """A load or store outside a tensor: seen in the interpreter by runtime.bounds, and a store
    into the poisoned guards around an output by runtime.checks."""
    return Hint(
        "missing-mask",
        f"the kernel {'read' if loads else 'wrote'} outside a tensor it was given",
        "a lane past the tensor's end that no mask switches off still reads (or writes) memory: "
        "mask the load as well as the store with the tensor's bounds, `offsets < n`",
    )


def strided_inputs() -> Hint:
    return Hint(
        "assumes-contiguous",
        "the same call is right on contiguous copies of the inputs",
        "the kernel assumes contiguous rows: address every tensor with its own strides "
        "(`x.stride(0)` passed to the kernel), not with its width",
    )


def tf32(kernels: Sequence[str]) -> Hint:
    names = ", ".join(f"`{k}`" for k in kernels)
    return Hint(
        "tf32",
        f"{names} calls tl.dot on float32 blocks without input_precision='ieee', and the result "
        "is off by about TF32's rounding",
        "on a GPU, tl.dot rounds float32 inputs to TF32 (10 mantissa bits) unless told "
        'otherwise: pass input_precision="ieee" (or the precision the launcher hands the kernel)',
    )


def loop_carried(name: str, before: str | None = None, after: str | None = None) -> Hint:
    """A variable that a loop reassigns changes its type (dtype or shape), or is a constexpr."""
    if before is None:
        evidence = f"the loop reassigns `{name}`, a compile-time constant"
    else:
        evidence = f"`{name}` is {before} before the loop and {after} after an iteration"
    return Hint(
        "loop-carried",
        evidence,
        "a variable that a loop reassigns must keep its type and shape the same on every "
        "iteration: give it its final dtype and shape before the loop (a float32 sum starts as "
        "`tl.zeros(..., tl.float32)`), or give the value inside the loop a name of its own",
    )


def known_mistake(got: torch.Tensor, right: torch.Tensor, mistakes: Sequence) -> Hint | None:
    """The hint naming the first of `mistakes`, each (what it gives, its pattern, its output,
    the likely cause), whose output `got` equals to 1% of that output's largest value (its sums
    rounded as a kernel rounds them), and is closer to than to the `right` output; else None."""
    got = got.double()
    off_right = float((got - right).abs().max())
    for said, pattern, wrong, cause in mistakes:
        off = float((got - wrong).abs().max())
        near = off <= 0.01 * float(wrong.abs().max())
        if bool(wrong.isfinite().all()) and near and off < off_right:
            return Hint(pattern, f"the output equals {said}", cause)
    return None


def gpu_compile(line: int | None) -> Hint:
    """Triton's compiler refuses the kernel for another reason."""
    where = f" at line {line} of the kernel (its `def` is line 1)" if line else ""
    return Hint(
        "gpu-compile",
        f"Triton's compiler stopped{where}",
        "the interpreter runs a kernel as Python and accepts code that the GPU's compiler "
        "refuses: change what the compiler's message points at (below), so that shapes, dtypes "
        "and constexpr values are fixed when the kernel compiles",
    )


def rescale(evidence: str) -> Hint:
    """A sum of exponentials relative to a maximum, not rescaled when the maximum changes."""
    return Hint(
        "rescale",
        evidence,
        "a sum of exponentials is relative to its maximum m: when the maximum grows to m', "
        "multiply the sum kept so far by e^(m - m') before adding the new terms (and, merging two "
        "states, each side's sum by e^(m_i - m), m the larger maximum)",
    )


def largest_first() -> Hint:
    """A row-wise failure that goes away when every row is sorted largest first."""
    return rescale(
        "the same call is right when every row of the input is sorted largest first (so that "
        "its maximum never grows along the row), and wrong otherwise"
    )


def unrescaled_merge(
    d: torch.Tensor, m: torch.Tensor, parts: Sequence[tuple[torch.Tensor, torch.Tensor]]
) -> Hint | None:
    """The rescale hint when a merge's sum `d` (for the maximum `m`) adds the sums of some of
    `parts`, (m_i, d_i) each, without their factor e^(m_i - m), and that makes it wrong."""
    d, m = d.detach().double().cpu(), m.detach().double().cpu()
    safe = torch.where(m == -math.inf, torch.zeros_like(m), m)
    terms = []
    for m_i, d_i in parts:
        d_i = d_i.detach().double().cpu()
        terms.append((d_i, d_i * torch.exp(m_i.detach().double().cpu() - safe)))
    right = sum(scaled for _, scaled in terms)
    for plain in itertools.product((True, False), repeat=len(terms)):
        if not any(plain):
            continue
        formed = sum(raw if p else scaled for p, (raw, scaled) in zip(plain, terms, strict=True))
        close = torch.isclose(d, formed, rtol=1e-4, atol=1e-30, equal_nan=True)
        if bool(close.all()) and not bool(torch.isclose(formed, right, rtol=1e-4).all()):
            sides = [f"d{i}" if p else f"d{i}·e^(m{i} - m)" for i, p in enumerate(plain, start=1)]
            lacking = [f"d{i}" for i, p in enumerate(plain, start=1) if p]
            return rescale(
                f"`d` is {' + '.join(sides)}: {' and '.join(lacking)} "
                f"{'lacks its' if len(lacking) == 1 else 'lack their'} factor e^(m_i - m)"
            )
    return None


# Triton's names of scalar types, as a reader knows them.
_TYPE_NAMES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}
_DTYPE_ERROR = re.compile(r"Expected dtype \[([^\]]*)\] but got (\w+)")
_SHAPE_ERROR = re.compile(
    r"(Cannot make_shape_compatible: [^\n]*|Cannot broadcast[^\n]*|incompatible shapes?[^\n]*)"
)
_TOO_LARGE = re.compile(r"numel \((\d+)\) exceeds triton maximum tensor numel \((\d+)\)")
# Where Triton's compiler points: "at LINE:COLUMN:", the kernel's lines, then a caret line.
_POINTED = re.compile(r"^at (\d+):(\d+):\n((?:.*\n)*?)\s*\^", re.MULTILINE)
_CALL = re.compile(r"[A-Za-z_][\w.]*(?=\()")


def _type_name(name: str) -> str:
    return _TYPE_NAMES.get(name.strip(" '\""), name.strip(" '\""))


def operation_error(message: str, code: str | None, column: int | None) -> Hint | None:
    """What an error of Triton's type checks means, for the kernel line `code` at which it
    arose (`column`: where in the line the failing operation starts): a dtype an operation
    refuses, or shapes that do not broadcast; None for another error."""
    code = re.sub(r"\s+#[^'\"]*$", "", code.rstrip()) if code else None  # without a comment
    call = _CALL.match(code, column) if code and column is not None else None
    where = f" in `{code.strip()}`" if code else ""
    dtype = _DTYPE_ERROR.search(message)
    if dtype is not None:
        allowed = " or ".join(_type_name(t) for t in dtype.group(1).split(","))
        operation = f"`{call.group(0)}`" if call else "an operation"
        return Hint(
            "operand-dtype",
            f"{operation} takes {allowed} and was given {_type_name(dtype.group(2))}{where}",
            "Triton's math functions (`tl.exp`, `tl.log`, `tl.sqrt`, `tl.sigmoid`, ...) take "
            "float32 or float64 only: upcast the operand with `.to(tl.float32)` (best right "
            "after its load), and convert back to the output's dtype at the store",
        )
    shape = _SHAPE_ERROR.search(message)
    large = _TOO_LARGE.search(message)
    if shape is not None:
        evidence = f"have shapes that do not broadcast ({shape.group(1).rstrip('.')})"
    elif large is not None:
        evidence = (
            f"broadcast to a block of {large.group(1)} elements, more than Triton's "
            f"{large.group(2)}"
        )
    else:
        return None
    return Hint(
        "shape",
        f"the operands{where or ' of an operation'} {evidence}",
        "check the shapes of the operands: row indices as a column are `offs_m[:, None]` "
        "(BLOCK_M, 1), column indices as a row `offs_n[None, :]` (1, BLOCK_N), and a column "
        "(n, 1) with a row (1, n) makes an (n, n) block; two shapes broadcast where "
        "each dimension is equal or 1 in one of them, and a mask or a stored value must "
        "broadcast to the shape of the pointers",
    )


def compile_error(message: str) -> Hint | None:
    """operation_error for a message of Triton's compiler, which points at the kernel's line."""
    pointed = _POINTED.search(message)
    if pointed is None:
        return operation_error(message, None, None)
    lines = pointed.group(3).rstrip("\n").split("\n")
    return operation_error(message, lines[-1], int(pointed.group(2)))


def _outside_triton(exc: BaseException):
    """The innermost frame of `exc`'s traceback that is not Triton's or torch's own."""
    import triton

    skip = (str(Path(triton.__file__).parent), str(Path(torch.__file__).parent))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(skip)]
    return frames[-1] if frames else None


def raised(exc: BaseException) -> Hint | None:
    """operation_error for an exception a kernel raised: the interpreter's (it wraps the error
    of Triton's type check, raised at the kernel's line) or, on a GPU, the compiler's."""
    if type(exc).__name__ == "CompilationError":
        return compile_error(str(exc))
    if type(exc).__name__ != "InterpreterError":
        return None
    chain = [exc]
    while chain[-1].__cause__ is not None and len(chain) < 8:
        chain.append(chain[-1].__cause__)
    frame = next((f for f in map(_outside_triton, reversed(chain)) if f is not None), None)
    code, column = None, None
    if frame is not None:
        code = linecache.getline(frame.filename, frame.lineno) or frame.line
        column = getattr(frame, "colno", None)
    return operation_error(str(chain[-1]), code, column)


def _axis_name(axis: int, ndim: int) -> str:
    if ndim == 1:
        return "elements"
    if axis == ndim - 1:
        return "columns"
    if axis == ndim - 2:
        return "rows"
    return f"indices of dimension {axis}"


def _tile_start(index: int) -> str:
    """', a multiple of 64: where a tile would start' for an index that is a multiple of a
    power of two from 16 on (the largest one up to 1024), else ''."""
    tile = next((t for t in (1024, 512, 256, 128, 64, 32, 16) if index % t == 0), None)
    return f" ({index} is a multiple of {tile}: where a tile would start)" if tile else ""


def _suffix(mask: torch.Tensor, axis: int) -> int | None:
    """The first index > 0 along `axis` at which `mask` holds somewhere, if any."""
    others = [d for d in range(mask.ndim) if d != axis]
    hit = mask.any(dim=others) if others else mask
    if not bool(hit.any()):
        return None
    return int(hit.nonzero()[0]) or None


# Wrong elements in the last part of an axis point at a mask only after this many clean indices:
# errors that fall on rows at random land there by chance on a short axis. A softmax that never
# rescales its running sum is wrong in about 3 of 4 rows; of 4 rows, in the last one or two alone
# 1 time in 17, and never first after 8 clean rows but 1 time in 65,000.
CLEAN_BEFORE_TAIL = 8


def _tail(bad: torch.Tensor, unwritten: torch.Tensor) -> Hint | None:
    """Along one axis, the elements never written are all those from an index > 0 on; or
    every wrong element lies in the last part (at most half) of the axis, after at least
    CLEAN_BEFORE_TAIL clean indices."""
    for axis in reversed(range(bad.ndim)):
        size = bad.shape[axis]
        first = _suffix(unwritten, axis)
        if first is not None and bool(unwritten.narrow(axis, first, size - first).all()):
            return Hint(
                "coverage",
                f"{_axis_name(axis, bad.ndim)} {first} to {size - 1} of {size} were never written"
                + _tile_start(first),
                "the launch does not reach the end: the grid needs cdiv(n, BLOCK) programs (or "
                "each program must loop to the end), each program's offsets must start at "
                "pid * BLOCK, and the mask must let the last block's valid elements through",
            )
    for axis in reversed(range(bad.ndim)):
        size = bad.shape[axis]
        first = _suffix(bad, axis)
        if first is not None and 2 * first >= size and first >= CLEAN_BEFORE_TAIL:
            return Hint(
                "missing-mask",
                f"only {_axis_name(axis, bad.ndim)} {first} to {size - 1} of {size} are wrong"
                + _tile_start(first),
                "the last, partial tile goes wrong: a load or store past the end lacks its mask, "
                "or the padding (`other=`) is not neutral for the operation (0 for a sum, -inf "
                "for a max or a softmax)",
            )
    return None


def _first_row_nan(got: torch.Tensor, want: torch.Tensor, bad: torch.Tensor) -> Hint | None:
    """NaN in the first row of each matrix (each head), where the reference is finite."""
    if got.ndim < 2 or got.shape[-2] < 2:
        return None
    nan_first = (got[..., 0, :].isnan() & want[..., 0, :].isfinite()).all()
    if not bool(nan_first) or bool(got[..., 1:, :].isnan().any()):
        return None
    return Hint(
        "causal-off-by-one",
        "row 0 of every head is NaN and no other row is"
        + (", and the other rows are wrong too" if bool(bad[..., 1:, :].any()) else ""),
        "query 0 sees no key at all: a causal mask must let query i see keys j <= i "
        "(`rows >= cols`, the diagonal included)",
    )


def _non_finite(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> Hint | None:
    """inf or NaN where the reference is finite."""
    wrong = ~got.isfinite() & want.isfinite()
    if not bool(wrong.any()):
        return None
    largest = float(want[want.isfinite()].abs().max())
    evidence = f"{int(wrong.sum())} elements are inf or NaN where the reference is finite"
    if dtype == torch.float16 and largest < FLOAT16_MAX:
        evidence += f" (largest |expected| {largest:.6g}, within float16's 65504)"
    return Hint(
        "non-finite",
        evidence,
        "an intermediate overflowed or became NaN: exp of a large number (subtract the row's "
        "maximum first), -inf - (-inf) in a fully masked row or lane (guard the maximum), or a "
        "float16 sum past 65504 (accumulate in float32)",
    )


def _expected_nan(want: torch.Tensor, bad: torch.Tensor) -> Hint | None:
    """Every wrong element is one where the reference is NaN."""
    if not bool(want[bad].isnan().all()):
        return None
    return Hint(
        "expected-nan",
        "the reference is NaN at every wrong element, and the kernel wrote numbers there",
        "compute the plain formula without special cases: 0/0 is NaN (e.g. the softmax of a "
        "row whose every entry is -inf), and the reference keeps it",
    )


def _scale(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> Hint | None:
    """A factor f other than 1 and 0 (an output of zeros) with got = f * want everywhere, within
    atol + spread * |f * want|."""
    if got.numel() < 2:
        return None
    big = want.abs() > 1e-3 * float(want.abs().max())
    ratio = got[big] / want[big]
    if ratio.numel() < 2 or not bool(ratio.isfinite().all()):
        return None
    factor, spread = float(ratio.median()), max(10 * rtol, 1e-4)
    scaled = factor * want
    fits = bool(((got - scaled).abs() <= atol + spread * scaled.abs()).all())
    if not fits or factor == 0 or abs(factor - 1) <= spread:
        return None
    evidence = f"every output is {factor:.6g} times the expected value"
    for known, name in ((LOG2E, "log2(e)"), (1 / LOG2E, "1/log2(e) = ln(2)")):
        if abs(factor - known) <= spread * known:
            return Hint(
                "wrong-scale",
                f"{evidence}, which is {name}",
                "exp and exp2 are mixed up: exp(x) = exp2(x * log2(e)), so a kernel using exp2 "
                "must multiply its argument (or its scale) by log2(e) = 1.4427",
            )
    return Hint(
        "wrong-scale",
        evidence,
        "a scale factor is missing, applied twice, or inverted (e.g. `* scale` forgotten, or "
        "`/ scale` for `* scale`)",
    )


def _row_factor(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> Hint | None:
    """Each row is the expected row times a factor of its own, not the same for all rows (rows
    whose reference is not finite, or zero, left out)."""
    if got.ndim < 2 or got.shape[-1] < 2:
        return None
    g = got.reshape(-1, got.shape[-1])
    w = want.reshape(-1, want.shape[-1])
    largest = w.abs().amax(dim=1)
    usable = w.isfinite().all(dim=1) & (largest > 0)
    g, w, largest = g[usable], w[usable], largest[usable]
    big = w.abs() > 1e-3 * largest[:, None]
    if g.shape[0] < 2 or bool((big.sum(dim=1) < 2).any()):
        return None
    ratio = torch.where(big, g / torch.where(big, w, 1.0), float("nan"))
    factor = ratio.nanmedian(dim=1).values[:, None]
    spread = max(10 * rtol, 1e-4)
    scaled = factor * w
    if not bool(((g - scaled).abs() <= atol + spread * scaled.abs()).all()):
        return None
    factors = factor.flatten().tolist()
    off = any(abs(f - 1) > spread for f in factors)
    if not off or len(factors) < 2 or max(factors) - min(factors) <= spread * max(factors):
        return None  # no row off, or one factor for all rows (a scale, or an output of zeros)
    return Hint(
        "row-normalisation",
        f"each wrong row is its expected row times a factor of its own ({min(factors):.4g} to "
        f"{max(factors):.4g})",
        "the row's normaliser (its sum or maximum) is wrong: reduce along the row (axis=1), and "
        "keep masked lanes out of it (load them as -inf, so that exp gives 0)",
    )


def _misplaced(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> Hint | None:
    """The right values, in other places."""
    if got.numel() < 2 or not bool(got.isfinite().all() and want.isfinite().all()):
        return None
    g, w = got.flatten().sort().values, want.flatten().sort().values
    if not bool(((g - w).abs() <= atol + rtol * w.abs()).all()):
        return None
    return Hint(
        "misplaced",
        "the output holds the right values, but in the wrong places",
        "the offsets that place a tile are wrong: rows and columns swapped, the program id "
        "mapped to the wrong tile, or the output addressed with another tensor's strides",
    )


def _low_precision(
    got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, rtol: float, atol: float
) -> Hint | None:
    """A float32 (or float64) output whose values are float16 numbers, or whose errors are about
    float16's rounding; a float16 (or bfloat16) output off by no more than a few units of the
    last place of its largest value (as a long sum kept in float16 is)."""
    if got.numel() == 0:
        return None
    error = (got - want).abs()
    if dtype in (torch.float16, torch.bfloat16):
        largest = float(want.abs().max())
        if float(error.max()) > 8 * rtol * largest + atol:
            return None
        return Hint(
            "low-precision",
            f"the errors are a few units of {str(dtype)[6:]}'s last place at the output's "
            f"largest magnitude ({largest:.3g})",
            "an accumulator or intermediate kept in the output's dtype loses digits over a long "
            "sum: accumulate in float32 and round once, at the store",
        )
    for low, name in ((torch.float16, "float16"), (torch.bfloat16, "bfloat16")):
        exact = got.to(low).to(got.dtype) == got
        if bool(exact.all()) and not bool((want.to(low).to(want.dtype) == want).all()):
            if _rounded_once(got, want, low):
                return rounded_at_the_store(name)
            return _computes_in(name, f"every value the kernel wrote is a {name} number")
    relative = float((error / (want.abs() + atol)).max())
    if relative > 2e-3:
        return None
    return Hint(
        "low-precision",
        f"the errors are small (at most {relative:.2g} relative), like float16 or TF32 rounding",
        "part of the computation runs in a lower precision than the output: float16 "
        "arithmetic, a float16 accumulator, or tl.dot on float32 blocks in TF32",
    )


# The share of elements that must equal the right result rounded to float16 for a float16 output
# to count as rounded once, at the store: a float32 sum rounded at the end crosses a float16
# rounding boundary about once in 1000 elements, float16 arithmetic (inputs rounded, then added)
# in about one element of three.
ROUNDED_ONCE = 0.99


def _rounded_once(got: torch.Tensor, want: torch.Tensor, low: torch.dtype) -> bool:
    """Whether `got` is `want` rounded to `low` once: equal to it at nearly every element, and
    nowhere further than one unit of `low`'s last place."""
    rounded = want.to(low).to(want.dtype)
    if float((got == rounded).double().mean()) < ROUNDED_ONCE:
        return False
    unit = torch.finfo(low).eps * want.abs() + torch.finfo(low).smallest_normal
    return bool(((got - want).abs() <= unit).all())


def rounded_at_the_store(name: str) -> Hint:
    """A float32 result converted to float16 before it is stored into a float32 output."""
    return Hint(
        "store-dtype",
        f"every value the kernel wrote is the right result rounded once to {name}",
        f"the arithmetic is right, but the value is converted to {name} before the store into "
        "a float32 output (as Triton's matmul tutorial does with `accumulator.to(tl.float16)`): "
        "store in the output's dtype, `acc.to(c_ptr.dtype.element_ty)` for an output `c_ptr`",
    )


def _computes_in(name: str, evidence: str) -> Hint:
    return Hint(
        "low-precision",
        evidence,
        f"the kernel computes in {name}: keep the arithmetic (and any accumulator) in float32, "
        "converting only loads and the final store",
    )


def computed_in_low_precision(name: str) -> Hint:
    """The kernel converts its inputs (or its arithmetic) to `name`, a float16 type."""
    return _computes_in(
        name,
        f"every value the kernel wrote is a {name} number, and it is right when the inputs are "
        f"{name} numbers",
    )


def diagnose(
    got: torch.Tensor,
    want: torch.Tensor,
    ok: torch.Tensor,
    unwritten: torch.Tensor,
    dtype: torch.dtype,
    rtol: float,
    atol: float,
) -> list[Hint]:
    """The patterns that fit a failed comparison, most telling first (an empty list when none
    does). `got` and `want` are the output and the reference in float64, `ok` the per-element
    verdict, `unwritten` where the output still holds the poison, `dtype` the output's dtype;
    all of the output's shape."""
    if got.numel() == 0:
        return []
    bad = ~ok
    if not bool(unwritten.any()):  # where they lie says nothing then
        found = _expected_nan(want, bad)
        if found is not None:
            return [found]
    tail = _tail(bad, unwritten)
    if tail is not None:
        return [tail]
    if bool(unwritten.any()):
        return []
    for found in (_first_row_nan(got, want, bad), _non_finite(got, want, dtype)):
        if found is not None:
            return [found]
    finite = want.isfinite()
    if not bool((bad & finite).any()):
        return []
    for found in (
        _scale(got[finite], want[finite], rtol, atol),
        _row_factor(got, want, rtol, atol),
        _misplaced(got, want, rtol, atol),
        _low_precision(got[finite], want[finite], dtype, rtol, atol),
    ):
        if found is not None:
            return [found]
    return []
