"""Out-of-bounds loads and stores, on the laptop: in interpreter mode, a launch that a graded call
makes (`grader.runtime.launches` records every one) fails when one of its loads reads, or one of
its stores writes, outside the tensor arguments it was given, masked lanes excepted. The message
names the pointer argument, how many elements past its end (or before its start) the access
went, the line of a load, and the likely fix. On a GPU such a read returns whatever memory holds
there, or stops the kernel with an illegal address; in the interpreter it reads the laptop's
memory, and a kernel whose store is masked but whose load is not gives the right output: without
this check it passes every test. On a GPU nothing changes here (compute-sanitizer's memcheck
covers it in the GPU tests, tests/test_bounds_gpu.py).

How. Around one `kernel[grid](...)`, each tensor argument is moved into a guarded copy: the bytes
from its lowest to its highest element (the union of them, for arguments whose bytes overlap), with
guard bytes before and after, all of value 0xA5; the kernel is launched on the copies, which are
copied back afterwards, exception or not. A store outside its tensor lands in a guard and changes
it. A load cannot change memory, so every name bound to `triton.language` in the kernel's module
is, during the launch, a stand-in module whose `load` calls `triton.language.load` and then looks
at what came back: lanes that the mask lets through and that hold the guard's bytes may have
read a guard. Whether any lane did is one masked store into a flag tensor, read back at once
(the stand-in is Python, run by the interpreter like the kernel). Only then (rare: data seldom
holds 0xA5A5...) does it keep the lowest and highest address of those lanes per call site, with
`tl` operations, in a report tensor; after the launch, an address inside a guard is out of
bounds, and the guard says whose. Every step uses Triton's public language (`tl.load`,
`tensor.to(..., bitcast=True)`, a pointer cast to int64 and back) and Python's own name lookup;
nothing of the interpreter's internals. It runs under Triton 3.6 and 3.9.

Why not triton-viz (PyPI, 3.0, the newest release): its sanitizer reaches into the interpreter's
internals (`interpreter_builder`, `_patch_lang`, `TensorHandle`) and does not import under
Triton 3.9 (`InterpreterBuilder` has no `create_make_block_ptr` there); under Triton 3.6 it works,
but evaluates the kernel symbolically with z3 instead of running it (the output stays unwritten,
so it would be a second pass over every launch), replaces `triton.jit` while it is imported,
prints its report in colour and exits the process (`SystemExit`) on a violation, and brings about
230 MB of dependencies (pyarrow, z3-solver, flask, cairocffi, pre-commit).

How far. A read further past a tensor than its guard (as large as the tensor, at least 64 KiB,
and at least the memory around it in its own allocation) is not seen: it reads whatever memory
lies there, as without the check. Nor is a read through `triton` spelled out
(`triton.language.load`), a block pointer or a tensor descriptor, a load in a `@triton.jit`
helper of another module than the kernel's, or a read whose place depends on the tensors' values
alone (a gather with bad indices) after one launch of the same shapes passed.
A launch given a tensor descriptor or a tuple of tensors is not checked. A store of bytes equal
to the guard's is not seen. Stores are reported by argument, without their line.

Cost. Each distinct launch (program, dtypes, shapes, strides, other arguments) is checked once
per process; a launch found in bounds runs plainly afterwards (a second trial of a check, the
same cell run again). A checked launch copies each tensor argument in and out and adds four `tl`
operations to each load: on a 2-core CPU, 1.7 to 1.9 times the interpreter's own time for
load-bound kernels (a ReLU over 100k elements: 198 ms against 106 ms; 64 row sums of 1000
columns, 8 loads per program: 726 ms against 436 ms).
"""

from __future__ import annotations

import inspect
import linecache
import sys
import types
from dataclasses import dataclass

import torch

from grader.runtime import device, gpu_compile, hints

BYTE = 0xA5
MIN_GUARD = 64 * 1024  # bytes on each side of a tensor, at least
MAX_GUARD = 64 * 1024 * 1024
SITES = 256  # load call sites reported per launch
_INT64_MAX = 2**63 - 1
# The guard's bytes read as a signed integer of each width.
_SENTINEL = {
    8: -0x5B,
    16: -0x5A5B,
    32: -0x5A5A_5A5B,
    64: -0x5A5A_5A5A_5A5A_5A5B,
}


class OutOfBoundsError(hints.HintedError):
    """A kernel read or wrote outside a tensor argument; after the message's first line, the
    hint (grader.runtime.hints)."""


# -- the guarded copies ---------------------------------------------------------------------------


