"""Watches on a graded call: the reference must not run. Each is a watch
(grader.runtime.watches): at grading, where the call runs in the notebook's own process and the
test in the judge's, it is opened there too and what it saw comes back.

- `ReferenceWatch` (a `torch.overrides.TorchFunctionMode`) records calls, made through torch's
  Python API while the graded call runs, to the functions that compute attention or its parts:
  a "fallback" to the reference. `forbid(names, why)` refuses such a call on the spot.
- `peak_memory()` measures, in the notebook's own process, the peak of the device memory
  torch's allocator hands out during a block (07's and 10's memory plots).
- `checked_call` also records the call's Triton launches (`grader.runtime.launches`).

What they cannot catch: work that bypasses torch's Python API (`torch.ops.aten`, numpy, ctypes);
code written to notice the guards and behave differently under them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import SimpleNamespace

import torch
from torch.overrides import TorchFunctionMode

from grader.runtime import checks, launches, watches
from grader.runtime.launches import IntegrityError

# Names (func.__name__) of torch functions and methods that compute attention or its parts.
REFERENCE_OPS = frozenset(
    "softmax log_softmax _softmax scaled_dot_product_attention multi_head_attention_forward "
    "matmul __matmul__ __rmatmul__ mm bmm baddbmm addmm addbmm einsum tensordot linear".split()
)
# Names of the torch functions that compute a softmax.
SOFTMAX_OPS = frozenset({"softmax", "_softmax", "log_softmax", "logsumexp"})


def _qualified(func) -> str:
    module = getattr(func, "__module__", None)
    name = getattr(func, "__name__", repr(func))
    if module is None or module.startswith("torch._"):  # torch._C and its _VariableFunctions
        owner = getattr(func, "__qualname__", name).split(".")[0]
        return f"{'Tensor' if owner in {'TensorBase', 'Tensor'} else 'torch'}.{name}"
    return f"{module}.{name}"


class WatchMode(TorchFunctionMode):
    """A torch function mode that is a watch (grader.runtime.watches) while it is entered, so
    that a graded call that runs in another process is watched there too; it lets the grader's
    own work through unseen (`watches.quiet`). Subclasses define `watch(func, args, kwargs)`."""

    def __enter__(self):
        self._opened = watches.opened(self)
        self._opened.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._opened.__exit__(None, None, None)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if watches.is_quiet():
            return func(*args, **(kwargs or {}))
        return self.watch(func, args, kwargs or {})

    def watch(self, func, args, kwargs):
        return func(*args, **kwargs)


class ReferenceWatch(WatchMode):
    """Records calls, through torch's Python API, to functions named in `forbidden`; with
    `refuse`, raises IntegrityError at the first one, saying `refuse` as the reason."""

    def __init__(self, forbidden: Iterable[str] = REFERENCE_OPS, refuse: str | None = None):
        super().__init__()
        self.forbidden = frozenset(forbidden)
        self.refuse = refuse
        self.calls: list[str] = []

    def remote(self, codec) -> dict:
        return {"kind": "reference", "names": sorted(self.forbidden), "why": self.refuse}

    def absorb(self, report: dict, context) -> None:
        """The calls seen there (a refused one raised there: its error is the call's)."""
        self.calls += [str(c)[:200] for c in report.get("calls", []) if isinstance(c, str)]

    def watch(self, func, args, kwargs):
        if getattr(func, "__name__", "") in self.forbidden:
            self.calls.append(_qualified(func))
            if self.refuse is not None:
                raise IntegrityError(f"the graded code called {self.calls[-1]}: {self.refuse}")
        return func(*args, **kwargs)


def forbid(names: Iterable[str] = REFERENCE_OPS, why: str = "compute it with your kernel"):
    """Raise IntegrityError as soon as code in the block calls a torch function in `names`,
    through any alias (torch.softmax, Tensor.softmax, F.softmax, an imported name)."""
    return ReferenceWatch(names, refuse=why)


@contextmanager
def peak_memory() -> Iterator[SimpleNamespace]:
    """`with peak_memory() as p: ...` then `p.bytes` (GPU only): the peak of
    torch.cuda.max_memory_allocated in the block over what was allocated before it, to show
    that a kernel builds no large intermediate (an N x N score matrix, say)."""
    peak = SimpleNamespace(bytes=0)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    yield peak
    torch.cuda.synchronize()
    peak.bytes = torch.cuda.max_memory_allocated() - before


def checked_call(launcher: Callable, *args, kernels: Sequence[str], **kwargs):
    """Call launcher(*args, **kwargs) once and return its output, after proving that it launched
    each kernel in `kernels`, called none of REFERENCE_OPS, handed its tensor arguments to Triton
    launches and the tensor it returns to a launch of `kernels` (`launches.verify`)."""
    __tracebackhide__ = True
    who = f"`{getattr(launcher, '__name__', 'the launcher')}`"
    with ReferenceWatch() as watch, launches.recording(kernels) as rec:
        out = checks.call_graded(launcher, *args, **kwargs)
    if isinstance(out, torch.Tensor) and out.is_cuda:
        torch.cuda.synchronize()
    if watch.calls:
        raise IntegrityError(
            f"{who} called {', '.join(sorted(set(watch.calls)))} during the graded call: the "
            "result must come from your kernel, not from the PyTorch operations it replaces"
        )
    idle = [n for n in kernels if not any(launch.kernel == n for launch in rec.launches)]
    if idle:
        raise IntegrityError(
            f"{who} returned without launching {', '.join(idle)}: every graded call must run "
            "your Triton kernel (no cached or precomputed results)"
        )
    returned = out if isinstance(out, torch.Tensor) else None
    launches.verify(rec, [*args, *kwargs.values()], who, returned=returned)
    return out
