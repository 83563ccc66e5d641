"""A tiny kernel, honest and dishonest launchers for it, and a problem for
grader.runtime.integrity.measure_isolated (tests/test_integrity.py)."""

import torch
import triton
import triton.language as tl

from grader.runtime import checks

_RESULTS = {}


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * factor, mask=mask)


def scale(x, factor=2.0):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), factor, BLOCK=64)
    return out


def scale_with_torch(x, factor=2.0):
    """Launches the kernel, then lets PyTorch produce the answer."""
    scale(x, factor)
    return torch.softmax(torch.zeros(1, device=x.device), dim=0) * x * factor


def scale_precomputed(x, factor=2.0):
    """Never launches: the answer was computed before the graded call, in the notebook."""
    return _RESULTS[x.data_ptr()]


def scale_launches_once(x, factor=2.0, _seen={}):  # noqa: B006 (the cache is the point)
    """Launches on the first call for an address, returns the remembered tensor afterwards."""
    key = x.data_ptr()
    if key not in _seen:
        _seen[key] = scale(x, factor)
    return _seen[key]


def scale_stub(x, factor=2.0):
    raise NotImplementedError()


class ScaleProblem:
    variants = {"default": {}}

    def __init__(self, n=1000):
        self.n = n
        self.bytes_moved = 8.0 * n

    def inputs(self, gen):
        return (checks.randn(self.n, gen=gen),)

    def reference(self, x):
        return x.double() * 2.0

    def compare(self, actual, expected):
        checks.compare(actual, expected)

    @property
    def baselines(self):
        return {"torch": ("default", lambda x: x * 2.0)}

    def flops(self, variant):
        return float(self.n)


def problem(n=1000):
    return ScaleProblem(n)


def scale_keeps_first_output(x, factor=2.0, _kept={}):  # noqa: B006 (the cache is the point)
    """Launches the kernel on every call, but returns the output of the first call at an address."""
    out = scale(x, factor)
    return _kept.setdefault(x.data_ptr(), out)
