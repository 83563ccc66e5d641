"""A tiny kernel and launchers for it, honest and not, for tests/test_launches.py: each dishonest
one is a way to pass a value check without the kernel doing the work."""

import torch
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * factor, mask=mask)


@triton.heuristics({"BLOCK": lambda args: 32 if args["n"] < 200 else 64})
@triton.jit
def double_tuned_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * factor, mask=mask)


@triton.jit
def _tile(base, n, start, BLOCK: tl.constexpr):
    return tl.make_block_ptr(base, (n,), (1,), (start,), (BLOCK,), (0,))


@triton.jit
def double_block_ptr_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    """Block pointers, made in a function it calls (Triton 3.6 runs it; 3.9 has none)."""
    start = tl.program_id(0) * BLOCK
    x = tl.load(_tile(x_ptr, n, start, BLOCK), boundary_check=(0,))
    tl.store(_tile(out_ptr, n, start, BLOCK), x * factor, boundary_check=(0,))


def launch(x, out, n=None, factor=2.0):
    n = x.numel() if n is None else n
    double_kernel[(triton.cdiv(max(n, 1), 64),)](x, out, n, factor, BLOCK=64)
    return out


def honest(x, out):
    return launch(x, out)


def in_halves(x, out):
    """Two launches, each on views of one half: legitimate."""
    half = x.numel() // 2
    launch(x[:half], out[:half])
    launch(x[half:], out[half:])
    return out


def tuned(x, out):
    n = x.numel()
    double_tuned_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, 2.0)
    return out


def block_pointers(x, out):
    double_block_ptr_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), 2.0, BLOCK=64)
    return out


def torch_only(x, out):
    return out.copy_(x * 2)


def dummy_launch(x, out):
    """Launches the kernel on a placeholder, computes the result with torch."""
    placeholder = torch.zeros(4, device=x.device, dtype=x.dtype)
    launch(placeholder, torch.empty_like(placeholder))
    return out.copy_(x * 2)


def torch_then_empty_launch(x, out):
    """Writes the result with torch, then launches the kernel over nothing."""
    out.copy_(x * 2)
    return launch(x, out, n=0)


def kernel_then_torch(x, out):
    """The kernel writes a wrong result that torch then replaces."""
    launch(x, out, factor=0.5)
    return out.copy_(x * 2)


def partly_torch(x, out):
    """The kernel writes the first half; torch the second."""
    half = x.numel() // 2
    launch(x[:half], out[:half])
    out[half:] = x[half:] * 2
    return out


def on_a_torch_result(x, out):
    """torch computes the result into a scratch tensor; the kernel only copies it out."""
    return launch(x * 2, out, factor=1.0)


def on_a_copy(x, out):
    return launch(x.clone(), out)


def returns_its_output(x):
    out = torch.empty_like(x)
    return launch(x, out)


def returns_a_torch_result(x):
    """Launches the kernel on a placeholder and returns what torch computed."""
    dummy_launch(x, torch.empty_like(x))
    return x * 2
