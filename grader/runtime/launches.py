"""Did the student's kernel do the work? Around a graded call, every Triton launch
(`kernel[grid](...)`) is recorded with the memory of its tensor arguments, and the output is
compared, bit for bit, before and after each launch of the exercise's kernels. Afterwards:

- the exercise's kernels were launched at least once;
- every input tensor's memory was handed to some Triton launch (not a dummy tensor or a copy);
- every element of the output holds what one of the exercise's launches wrote there: one changed
  outside them was written by something else (torch, before the kernel ran or after it). Elements
  nobody wrote are left to the value check, which reports them as never written.

Launches are seen through `triton.runtime.KernelInterface.__getitem__`, which every Triton kernel
(compiled, interpreted, autotuned) uses for `kernel[grid]`; it is patched only while a recording
is open, and an autotuner's own benchmarking runs are not recorded. In interpreter mode each
recorded launch, its autotuner's trials included, is also compiled for the GPU, so that a kernel
Triton's compiler refuses fails as on a GPU (`grader.runtime.gpu_compile`), and runs on guarded
copies of its tensor arguments, so that a load or store outside them fails
(`grader.runtime.bounds`). A kernel that makes a block pointer is refused before it runs, in
either mode (`refuse_block_pointers`).

Limits. A launch through `kernel.run(...)` is not seen. An element that the kernel rewrites with
the value already there counts as not written by it, so outputs must start poisoned (checks.check
poisons them) and launchers must not write them with anything else first. Not caught: a launch
given the real inputs beside another that copies a result made elsewhere into the output, and
pointer arithmetic aimed at memory other than the arguments'. When the output is only known once
the call returns (`integrity.checked_call`), the returned tensor need only have been handed to a
launch of the exercise's kernels. What a kernel computes is the value check's business.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from grader.runtime import bounds, gpu_compile, precision, syntax, watches

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class IntegrityError(AssertionError):
    """The graded call did not do its own work; the message says what it did instead.
    (`grader.runtime.integrity` raises it too; the grading side flags it for a human look.)"""


@dataclass(frozen=True)
class Span:
    """The bytes [start, stop) from a tensor's lowest to its highest element."""

    start: int
    stop: int

    @classmethod
    def of(cls, t: torch.Tensor) -> Span | None:
        if t.numel() == 0 or t.layout != torch.strided:
            return None
        low = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True) if s < 0)
        high = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True) if s > 0)
        size = t.element_size()
        return cls(t.data_ptr() + low * size, t.data_ptr() + (high + 1) * size)


@dataclass
class Launch:
    """One `kernel[grid](...)`: the kernel's name, the spans of its tensor arguments, and its
    `tl.dot` calls that multiply float32 blocks in TF32 on a GPU (`grader.runtime.precision`)."""

    kernel: str
    spans: list[Span]
    tf32_dots: tuple[precision.Dot, ...] = ()


def kernel_name(kernel) -> str:
    """The name of the function under a Triton kernel (through autotuners and heuristics)."""
    fn = kernel
    for _ in range(8):
        if inspect.isfunction(fn):
            return fn.__name__
        fn = getattr(fn, "fn", None)
    return getattr(kernel, "__name__", type(kernel).__name__)


class BlockPointerError(AssertionError):
    """A graded kernel makes a block pointer, which the course refuses everywhere."""


@functools.cache
def _names(fn) -> frozenset[str]:
    """The names and attribute names in the source of `fn`."""
    nodes = ast.walk(syntax.parse(precision.source(fn)))
    return frozenset(getattr(n, "id", None) or getattr(n, "attr", "") for n in nodes)


