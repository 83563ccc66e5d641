"""Out-of-bounds loads and stores, on the laptop: in interpreter mode, a launch that a graded call
makes fails when a load or store outside its tensor arguments is not masked off, with a message
naming the argument, how many elements past its end (or before its start), a load's line and the
likely fix. Without it, a kernel whose store is masked but whose load is not reads the laptop's
memory and passes every test. On a GPU nothing changes (tests/test_bounds_gpu.py runs memcheck).

How. Around one `kernel[grid](...)`, the tensor arguments are moved into guarded copies (the bytes
from an argument's lowest to its highest element, shared where arguments overlap) between guards
of bytes 0xA5, and copied back afterwards. A store outside its tensor changes a guard. For loads,
the names bound to `triton.language` in the kernel's module are, during the launch, a stand-in
whose `load` tests, with one masked store into a flag, whether a lane the mask lets through holds
the guard's bytes; only then (rare) does it keep the lowest and highest such address per call
site, which after the launch says whose guard it read. Only Triton's public language is used.

Why not triton-viz (3.0, the newest release): its sanitizer reaches into the interpreter's
internals and does not import under Triton 3.9; under 3.6 it evaluates the kernel symbolically
with z3 instead of running it, replaces `triton.jit` while imported, exits the process on a
violation, and brings about 230 MB of dependencies.

Not seen: a read further past a tensor than its guard (as large as the tensor, at least 64 KiB,
and at least the memory around it in its own allocation); a read through `triton.language.load`
spelled out, a block pointer, a tensor descriptor or a `@triton.jit` helper of another module; a
read whose place depends on the tensors' values alone after a launch of the same shapes passed; a
store of the guard's bytes; launches given a tensor descriptor or a tuple of tensors.

Cost. Each distinct launch (program, dtypes, shapes, strides, other arguments) is checked once
per process, at 1.7 to 1.9 times the interpreter's own time for load-bound kernels on a 2-core
CPU (a ReLU over 100k elements: 198 ms against 106 ms; 64 row sums of 1000 columns, 8 loads per
program: 726 ms against 436 ms).
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
# The guard's bytes read as a signed integer of each width (in either byte order).
_SENTINEL = {w: int.from_bytes(bytes([BYTE] * (w // 8)), signed=True) for w in (8, 16, 32, 64)}


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
        self.arguments: dict[int, _Argument] = {}  # by the id of the tensor

    def size(self) -> int:
        return self.guard + self.stop - self.start + self.guard_after + 64

    def place(self, buffer: torch.Tensor) -> None:
        """Make `buffer` (uint8, `size()` bytes, all BYTE) the copy, and copy the bytes in."""
        self.buffer = buffer
        shift = self.start % 64  # the copy keeps the original's alignment
        self.offset = self.guard + (shift - buffer.data_ptr() - self.guard) % 64
        self.base = buffer.data_ptr() + self.offset  # where `start` lands
        self._region().copy_(self._original())

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
        if not 0 <= address - self.buffer.data_ptr() < self.buffer.numel():
            return None
        original = address - self.base + self.start
        if original >= self.stop:
            arg = max(self.arguments.values(), key=lambda a: a.stop)
            return arg, (original - arg.stop) // arg.tensor.element_size() + 1
        if original < self.start:
            arg = min(self.arguments.values(), key=lambda a: a.start)
            return arg, (original - arg.start) // arg.tensor.element_size()
        return None

    def written(self) -> list[tuple[_Argument, int]]:
        """For each guard that a store changed, the argument and how far the furthest change
        lies (elements past its end, or negative: before its start)."""
        end = self.offset + self.stop - self.start
        before = (self.buffer[: self.offset] != BYTE).nonzero()[:1]
        after = (self.buffer[end:] != BYTE).nonzero()[-1:] + end
        low = self.buffer.data_ptr()
        return [f for i in [*before, *after] if (f := self.owner(low + int(i)))]


def _span(t: torch.Tensor) -> tuple[int, int] | None:
    if t.numel() == 0 or t.layout != torch.strided:
        return None
    high = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True) if s > 0)
    return t.data_ptr(), t.data_ptr() + (high + 1) * t.element_size()


def _guarded(fn, args: tuple, kwargs: dict):
    """(args, kwargs) of a launch of `fn` with every tensor replaced by its guarded copy, and the
    arenas; None where no argument is a tensor, or one holds memory this check cannot copy (a
    descriptor, a tuple of tensors)."""
    named = [*zip(inspect.signature(fn).parameters, args, strict=False), *kwargs.items()]
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
                argument = arena.arguments.setdefault(id(value), _Argument([], value, first, last))
                argument.names.append(name)
    if not arenas:
        return None

    sizes = [a.size() for a in arenas]
    whole = torch.full((sum(sizes),), BYTE, dtype=torch.uint8)
    for arena, buffer in zip(arenas, whole.split(sizes), strict=True):
        arena.place(buffer)

    def swap(value):
        if isinstance(value, torch.Tensor) and _span(value) is not None:
            return made[id(value)].copy(value)
        return value

    return tuple(map(swap, args)), {k: swap(v) for k, v in kwargs.items()}, arenas


# -- the loads ------------------------------------------------------------------------------------


class _Report:
    """The addresses that loads let through and found holding the guard's bytes: per call site,
    the lowest and the highest, in a tensor that `tl.store` writes."""

    def __init__(self):
        self.flag = torch.zeros(1, dtype=torch.int8)
        self.flags: dict = {}  # a block of pointers to the flag, per shape
        self.addresses = torch.tensor([_INT64_MAX, -1]).repeat(SITES, 1)  # lowest, highest
        self.sites: dict[tuple[str, int], int] = {}

    def slot(self, where: tuple[str, int]) -> int | None:
        if where not in self.sites and len(self.sites) < SITES:
            self.sites[where] = len(self.sites)
        return self.sites.get(where)


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


def _how_far(arg: _Argument, elements: int) -> str:
    names = " and ".join(f"`{n}`" for n in arg.names)
    shape = f"{str(arg.tensor.dtype).removeprefix('torch.')}{list(arg.tensor.shape)}"
    where = "past the end" if elements > 0 else "before the start"
    return f"{abs(elements)} element{'s' * (abs(elements) != 1)} {where} of {names} ({shape})"


def _verdict(name: str, arenas: list[_Arena], report: _Report) -> OutOfBoundsError | None:
    lines = []
    for (filename, lineno), slot in report.sites.items():
        low, high = (int(v) for v in report.addresses[slot])
        found = [f for a in arenas for address in (low, high) if (f := a.owner(address))]
        if found:
            arg, elements = max(found, key=lambda f: abs(f[1]))
            text = linecache.getline(filename, lineno).strip()
            at = f"line {lineno} (`{text}`)" if text else f"line {lineno}"
            lines.append(f"a load at {at} reads {_how_far(arg, elements)}")
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
    if inner is None or _REPORTS:  # a GPU, a compiled kernel, or a launch inside a checked one
        return run(*args, **kwargs)
    import triton.language

    fn = inner.fn
    key = _key(fn, args, kwargs)
    scope = fn.__globals__
    names = [k for k, v in scope.items() if v is triton.language]
    guarded = None if key in _CHECKED or not names else _guarded(fn, args, kwargs)
    if guarded is None:  # found in bounds before, or nothing this check can watch
        return run(*args, **kwargs)
    new_args, new_kwargs, arenas = guarded
    report = _Report()
    _REPORTS.append(report)
    scope.update(dict.fromkeys(names, _LANGUAGE))
    scope[_REAL] = triton.language
    try:
        result = run(*new_args, **new_kwargs)
    finally:
        scope.update(dict.fromkeys(names, triton.language))
        del scope[_REAL]
        _REPORTS.remove(report)
        for arena in arenas:
            arena.back()
    error = _verdict(fn.__name__, arenas, report)
    if error is not None:
        raise error
    _CHECKED.add(key)
    return result
