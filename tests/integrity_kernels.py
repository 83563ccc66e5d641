"""A tiny kernel and honest and dishonest launchers for it (tests/test_integrity.py)."""

import torch
import triton
import triton.language as tl

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


def scale_stub(x, factor=2.0):
    raise NotImplementedError()
