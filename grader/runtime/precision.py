"""How `tl.dot` multiplies float32 blocks on a GPU, read from a kernel's source, and TF32's
rounding, so that the interpreter (which multiplies in full float32) can judge a kernel's float32
result as a GPU would.

On a GPU, `tl.dot` on float32 blocks runs in TF32 (inputs rounded to 10 mantissa bits) unless the
call says `input_precision="ieee"` (or "tf32x3", or the deprecated `allow_tf32=False`), or
TRITON_F32_DEFAULT changes the default. `dots` resolves each call's precision (in the kernel and
the `@triton.jit` functions it calls) from a string, a parameter of the launch or a global of the
kernel's module; what it cannot resolve (an autotuner's config, an expression) counts as
unknown, never as TF32. A call in a branch that the launch's constexprs rule out still counts.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from grader.runtime import syntax

_UNKNOWN = object()
_DOT_ARGUMENTS = ("input", "other", "acc", "input_precision", "allow_tf32")  # tl.dot's first


@dataclass(frozen=True)
class Dot:
    """One `tl.dot` call: the kernel (or jit function) it is in, its line in that function's
    file, its source, and the input precision it gets on a GPU (None where not known)."""

    function: str
    line: int
    code: str
    precision: str | None


def python_function(kernel):
    """The Python function under a Triton kernel (through autotuners and heuristics)."""
    fn = kernel
    for _ in range(8):
        if inspect.isfunction(fn):
            return fn
        fn = getattr(fn, "fn", None)
    return None


def source(obj) -> str:
    """The source text of a function or Triton kernel, decorators included; for one of a
    student's served to the grader's judge, the source its answer cell gave it."""
    given = getattr(obj, "source", None)
    if isinstance(given, str) and not inspect.isfunction(obj):
        return given
    fn = python_function(obj)
    if fn is None:
        raise TypeError(f"cannot find the source of {obj!r}: pass functions or Triton kernels")
    return textwrap.dedent(inspect.getsource(fn))


def first_line(obj) -> int:
    """The line where `source(obj)` begins, in its file or notebook cell."""
    fn = python_function(obj)
    if fn is not None:
        return fn.__code__.co_firstlineno
    given = getattr(obj, "first_line", 1)
    return given if isinstance(given, int) else 1


def _is_dot(func: ast.expr, globals_: Mapping) -> bool:
    import triton.language as tl

    if isinstance(func, ast.Attribute) and func.attr == "dot":
        owner = func.value
        if isinstance(owner, ast.Name):
            return globals_.get(owner.id) in (tl, tl.core)
        return ast.unparse(owner) in ("triton.language", "tl")
    return isinstance(func, ast.Name) and globals_.get(func.id) is tl.dot


@functools.lru_cache(maxsize=256)
def _parse(fn) -> tuple[tuple, tuple[str, ...]] | None:
    """The `tl.dot` calls of `fn` (line, code, and the input_precision and allow_tf32 arguments
    where given), and the names of the functions it calls by name."""
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = syntax.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    func = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if func is None:
        return None
    dots, callees = [], []
    for node in ast.walk(func):
        if not isinstance(node, ast.Call):
            continue
        if _is_dot(node.func, fn.__globals__):
            given = dict(zip(_DOT_ARGUMENTS, node.args, strict=False))
            given.update({k.arg: k.value for k in node.keywords})
            precision, allow = given.get("input_precision"), given.get("allow_tf32")
            dots.append((first + node.lineno - 1, ast.unparse(node), precision, allow))
        elif isinstance(node.func, ast.Name):
            callees.append(node.func.id)
    return tuple(dots), tuple(dict.fromkeys(callees))


def _value(expr: ast.expr, known: Mapping[str, object], globals_: Mapping):
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.Name):
        for scope in (known, globals_):
            if expr.id in scope:
                return getattr(scope[expr.id], "value", scope[expr.id])  # a tl.constexpr
    return _UNKNOWN


def _precision(given: ast.expr | None, allow: ast.expr | None, known, globals_) -> str | None:
    """The input precision of a `tl.dot` call given `input_precision` and `allow_tf32`."""
    if given is not None:
        value = _value(given, known, globals_)
        if value is not None:
            return value.lower() if isinstance(value, str) else None
    default = os.environ.get("TRITON_F32_DEFAULT") or "tf32"
    allow = None if allow is None else _value(allow, known, globals_)
    if allow is None or allow is True:
        return default
    return "ieee" if allow is False else None


def dots(kernel, args: Sequence, kwargs: Mapping) -> list[Dot]:
    """Every `tl.dot` call of `kernel` and of the jit functions it calls (by name), with the
    input precision it gets on a GPU when launched as kernel[grid](*args, **kwargs)."""
    found: list[Dot] = []
    seen: set = set()

    def visit(fn, known: Mapping[str, object]) -> None:
        if fn in seen:
            return
        seen.add(fn)
        parsed = _parse(fn)
        if parsed is None:
            return
        calls, callees = parsed
        params = inspect.signature(fn).parameters
        values = {n: p.default for n, p in params.items() if p.default is not p.empty}
        values.update(known)
        for line, code, given, allow in calls:
            resolved = _precision(given, allow, values, fn.__globals__)
            found.append(Dot(fn.__name__, line, code, resolved))
        for name in callees:
            callee = python_function(fn.__globals__.get(name))
            if callee is not None and callee is not fn and hasattr(fn.__globals__[name], "fn"):
                visit(callee, {})  # a jit helper: its parameters are not resolved

    fn = python_function(kernel)
    if fn is not None:
        known = dict(zip(inspect.signature(fn).parameters, args, strict=False))
        known.update(kwargs)  # beside the kernel's own arguments, launch options
        visit(fn, known)
    return found


def tf32_dots(kernel, args: Sequence, kwargs: Mapping) -> list[Dot]:
    """The `tl.dot` calls that multiply in TF32 on a GPU when this launch has float32 tensors
    (empty when it has none: then no block is float32, unless the kernel casts one). Never
    raises: it runs inside every recorded launch."""
    values = [*args, *kwargs.values()]
    if not any(isinstance(a, torch.Tensor) and a.dtype == torch.float32 for a in values):
        return []
    try:
        return [d for d in dots(kernel, args, kwargs) if d.precision == "tf32"]
    except Exception:  # called on every recorded launch: a source it cannot read is not TF32
        return []


def round_to_tf32(t: torch.Tensor) -> torch.Tensor:
    """`t` (float32) rounded to TF32's 10 mantissa bits, to nearest with ties to even; inf and
    NaN kept. A GPU's tensor cores round (or truncate, a larger error) the same way."""
    bits = t.contiguous().view(torch.int32)
    special = (bits & 0x7F800000) == 0x7F800000
    rounded = (bits + 0x0FFF + ((bits >> 13) & 1)) & ~0x1FFF
    return torch.where(special, bits, rounded).view(torch.float32).view(t.shape)


def tf32_copy(t: torch.Tensor) -> torch.Tensor:
    """A float32 view like `t` (same shape, strides and offset) into a rounded copy of its whole
    storage: reads past `t`'s edges find what they found before, rounded too."""
    whole = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage())
    return round_to_tf32(whole).as_strided(t.shape, t.stride(), t.storage_offset())
