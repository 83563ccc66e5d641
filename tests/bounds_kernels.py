"""Kernels for tests/test_bounds.py: loads and stores inside and outside their tensors."""

import triton
import triton.language as tl


@triton.jit
def copy_masked(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def copy_unmasked_load(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, x, mask=offsets < n)


@triton.jit
def copy_unmasked_store(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n, other=0))


@triton.jit
def shift_left(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = x[i - 1], reading one element before x where i = 0."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets - 1, mask=mask), mask=mask)


@triton.jit
def _load_row(row_ptr, cols, n_cols):
    return tl.load(row_ptr + cols, mask=cols < n_cols + 8)  # 8 columns too many


@triton.jit
def rows_through_helper(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = _load_row(x_ptr + row * stride, cols, n_cols)
    tl.store(out_ptr + row * stride + cols, x, mask=cols < n_cols)


@triton.jit
def first_element(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """A scalar load at x[n]: one past the end."""
    value = tl.load(x_ptr + n)
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.zeros((BLOCK,), tl.float32) + value, mask=offsets < n)