def refuse_block_pointers(kernel) -> None:
    """Raise BlockPointerError if `kernel`, or a `@triton.jit` function it names, makes a block
    pointer (`tl.make_block_ptr`). Triton 3.9, which the student kit installs, has removed them,
    and the grading image's Triton 3.6 has them: refused on both, such a kernel gets one verdict."""
    stack, seen = [precision.python_function(kernel)], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        try:
            names = _names(fn)
        except (OSError, TypeError, SyntaxError):  # no source to read: nothing seen
            continue
        if "make_block_ptr" in names:
            raise BlockPointerError(
                f"`{kernel_name(kernel)}` makes a block pointer (`tl.make_block_ptr`, in "
                f"`{fn.__name__}`), which the course does not accept: Triton 3.9, which the "
                "student kit installs, has removed block pointers, while the grading image's "
                "Triton 3.6 still has them, so such a kernel would fail here and pass there. "
                "Address the tiles with pointers and masks, as the notebooks do, or with a tensor "
                "descriptor where its alignment rules allow (`tl.make_tensor_descriptor(base, "
                "shape, strides, block_shape)`, then `desc.load([row, col])` and "
                "`desc.store([row, col], tile)`; on a GPU after `triton.set_allocator`, as 09 "
                "shows)."
            )
        found = (fn.__globals__.get(n) for n in names)
        stack += [precision.python_function(v) for v in found if hasattr(v, "fn")]


def who(fn) -> str:
    """How messages name a launcher: `relu`, or "the launcher" for a lambda."""
    name = getattr(fn, "__name__", "<lambda>")
    return "the launcher" if name == "<lambda>" else f"`{name}`"


def tensors(values: Iterable) -> Iterator[torch.Tensor]:
    """The tensors among `values`, in nested tuples and lists too."""
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, tuple | list):
            yield from tensors(v)
        elif isinstance(getattr(v, "base", None), torch.Tensor):  # tensor descriptors, wrappers
            yield v.base


