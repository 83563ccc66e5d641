"""libdevice's math in Triton's interpreter (grader.runtime.interpreted): a kernel written with
libdevice, right on a GPU, is right on a laptop too, instead of failing inside the interpreter.
On a GPU the GELU test runs with libdevice itself."""

import math

import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from grader.runtime import checks, device, interpreted  # noqa: F401 (checks supplies)

DEVICE = device.setup()

TORCH = {
    "tanh": torch.tanh, "expm1": torch.expm1, "log1p": torch.log1p, "exp": torch.exp,
    "fast_expf": torch.exp, "exp2": torch.exp2, "log": torch.log, "fast_logf": torch.log,
    "log2": torch.log2, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "erf": torch.erf,
    "floor": torch.floor, "ceil": torch.ceil, "sin": torch.sin, "cos": torch.cos,
}  # fmt: skip


@triton.jit
def _each(x_ptr, out_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    tl.store(out_ptr + offs, FN(x), mask=mask)


@pytest.mark.skipif(DEVICE.is_gpu, reason="a GPU runs libdevice itself, within its own ulp bounds")
@pytest.mark.parametrize("name", sorted(TORCH))
def test_a_libdevice_function_computes_what_torch_does(name):
    positive = name in ("log", "fast_logf", "log2", "sqrt", "rsqrt", "log1p")
    x = torch.linspace(0.01 if positive else -30.0, 30.0, 1001)
    out = torch.full_like(x, math.nan)
    fn = getattr(libdevice, name)  # as a kernel reads it: `libdevice.tanh`
    _each[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), FN=fn, BLOCK=256)
    torch.testing.assert_close(out, TORCH[name](x), rtol=2e-6, atol=2e-6)


@pytest.mark.skipif(DEVICE.is_gpu, reason="a GPU runs libdevice itself")
def test_every_supplied_function_is_tested_and_fma_and_div_rn_take_more_arguments():
    assert set(interpreted.SUPPLIED) == set(TORCH) | {"fma", "div_rn"}
    for name in interpreted.SUPPLIED:
        assert getattr(libdevice, name) is getattr(interpreted, name)


@triton.jit
def _gelu_tanh(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    u = 0.7978845608028654 * libdevice.fma(0.044715 * x * x, x, x)  # sqrt(2/pi) (x + 0.044715x^3)
    tl.store(out_ptr + offs, 0.5 * x * (1.0 + libdevice.tanh(u)), mask=mask)


def test_a_gelu_through_libdevice_tanh_is_right_in_the_interpreter():
    """02's GELU as a student may write it from the GPU's math library (issue: it failed here
    with a TypeError from inside the interpreter, and passed on a GPU)."""
    x = torch.randn(5003, device=DEVICE.torch_device) * 4
    out = torch.empty_like(x)
    _gelu_tanh[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    want = torch.nn.functional.gelu(x.double(), approximate="tanh").float()
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