@dataclass
class _Argument:
    names: list[str]  # the kernel's parameters given this tensor
    tensor: torch.Tensor
    start: int  # its bytes [start, stop) in the original memory
    stop: int


class _Arena:
    """One guarded copy of the bytes [start, stop) that some arguments share."""

    def __init__(self, storage: torch.UntypedStorage, start: int, stop: int):
        self.storage, self.start, self.stop = storage, start, stop
        # a guard as large as the tensor, and never smaller than the room the original memory
        # has on that side (a window of a larger buffer, such as 04's padded frame)
        guard = max(MIN_GUARD, min(stop - start, MAX_GUARD))
        self.guard = max(guard, start - storage.data_ptr())
        self.guard_after = max(guard, storage.data_ptr() + storage.nbytes() - stop)
        self.arguments: list[_Argument] = []

    def size(self) -> int:
        return self.guard + self.stop - self.start + self.guard_after + 64

    def place(self, buffer: torch.Tensor) -> None:
        """Make `buffer` (uint8, `size()` bytes, all BYTE) the copy, and copy the bytes in."""
        self.buffer = buffer
        shift = self.start % 64  # the copy keeps the original's alignment
        self.offset = self.guard + (shift - buffer.data_ptr() - self.guard) % 64
        self.base = buffer.data_ptr() + self.offset  # where `start` lands
        self._region().copy_(self._original())
        self.before = buffer[: self.offset]
        self.after = buffer[self.offset + self.stop - self.start :]

    def _original(self) -> torch.Tensor:
        bytes_ = torch.empty(0, dtype=torch.uint8, device=self.storage.device)
        base = self.storage.data_ptr()
        return bytes_.set_(self.storage, self.start - base, (self.stop - self.start,), (1,))

    def _region(self) -> torch.Tensor:
        return self.buffer[self.offset : self.offset + self.stop - self.start]

    def copy(self, t: torch.Tensor) -> torch.Tensor:
        """`t` (whose memory this arena copies), as a view of the copy."""
        storage = self.buffer.untyped_storage()
        first = self.base + t.data_ptr() - self.start - storage.data_ptr()
        view = torch.empty(0, dtype=t.dtype)
        return view.set_(storage, first // t.element_size(), t.shape, t.stride())

    def back(self) -> None:
        self._original().copy_(self._region())

    def owner(self, address: int) -> tuple[_Argument, int] | None:
        """The argument nearest `address` if it lies in a guard, and how many elements past its
        end (positive) or before its start (negative) it lies."""
        low, high = self.base - self.offset, self.base - self.offset + self.buffer.numel()
        if not low <= address < high:
            return None
        original = address - self.base + self.start
        if original >= self.stop:
            arg = max(self.arguments, key=lambda a: a.stop)
            return arg, (original - arg.stop) // arg.tensor.element_size() + 1
        if original < self.start:
            arg = min(self.arguments, key=lambda a: a.start)
            return arg, -(
                (arg.start - original + arg.tensor.element_size() - 1) // arg.tensor.element_size()
            )
        return None

    def written(self) -> list[tuple[_Argument, int]]:
        """For each guard that a store changed, the argument and how far the furthest change
        lies (elements past its end, or negative: before its start)."""
        found = []
        changed = (self.before != BYTE).nonzero()
        if changed.numel():
            found.append(self.owner(self.base - self.offset + int(changed[0])))
        changed = (self.after != BYTE).nonzero()
        if changed.numel():
            found.append(self.owner(self.base + self.stop - self.start + int(changed[-1])))
        return [f for f in found if f is not None]


def _span(t: torch.Tensor) -> tuple[int, int] | None:
    if t.numel() == 0 or t.layout != torch.strided:
        return None
    high = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True) if s > 0)
    return t.data_ptr(), t.data_ptr() + (high + 1) * t.element_size()


