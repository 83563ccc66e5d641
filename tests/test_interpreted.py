"""libdevice's math in Triton's interpreter (grader.runtime.interpreted): a kernel written with
libdevice, right on a GPU, is right on a laptop too, instead of failing inside the interpreter;
one that calls a function the interpreter lacks says so, in one message. On a GPU the GELU test
and the exact functions' tests run with libdevice itself, which shows that the interpreter's
stand-ins give what the GPU gives."""

import math

import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from grader.runtime import checks, device, gpu_compile, interpreted  # checks supplies

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
    assert set(interpreted.SUPPLIED) == set(TORCH) | set(EXACT) | {"fma", "div_rn", "pow"}
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


def _round_half_away(x):
    return torch.copysign(torch.floor(x.abs() + 0.5), x)  # exact in float64 for float32's values


EXACT = {
    "abs": torch.abs, "isnan": torch.isnan, "isinf": torch.isinf, "trunc": torch.trunc,
    "round": _round_half_away, "rint": torch.round, "nearbyint": torch.round,
}  # fmt: skip
HALVES = [0.5, 1.5, 2.5, 3.5, 0.49999997, 0.50000006, 2.0**23 - 0.5, 2.0**23 + 1]


@triton.jit
def _exact(x_ptr, out_ptr, n, NAME: tl.constexpr, BLOCK: tl.constexpr):
    """Each function called by its name, as a kernel calls it: a GPU compiler resolves libdevice's
    functions where they are named, not through a constexpr argument."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    if NAME == "abs":
        y = libdevice.abs(x)
    elif NAME == "isnan":
        y = libdevice.isnan(x)
    elif NAME == "isinf":
        y = libdevice.isinf(x)
    elif NAME == "trunc":
        y = libdevice.trunc(x)
    elif NAME == "round":
        y = libdevice.round(x)
    elif NAME == "rint":
        y = libdevice.rint(x)
    else:
        tl.static_assert(NAME == "nearbyint")
        y = libdevice.nearbyint(x)
    tl.store(out_ptr + offs, y, mask=mask)


@pytest.mark.parametrize("name", sorted(EXACT))
def test_an_exact_libdevice_function_gives_exactly_what_torch_does(name):
    """Bit for bit, signed zeros included, at halves, infinities and NaN: in the interpreter
    through grader.runtime.interpreted, on a GPU through libdevice itself."""
    specials = [0.0, 1.0, 7.0, 1e30, math.inf, math.nan, *HALVES]
    x = torch.tensor([*specials, *(-v for v in specials)], device=DEVICE.torch_device)
    x = torch.cat([x, torch.randn(1000, device=DEVICE.torch_device) * 10])
    want = EXACT[name](x.double()).to(torch.bool if name.startswith("is") else x.dtype)
    out = torch.empty_like(want)
    _exact[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), NAME=name, BLOCK=256)
    torch.testing.assert_close(out, want, rtol=0, atol=0, equal_nan=True)
    zeros = want == 0
    assert torch.equal(out[zeros].signbit(), want[zeros].signbit()), f"{name}: signed zeros"


@triton.jit
def _pow(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, libdevice.pow(x, y), mask=mask)


@triton.jit
def _cube(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, libdevice.pow(x, 3), mask=mask)  # an int32 exponent: powi


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pow_gives_what_c_does_at_every_edge_and_its_value_elsewhere(dtype):
    """C's pow (which torch.pow follows) at zeros of either sign, infinities, NaN and negative
    bases; elsewhere within the dtype's tolerance of the float64 value."""
    edges = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, math.inf, -math.inf, math.nan, -8.0]
    exponents = [0.0, -0.0, 1.0, 2.0, 3.0, -3.0, 0.5, -0.5, 1 / 3, math.inf, -math.inf, math.nan]
    pairs = [(a, b) for a in edges for b in exponents]
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(2000, generator=gen, dtype=torch.float64) * 20
    y = torch.randn(2000, generator=gen, dtype=torch.float64) * 6
    x = torch.cat([torch.tensor([a for a, _ in pairs], dtype=torch.float64), x, -x[:500]])
    y = torch.cat([torch.tensor([b for _, b in pairs], dtype=torch.float64), y, y[:500].round()])
    x, y = (t.to(dtype).to(DEVICE.torch_device) for t in (x, y))
    out = torch.empty_like(x)
    _pow[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    want = torch.pow(x.double(), y.double())
    rtol, atol = checks.tolerance(dtype)
    torch.testing.assert_close(out, want.to(dtype), rtol=rtol, atol=atol, equal_nan=True)
    zeros = want == 0
    assert torch.equal(out[zeros].signbit(), want[zeros].signbit()), "signed zeros"
    cubes = torch.empty_like(x)
    _cube[(triton.cdiv(x.numel(), 256),)](x, cubes, x.numel(), BLOCK=256)
    want = (x.double() ** 3).to(dtype)
    torch.testing.assert_close(cubes, want, rtol=rtol, atol=atol, equal_nan=True)


@triton.jit
def _arctangent(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, libdevice.atan(tl.load(x_ptr + offs, mask=mask)), mask=mask)


def arctangent(x, out):
    _arctangent[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)


@triton.jit
def _imported(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, atan(x) + tanh(x), mask=mask)  # noqa: F821 (imported below)


@pytest.mark.skipif(DEVICE.is_gpu, reason="a GPU runs every libdevice function")
def test_a_function_the_interpreter_lacks_says_so_in_one_message():
    """`libdevice.atan` has no stand-in: a test of the kernel fails with NotInInterpreter, which
    names it and says the GPU has it, not with a TypeError from inside the interpreter; the GPU
    compile check, which the message points to, compiles the kernel with libdevice itself."""
    x = torch.randn(100)
    with pytest.raises(interpreted.NotInInterpreter) as failed:
        checks.check(arctangent, torch.atan, lambda gen: (checks.randn(100, gen=gen),))
    said = str(failed.value)
    assert said.startswith("`libdevice.atan` does not run in Triton's interpreter")
    assert "GPU compiler has every libdevice function" in said and "check_launch" in said
    for kernel in (_arctangent, _imported):  # by libdevice's name, or imported from it
        assert gpu_compile.check_launch(kernel, (x, x.clone(), 100), {"BLOCK": 256}) is None
    with pytest.raises(triton.runtime.errors.InterpreterError, match="NotInInterpreter: `libdev"):
        arctangent(x, torch.empty_like(x))  # launched outside a test: the interpreter's wrapping


@pytest.mark.skipif(DEVICE.is_gpu, reason="a GPU runs every libdevice function")
def test_every_libdevice_function_is_supplied_or_says_why_not():
    from triton.language.extra import cuda

    for module in (libdevice, cuda.libdevice):
        for name, value in vars(module).items():
            if callable(value) and getattr(value, "__module__", "") == libdevice.__name__:
                if name not in interpreted.SUPPLIED:
                    with pytest.raises(interpreted.NotInInterpreter, match=f"libdevice.{name}`"):
                        value(1.0)
    assert cuda.libdevice.tanh is interpreted.tanh


from triton.language.extra.libdevice import atan, tanh  # noqa: E402 (once checks supplied them)
