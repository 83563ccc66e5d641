"""How `tl.dot` multiplies float32 blocks on a GPU, read from a kernel's source, and TF32's
rounding, so that the interpreter (which multiplies in full float32 whatever the kernel asks)
can judge a kernel's float32 result as a GPU would.

On a GPU, `tl.dot` on float32 blocks runs on the tensor cores in TF32 (inputs rounded to 10
mantissa bits) unless the call says `input_precision="ieee"` (or "tf32x3", or the deprecated
`allow_tf32=False`), or the TRITON_F32_DEFAULT environment variable changes the default. `dots`
finds each `tl.dot` call in a kernel (and in the `@triton.jit` functions it calls) with Python's
ast and resolves its precision with the values of the launch: a string, a parameter of the kernel
(a constexpr the launcher passes), or a global of the kernel's module. What it cannot resolve
(a value chosen by an autotuner's config, an expression) counts as unknown, never as TF32. A
call in a branch that the launch's constexprs rule out still counts.
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

# tl.dot(input, other, acc=None, input_precision=None, allow_tf32=None, ...)
_PRECISION_POSITION = 3
_ALLOW_TF32_POSITION = 4
_UNKNOWN = object()


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


@dataclass(frozen=True)
class _Call:
    line: int
    code: str
    precision: ast.expr | None  # the input_precision argument, if given
    allow_tf32: ast.expr | None


@dataclass(frozen=True)
class _Parsed:
    params: tuple[str, ...]
    defaults: tuple[tuple[str, ast.expr], ...]
    dots: tuple[_Call, ...]
    callees: tuple[str, ...]  # names of the functions it calls by name


def _is_dot(func: ast.expr, globals_: Mapping) -> bool:
    import triton.language as tl

    if isinstance(func, ast.Attribute) and func.attr == "dot":
        owner = func.value
        if isinstance(owner, ast.Name):
            return globals_.get(owner.id) in (tl, tl.core)
        return ast.unparse(owner) in ("triton.language", "tl")
    return isinstance(func, ast.Name) and globals_.get(func.id) is tl.dot


@functools.lru_cache(maxsize=256)
def _parse(fn) -> _Parsed | None:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        first_line = inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    func = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if func is None:
        return None
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    params = tuple(a.arg for a in [*positional, *args.kwonlyargs])
    with_default = positional[len(positional) - len(args.defaults) :]
    defaults = tuple((a.arg, d) for a, d in zip(with_default, args.defaults, strict=True))
    defaults += tuple(
        (a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
    )
    dots, callees = [], []
    for node in ast.walk(func):
        if not isinstance(node, ast.Call):
            continue
        if _is_dot(node.func, fn.__globals__):
            keywords = {k.arg: k.value for k in node.keywords}

            def argument(name, position, node=node, keywords=keywords):
                if name in keywords:
                    return keywords[name]
                return node.args[position] if len(node.args) > position else None

            dots.append(
                _Call(
                    first_line + node.lineno - 1,
                    ast.unparse(node),
                    argument("input_precision", _PRECISION_POSITION),
                    argument("allow_tf32", _ALLOW_TF32_POSITION),
                )
            )
        elif isinstance(node.func, ast.Name):
            callees.append(node.func.id)
    return _Parsed(params, defaults, tuple(dots), tuple(dict.fromkeys(callees)))


def _value(expr: ast.expr, known: Mapping[str, object], globals_: Mapping):
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.Name):
        if expr.id in known:
            return getattr(known[expr.id], "value", known[expr.id])  # a tl.constexpr, unwrapped
        if expr.id in globals_:
            return getattr(globals_[expr.id], "value", globals_[expr.id])
    return _UNKNOWN


def _precision(call: _Call, known: Mapping[str, object], globals_: Mapping) -> str | None:
    if call.precision is not None:
        value = _value(call.precision, known, globals_)
        if value is None:
            call = _Call(call.line, call.code, None, call.allow_tf32)
        else:
            return value.lower() if isinstance(value, str) else None
    default = os.environ.get("TRITON_F32_DEFAULT") or "tf32"
    if call.allow_tf32 is None:
        return default
    allow = _value(call.allow_tf32, known, globals_)
    if allow is None or allow is True:
        return default
    return "ieee" if allow is False else None


def dots(kernel, args: Sequence = (), kwargs: Mapping | None = None) -> list[Dot]:
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
        with_defaults = {
            name: value
            for name, expr in parsed.defaults
            if (value := _value(expr, {}, fn.__globals__)) is not _UNKNOWN
        }
        values = {**with_defaults, **known}
        for call in parsed.dots:
            precision = _precision(call, values, fn.__globals__)
            found.append(Dot(fn.__name__, call.line, call.code, precision))
        for name in parsed.callees:
            callee = python_function(fn.__globals__.get(name))
            if callee is not None and callee is not fn and hasattr(fn.__globals__[name], "fn"):
                visit(callee, {})  # a jit helper: its parameters are not resolved

    fn = python_function(kernel)
    if fn is not None:
        parsed = _parse(fn)
        names = parsed.params if parsed else ()
        known = dict(zip(names, args, strict=False))  # extra arguments: launch options
        known.update(kwargs or {})
        visit(fn, known)
    return found


def tf32_dots(kernel, args: Sequence = (), kwargs: Mapping | None = None) -> list[Dot]:
    """The `tl.dot` calls that multiply in TF32 on a GPU when this launch has float32 tensors
    (empty when it has none: then no block is float32, unless the kernel casts one). Never
    raises: it runs inside every recorded launch."""
    tensors = [a for a in [*args, *(kwargs or {}).values()] if isinstance(a, torch.Tensor)]
    if not any(t.dtype == torch.float32 for t in tensors):
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
    numel = t.untyped_storage().nbytes() // t.element_size()
    whole = torch.empty(0, dtype=t.dtype, device=t.device)
    whole.set_(t.untyped_storage(), 0, (numel,), (1,))
    return round_to_tf32(whole).as_strided(t.shape, t.stride(), t.storage_offset())
