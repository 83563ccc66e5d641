"""Elementwise kernels for the checker's tests: one reference and a corpus of known-wrong ones.

Each wrong kernel is a way a kernel has been seen to pass a weak check. Every one must be
rejected by grader.runtime.checks, and the reference must be accepted (tests/test_checks.py).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask)


@triton.jit
def relu_no_store(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    x = tl.where(x > 0, x, 0.0)


@triton.jit
def relu_stub(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # YOUR CODE HERE
    raise NotImplementedError()


@triton.jit
def stub_helper(x):
    # YOUR CODE HERE
    raise NotImplementedError()


@triton.jit
def relu_calls_a_stub(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
    tl.store(out_ptr + offsets, stub_helper(x), mask=offsets < n)


@triton.jit
def relu_no_mask(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0))  # the last block writes past the end


@triton.jit
def relu_wrong_math(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x >= 0.01, x, 0.0), mask=mask)  # wrong threshold


@triton.jit
def relu_writes_zeros(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.zeros((BLOCK,), tl.float32), mask=offsets < n)


@triton.jit
def relu_in_place(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.where(x > 0, x, 0.0)
    tl.store(x_ptr + offsets, y, mask=mask)  # overwrites its input
    tl.store(out_ptr + offsets, y, mask=mask)


@triton.jit
def relu_fp16_math(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float16)  # precision dropped silently
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0).to(tl.float32), mask=mask)


def launch(kernel, block=128, programs=None):
    """A launcher in the course's convention: fn(x, out)."""

    def run(x, out):
        grid = (programs or triton.cdiv(x.numel(), block),)
        kernel[grid](x, out, x.numel(), BLOCK=block)
        return out

    run.__name__ = kernel.__name__
    return run


def relu_reference(x):
    return torch.relu(x)


def cached_by_address():
    """A launcher that remembers results by input address: right once, stale afterwards."""
    cache = {}

    def run(x, out):
        key = (x.data_ptr(), tuple(x.shape))
        if key not in cache:
            cache[key] = torch.relu(x).clone()
        out.copy_(cache[key])
        return out

    return run


def calls_reference_with_nan_tail(x, out):
    """Right except that it leaves the last element unwritten."""
    out[:-1] = torch.relu(x[:-1])
    return out


KNOWN_WRONG = {
    "never stores": launch(relu_no_store),
    "stub in kernel": launch(relu_stub),
    "store without mask": launch(relu_no_mask),
    "wrong threshold": launch(relu_wrong_math),
    "writes zeros": launch(relu_writes_zeros),
    "writes its input": launch(relu_in_place),
    "fp16 arithmetic for fp32": launch(relu_fp16_math),
    "grid too small": launch(relu_kernel, programs=1),
    "cached by address": cached_by_address(),
    "last element unwritten": calls_reference_with_nan_tail,
}
