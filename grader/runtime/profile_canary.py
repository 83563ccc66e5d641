"""The profiler's canary (grader.runtime.profile.canary): a vector add of N float32 elements,
whose DRAM traffic is known (2*N*4 bytes read; N*4 bytes stored). It imports Triton, so it is
imported only where the mode is already chosen: in the profiled child process, after
`device.setup()`, or in a test."""

import torch
import triton
import triton.language as tl

from grader.runtime import device

BLOCK = 1024


@triton.jit
def profile_canary_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    profile_canary_add[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out


def problem(n: int):
    """The call the canary profiles: x + y for x = 0, 1, ..., n - 1 and y = 2x (so the sum is
    3x, for a test to check), made on this mode's device."""
    where = device.current().torch_device
    x = torch.arange(n, dtype=torch.float32, device=where)
    y = 2 * x
    return lambda: add(x, y)