def _guarded(params: list[str], args: tuple, kwargs: dict):
    """(args, kwargs) with every tensor replaced by its guarded copy, and the arenas; None where
    an argument holds memory this check cannot copy (a descriptor, a tuple of tensors)."""
    named = [*zip(params, args, strict=False), *kwargs.items()]
    for _, value in named:
        if isinstance(value, tuple | list) or isinstance(
            getattr(value, "base", None), torch.Tensor
        ):
            return None
    by_storage: dict[int, list] = {}
    for name, value in named:
        if isinstance(value, torch.Tensor) and (span := _span(value)) is not None:
            key = value.untyped_storage().data_ptr()
            by_storage.setdefault(key, []).append((name, value, span))
    made: dict[int, _Arena] = {}  # id of each tensor -> its arena
    arenas: list[_Arena] = []
    for members in by_storage.values():
        # tensors of one storage share a copy only where their bytes overlap: a read past one
        # must not land in the next
        members.sort(key=lambda m: m[2][0])
        clusters = []
        for member in members:
            if clusters and member[2][0] < max(m[2][1] for m in clusters[-1]):
                clusters[-1].append(member)
            else:
                clusters.append([member])
        for cluster in clusters:
            start = min(s[0] for _, _, s in cluster)
            stop = max(s[1] for _, _, s in cluster)
            arena = _Arena(cluster[0][1].untyped_storage(), start, stop)
            arenas.append(arena)
            for name, value, (first, last) in cluster:
                made[id(value)] = arena
                same = next((a for a in arena.arguments if a.tensor is value), None)
                if same is None:
                    arena.arguments.append(_Argument([name], value, first, last))
                else:
                    same.names.append(name)

    whole = torch.full((sum(a.size() for a in arenas),), BYTE, dtype=torch.uint8)
    at = 0
    for arena in arenas:
        arena.place(whole[at : at + arena.size()])
        at += arena.size()

    def swap(value):
        if isinstance(value, torch.Tensor) and _span(value) is not None:
            return made[id(value)].copy(value)
        return value

    return (
        tuple(swap(a) for a in args),
        {k: swap(v) for k, v in kwargs.items()},
        arenas,
    )


# -- the loads ------------------------------------------------------------------------------------


class _Report:
    """The addresses that loads let through and found holding the guard's bytes: per call site,
    the lowest and the highest, in a tensor that `tl.store` writes."""

    def __init__(self):
        self.flag = torch.zeros(1, dtype=torch.int8)
        self.flags: dict = {}  # a block of pointers to the flag, per shape
        self.addresses = torch.empty((SITES, 2), dtype=torch.int64)  # per site: lowest, highest
        self.addresses[:, 0] = _INT64_MAX
        self.addresses[:, 1] = -1
        self.sites: dict[tuple[str, int], int] = {}

    def slot(self, where: tuple[str, int]) -> int | None:
        if where not in self.sites:
            if len(self.sites) == SITES:
                return None
            self.sites[where] = len(self.sites)
        return self.sites[where]


_REPORTS: list[_Report] = []


def _checked_load(pointer, mask=None, other=None, *args, **kwargs):
    """`tl.load`, then a look at what it read (the module's docstring says how)."""
    import triton.language as tl

    value = tl.load(pointer, mask, other, *args, **kwargs)
    ptype = getattr(pointer, "type", None)
    if (
        not _REPORTS
        or ptype is None
        or not ptype.scalar.is_ptr()
        or (ptype.is_ptr() and ptype.element_ty.is_block())  # a block pointer
        or (mask is not None and not isinstance(mask, tl.tensor))
    ):
        return value
    width = value.dtype.primitive_bitwidth
    if width not in _SENTINEL or value.dtype == tl.int1:
        return value
    report = _REPORTS[-1]
    hit = value.to(getattr(tl, f"int{width}"), bitcast=True) == _SENTINEL[width]
    if mask is not None:
        hit = hit & mask
    # any lane hit? A store of 1 into the report's flag, read back here, is the cheapest way to
    # know (a reduction such as tl.max is a function the interpreter calls with its own set-up)
    shape = tuple(hit.shape)
    if shape not in report.flags:
        flags = tl.full(shape, report.flag.data_ptr(), tl.int64)
        report.flags[shape] = flags.to(tl.pointer_type(tl.int8))
    tl.store(report.flags[shape], 1, mask=hit)
    if not report.flag[0]:
        return value
    report.flag[0] = 0
    if not hit.type.is_block():
        hit = tl.full((1,), 0, tl.int1) | hit
    caller = sys._getframe(1)
    slot = report.slot((caller.f_code.co_filename, caller.f_lineno))
    if slot is None:
        return value
    address = pointer.to(tl.int64)
    low = tl.min(tl.where(hit, address, _INT64_MAX))
    high = tl.max(tl.where(hit, address, -1))
    first = tl.full((), report.addresses[slot].data_ptr(), tl.int64)
    first = first.to(tl.pointer_type(tl.int64))
    tl.store(first, tl.minimum(tl.load(first), low))
    tl.store(first + 1, tl.maximum(tl.load(first + 1), high))
    return value


class _Language(types.ModuleType):
    """`triton.language` with a checked `load`; every other name is looked up in the real module
    when the kernel asks for it (the interpreter replaces them while a kernel runs)."""

    def __getattr__(self, name):
        import triton.language

        return getattr(triton.language, name)