def bits(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` that compares bit for bit (NaN payloads included)."""
    copy = t.detach().clone()
    if copy.is_floating_point() or copy.is_complex():
        return copy.view(_BITS[copy.element_size()])
    return copy


@dataclass(eq=False)  # one recording is equal only to itself: they hold tensors
class Recording:
    """What one graded call launched, and, for `out`, which elements the exercise's kernels
    changed (`written`) and to what (`left`)."""

    kernels: frozenset[str]
    out: torch.Tensor | None
    launches: list[Launch] = field(default_factory=list)
    written: torch.Tensor | None = None
    left: torch.Tensor | None = None

    def __post_init__(self):
        if self.out is not None:
            self.left = bits(self.out)
            self.written = torch.zeros(self.out.shape, dtype=torch.bool, device=self.out.device)

    def _launched(self, kernel, args, kwargs) -> torch.Tensor | None:
        name = kernel_name(kernel)
        spans = [s for t in tensors([*args, *kwargs.values()]) if (s := Span.of(t))]
        self.launches.append(Launch(name, spans, tuple(precision.tf32_dots(kernel, args, kwargs))))
        if self.out is not None and name in self.kernels:
            return bits(self.out)
        return None

    def _finished(self, before: torch.Tensor | None) -> None:
        if before is None:
            return
        after = bits(self.out)
        changed = after != before
        self.written |= changed
        self.left = torch.where(changed, after, self.left)

    def ours(self) -> list[Launch]:
        return [launch for launch in self.launches if launch.kernel in self.kernels]

    # a watch (grader.runtime.watches): at grading the call may run in the notebook's process

    def remote(self, codec) -> dict:
        out = None if self.out is None else codec.encode(self.out)
        return {"kind": "launches", "kernels": sorted(self.kernels), "out": out}

    def absorb(self, report: dict, context) -> None:
        """Add what the same recording saw in the other process: its launches (their spans as
        addresses of this process's tensors, where they were mirrors of them) and, for `out`,
        what its kernels wrote there."""
        for seen in report.get("launches", []):
            spans = [Span(*s) for found in seen.get("spans", []) if (s := context.span(found))]
            dots = tuple(precision.Dot(*d) for d in seen.get("tf32", []) if len(d) == 4)
            self.launches.append(Launch(str(seen.get("kernel")), spans, dots))
        if self.out is not None and "written" in report:
            written = context.tensor(report["written"], torch.bool, self.out.shape, self.out.device)
            left = context.tensor(report["left"], self.left.dtype, self.out.shape, self.out.device)
            self.written |= written
            self.left = torch.where(written, left, self.left)


_ACTIVE: list[Recording] = []
_PLAIN_GETITEM = []  # KernelInterface.__getitem__ as Triton defines it, while a recording is open


def _recording_getitem(kernel, grid):
    launch = _PLAIN_GETITEM[0](kernel, grid)

    def recorded(*args, **kwargs):
        refuse_block_pointers(kernel)
        watching = list(_ACTIVE)
        before = [r._launched(kernel, args, kwargs) for r in watching]
        with gpu_compile.checking(kernel):
            result = bounds.launch(kernel, launch, args, kwargs)
        for r, b in zip(watching, before, strict=True):
            r._finished(b)
        return result

    return recorded


@contextmanager
def recording(kernels: Iterable[str] = (), out: torch.Tensor | None = None):
    """Record every Triton launch in the block; with `out`, also which of its elements the
    launches of `kernels` changed. Yields the Recording."""
    from triton.runtime import KernelInterface

    rec = Recording(frozenset(kernels), out)
    if not _ACTIVE:
        _PLAIN_GETITEM[:] = [KernelInterface.__getitem__]
        KernelInterface.__getitem__ = _recording_getitem
    _ACTIVE.append(rec)
    try:
        with watches.opened(rec):
            yield rec
    finally:
        _ACTIVE.remove(rec)
        if not _ACTIVE:
            KernelInterface.__getitem__ = _PLAIN_GETITEM.pop()


def _covered(span: Span, spans: Sequence[Span]) -> bool:
    """Whether the union of `spans` covers `span`."""
    reach = span.start
    for s in sorted(spans, key=lambda s: s.start):
        if s.start > reach:
            break
        reach = max(reach, s.stop)
    return reach >= span.stop


def _describe(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


def verify(
    rec: Recording, inputs: Sequence, who: str, returned: torch.Tensor | None = None
) -> None:
    """Raise IntegrityError unless the recorded call did its work with `rec.kernels`. Where
    the output was not known before the call, `returned` (what the call returned) must at least
    have been handed to one of their launches."""
    __tracebackhide__ = True
    names = " or ".join(sorted(rec.kernels))
    if rec.kernels and not rec.ours():
        raise IntegrityError(
            f"{who} returned without launching {names}: the result must come from your kernel. "
            "Did the launcher compute it with torch, or return a result kept from earlier?"
        )
    foreign = None if rec.out is None else bits(rec.out) != rec.left
    if foreign is not None and bool(foreign.any()):
        later = int((foreign & rec.written).sum())
        instead = int((foreign & ~rec.written).sum())
        what = []
        if instead:
            what.append(
                f"{instead} of its {rec.out.numel()} elements were not written by {names}, yet "
                "changed during the call"
            )
        if later:
            what.append(f"{later} elements that {names} wrote were changed afterwards")
        raise IntegrityError(
            f"{who} returned an `out` that {names} did not write: "
            + "; ".join(what)
            + ". Did the launcher compute the result with torch (or launch the kernel on a "
            "dummy tensor)? Store every element of `out` from your kernel."
        )
    span = None if returned is None else Span.of(returned)
    if span is not None and not _covered(span, [s for x in rec.ours() for s in x.spans]):
        raise IntegrityError(
            f"{who} returned a tensor ({_describe(returned)}) that no launch of {names} was "
            "given: did it compute the result with torch (or launch the kernel on a dummy "
            "tensor)? Return the tensor your kernel wrote."
        )
    given = [s for launch in rec.launches for s in launch.spans]
    for position, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or (span := Span.of(t)) is None:
            continue
        if not _covered(span, given):
            raise IntegrityError(
                f"no kernel launched by {who} was given input {position} ({_describe(t)}): "
                "the kernel must read the real inputs. Did the launcher launch it on a dummy "
                "tensor or a copy and compute the result with torch?"
            )


@contextmanager
def kernel_work(
    kernels: Sequence[str], inputs: Sequence, out: torch.Tensor | None = None, who: str = "it"
) -> Iterator[Recording]:
    """Around a graded call: on leaving the block without an exception, require that `kernels`
    were launched, were given every tensor in `inputs`, and wrote every element of `out` that
    changed (see the module's docstring)."""
    __tracebackhide__ = True
    with recording(kernels, out) as rec:
        yield rec
    verify(rec, inputs, who)
