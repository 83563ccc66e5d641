"""Guards for graded calls, built on torch's public function modes (torch.overrides):

- `forbid(...)`: the graded code must not call certain torch functions (the reference it is
  meant to replace), however it reached them: an alias imported under another name is caught too.
- `allocations()`: how many bytes of new tensor storage torch allocated during a call, to check
  that a kernel does not build a large intermediate (an N x N score matrix, for instance). It
  counts every tensor a torch function returns whose storage is new; on a GPU, the peak of
  `torch.cuda.max_memory_allocated` says the same from the allocator's side.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode

# What a hand-written attention or softmax kernel must not hand back to torch.
ATTENTION = (
    "scaled_dot_product_attention",
    "matmul",
    "__matmul__",
    "__rmatmul__",
    "bmm",
    "mm",
    "baddbmm",
    "addmm",
    "einsum",
    "tensordot",
    "softmax",
    "_softmax",
    "log_softmax",
)
SOFTMAX = ("softmax", "_softmax", "log_softmax", "logsumexp")


class ForbiddenCall(AssertionError):
    """The graded code called a torch function it is meant to replace."""


class _Forbid(TorchFunctionMode):
    def __init__(self, names: frozenset[str], why: str):
        super().__init__()
        self.names = names
        self.why = why

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.names:
            raise ForbiddenCall(f"the graded code called torch's `{name}`: {self.why}")
        return func(*args, **(kwargs or {}))


@contextmanager
def forbid(*names: str, why: str = "compute it yourself") -> Iterator[None]:
    """Raise ForbiddenCall if code inside the block calls a torch function named in `names`."""
    with _Forbid(frozenset(names), why):
        yield


def _tensors(value) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)


class Allocations(TorchFunctionMode):
    """Bytes of tensor storage created by torch functions called inside the block."""

    def __init__(self):
        super().__init__()
        self.storages: dict[int, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        inputs = {
            t.untyped_storage().data_ptr()
            for t in _tensors([*args, *kwargs.values()])
            if t.layout == torch.strided
        }
        for t in _tensors(result):
            if t.layout != torch.strided:
                continue
            storage = t.untyped_storage()
            if storage.data_ptr() not in inputs:  # not a view of, or a write into, an argument
                self.storages.setdefault(storage.data_ptr(), storage.nbytes())
        return result

    @property
    def bytes(self) -> int:
        return sum(self.storages.values())


@contextmanager
def allocations() -> Iterator[Allocations]:
    """`with allocations() as a: ...` then `a.bytes`: storage bytes torch allocated inside."""
    tracker = Allocations()
    with tracker:
        yield tracker
