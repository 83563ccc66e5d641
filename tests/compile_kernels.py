"""Kernels that the interpreter runs right and Triton's GPU compiler refuses, beside ones it
compiles, for tests/test_gpu_compile.py. Each launcher computes the sum of each row of a float32
matrix: out[i] = x[i, :].sum()."""

import triton
import triton.language as tl
from triton.language import cdiv  # a function of triton.language's own, named directly

BLOCK = 32
SCALE = 1.0  # a plain global: the GPU compiler refuses a kernel that reads it
ONE = tl.constexpr(1.0)  # a constexpr global: allowed


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    total = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=0.0)
        total += x
    tl.store(out_ptr + row, tl.sum(total, axis=0) * ONE)


@triton.jit
def chunked_sum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    total = tl.zeros((BLOCK,), tl.float32)
    for chunk in range(cdiv(n_cols, BLOCK)):
        offsets = chunk * BLOCK + cols
        total += tl.load(x_ptr + row * n_cols + offsets, mask=offsets < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(total, axis=0))


@triton.jit
def float16_sum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    total = tl.zeros((BLOCK,), tl.float16)  # float32 after the first `+=`
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=0.0)
        total += x
    tl.store(out_ptr + row, tl.sum(total, axis=0))


@triton.jit
def reshaped_mask_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)[None, :]
    mask = cols < n_cols  # (1, BLOCK) here, (BLOCK,) inside the loop
    total = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < n_cols
        total += tl.load(x_ptr + row * n_cols + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + row, tl.sum(total, axis=0))


@triton.jit
def scaled(x):
    return x * SCALE


@triton.jit
def global_in_helper_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    total = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=0.0)
        total += scaled(x)
    tl.store(out_ptr + row, tl.sum(total, axis=0))


@triton.jit
def maybe_double_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, DOUBLE: tl.constexpr):
    """Right for either DOUBLE; with DOUBLE, the loop turns its float32 sum into float64."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    total = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=0.0)
        total += x
        if DOUBLE:
            total = total.to(tl.float64)
    tl.store(out_ptr + row, tl.sum(total.to(tl.float32), axis=0))


@triton.jit
def stub_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    # YOUR CODE HERE
    raise NotImplementedError()


# DOUBLE only for wide rows: the configuration a launch runs with decides whether it compiles.
double_when_wide = triton.heuristics({"DOUBLE": lambda args: args["n_cols"] > 64})(
    maybe_double_kernel
)
double_tuned = triton.autotune(configs=[triton.Config({"DOUBLE": True})], key=["n_cols"])(
    maybe_double_kernel
)


def launcher(kernel, **meta):
    def launch(x, out):
        kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=BLOCK, **meta)
        return out

    launch.__name__ = f"launch_{getattr(kernel, '__name__', 'kernel')}"
    return launch


def row_sum_reference(x):
    return x.sum(dim=1)