_LANGUAGE = _Language("triton.language")
_LANGUAGE.load = _checked_load
# The interpreter refuses to run a kernel whose globals do not hold the real `triton.language`
# ("must be visible from within jit'd function"): while its names point at the stand-in, the real
# module stays there under this one.
_REAL = "_course_triton_language"


# -- the launch -----------------------------------------------------------------------------------


def _line(filename: str, lineno: int) -> str:
    text = linecache.getline(filename, lineno).strip()
    return f"line {lineno} (`{text}`)" if text else f"line {lineno}"


def _how_far(arg: _Argument, elements: int) -> str:
    names = " and ".join(f"`{n}`" for n in arg.names)
    shape = f"{str(arg.tensor.dtype).removeprefix('torch.')}{list(arg.tensor.shape)}"
    if elements > 0:
        return f"{elements} element{'s' * (elements != 1)} past the end of {names} ({shape})"
    return f"{-elements} element{'s' * (elements != -1)} before the start of {names} ({shape})"


def _verdict(name: str, arenas: list[_Arena], report: _Report) -> OutOfBoundsError | None:
    lines = []
    for (filename, lineno), slot in report.sites.items():
        low, high = (int(v) for v in report.addresses[slot])
        found = [f for a in arenas for address in (low, high) if (f := a.owner(address))]
        if found:
            arg, elements = max(found, key=lambda f: abs(f[1]))
            lines.append(f"a load at {_line(filename, lineno)} reads {_how_far(arg, elements)}")
    for arena in arenas:
        for arg, elements in arena.written():
            lines.append(f"a store writes {_how_far(arg, elements)}")
    if not lines:
        return None
    loads = lines[0].startswith("a load")
    return OutOfBoundsError(
        f"`{name}` goes outside its tensors: {lines[0]}. Does the {'load' if loads else 'store'} "
        "past n carry a mask?\n"
        + "".join(f"Also {line}.\n" for line in lines[1:])
        + "On a GPU such an access reads or overwrites whatever memory lies there, or stops the "
        "kernel with an illegal memory access. Give every tl.load and tl.store the mask that "
        "keeps its lanes inside the tensor (`mask=offsets < n`, per axis for a tile).",
        (hints.out_of_bounds(loads),),
    )


_CHECKED: set = set()  # launches found in bounds, which are not checked again


def _key(fn, args: tuple, kwargs: dict):
    """What a launch's accesses depend on, but for the values in its tensors: the program, each
    tensor's dtype, shape and strides, every other argument."""

    def part(v):
        if isinstance(v, torch.Tensor):
            return ("tensor", v.dtype, tuple(v.shape), v.stride())
        if isinstance(v, bool | int | float | str | type(None)):
            return v
        return ("other", id(v))

    return (fn.__code__, tuple(map(part, args)), tuple((k, part(v)) for k, v in kwargs.items()))


def launch(kernel, run, args: tuple, kwargs: dict):
    """`run(*args, **kwargs)`, the launch of `kernel`; in interpreter mode, on guarded copies of
    its tensor arguments with its loads watched, raising OutOfBoundsError where one of its loads
    or stores went outside them."""
    __tracebackhide__ = True
    inner = None if device.current().is_gpu else gpu_compile.interpreted(kernel)
    fn = None if inner is None else inner.fn
    if fn is None or _REPORTS:  # a GPU, a compiled kernel, or a launch inside a checked one
        return run(*args, **kwargs)
    import triton.language

    key = _key(fn, args, kwargs)
    if key in _CHECKED:
        return run(*args, **kwargs)
    scope = fn.__globals__
    names = [k for k, v in scope.items() if v is triton.language]
    params = list(inspect.signature(fn).parameters)
    guarded = _guarded(params, args, kwargs) if names else None
    if guarded is None:
        return run(*args, **kwargs)
    new_args, new_kwargs, arenas = guarded
    if not arenas:
        return run(*args, **kwargs)
    report = _Report()
    _REPORTS.append(report)
    had_real = _REAL in scope
    for n in names:
        scope[n] = _LANGUAGE
    scope[_REAL] = triton.language
    try:
        result = run(*new_args, **new_kwargs)
    finally:
        for n in names:
            scope[n] = triton.language
        if not had_real:
            del scope[_REAL]
        _REPORTS.remove(report)
        for arena in arenas:
            arena.back()
    error = _verdict(fn.__name__, arenas, report)
    if error is not None:
        raise error
    _CHECKED.add(key)
    return result
