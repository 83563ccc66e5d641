"""libdevice's math in Triton's interpreter.

Triton's interpreter runs no libdevice function (Triton 3.9 returns None for each), so a kernel
that is right on a GPU, such as a GELU through `libdevice.tanh`, fails on a laptop with a
TypeError deep inside the interpreter. In interpreter mode, importing grader.runtime.checks (as
every notebook's setup cell does, after device.setup) puts in libdevice's place, for the
functions the course's kernels reach for, the same math written with triton.language: the same
function where it has one, a formula elsewhere (tanh, expm1, log1p) within float32's absolute
error, and the exact result where one is defined (trunc, round, rint, isnan, isinf; pow, which
is computed in float64, with C's results at zeros, infinities and NaN). Every other libdevice
function raises NotInInterpreter, which names it and says how to check the kernel here. The GPU,
and the GPU compile check, use libdevice itself."""

import triton
import triton.language as tl

from grader.runtime import hints


@triton.jit
def tanh(x):
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)  # exp's overflow to inf gives 1, not NaN


@triton.jit
def expm1(x):
    return tl.exp(x) - 1.0


@triton.jit
def log1p(x):
    return tl.log(1.0 + x)


@triton.jit
def fma(x, y, z):
    return tl.fma(x, y, z)


@triton.jit
def div_rn(x, y):
    return tl.div_rn(x, y)


@triton.jit
def exp(x):
    return tl.exp(x)


@triton.jit
def fast_expf(x):
    return tl.exp(x)


@triton.jit
def exp2(x):
    return tl.exp2(x)


@triton.jit
def log(x):
    return tl.log(x)


@triton.jit
def fast_logf(x):
    return tl.log(x)


@triton.jit
def log2(x):
    return tl.log2(x)


@triton.jit
def sqrt(x):
    return tl.sqrt(x)


@triton.jit
def rsqrt(x):
    return tl.rsqrt(x)


@triton.jit
def erf(x):
    return tl.erf(x)


@triton.jit
def floor(x):
    return tl.floor(x)


@triton.jit
def ceil(x):
    return tl.ceil(x)


@triton.jit
def sin(x):
    return tl.sin(x)


@triton.jit
def cos(x):
    return tl.cos(x)


@triton.jit
def abs(x):
    return tl.abs(x)


@triton.jit
def isnan(x):
    return x != x


@triton.jit
def isinf(x):
    return tl.abs(x) == float("inf")


@triton.jit
def trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def round(x):  # halves away from zero; x - trunc(x) is exact
    t = trunc(x)
    return tl.where(tl.abs(x - t) >= 0.5, t + tl.where(x < 0, -1.0, 1.0), t)


@triton.jit
def rint(x):  # halves to even
    t = trunc(x)
    r = round(x)
    odd = r - 2.0 * tl.floor(0.5 * r) != 0.0
    return tl.where((tl.abs(x - t) == 0.5) & odd, t, r)


@triton.jit
def nearbyint(x):
    return rint(x)


@triton.jit
def pow(x, y):
    # in float64, so that a float32 result is rounded once; an int32 exponent too (powi)
    a, b = tl.broadcast(tl.cast(x, tl.float64), tl.cast(y, tl.float64))
    r = tl.exp2(b * tl.log2(tl.abs(a)))
    whole = tl.floor(b) == b  # infinite exponents too
    odd = whole & (b - 2.0 * tl.floor(0.5 * b) == 1.0)
    negative = a.to(tl.int64, bitcast=True) < 0  # -0.0 too
    r *= tl.where(odd & negative, -1.0, 1.0)  # not -r, which is 0 - r in Triton 3.6: +0.0
    r = tl.where((a < 0) & (a > float("-inf")) & ~whole, float("nan"), r)
    one = (b == 0.0) | (a == 1.0) | ((a == -1.0) & (tl.abs(b) == float("inf")))
    return tl.where(one, 1.0, r).to(getattr(x, "dtype", tl.float32))


# the libdevice functions this module supplies: every one it defines with @triton.jit (a
# JITFunction, or the interpreter's stand-in for one: both keep the Python function as `fn`)
SUPPLIED = tuple(n for n, f in dict(globals()).items() if callable(getattr(f, "fn", None)))


class NotInInterpreter(hints.HintedError):
    """A libdevice function that Triton's interpreter cannot run, and the course supplies none
    for; raised when a kernel calls it in interpreter mode."""

    def __init__(self, name: str):
        super().__init__(
            f"`libdevice.{name}` does not run in Triton's interpreter, so this kernel cannot run "
            "on this machine. The kernel is not wrong for using it: Triton's GPU compiler has "
            "every libdevice function, and grading runs the kernel on a GPU. The course's tests "
            "compile each kernel they launch for the GPU (sm_80 and sm_90) before running it "
            "here, so a test that stopped here found nothing the compiler refuses; to check a "
            "launch of your own that way, call `gpu_compile.check_launch(kernel, args, "
            "constexprs)` (`from grader.runtime import gpu_compile`), which raises if the "
            f"compiler refuses it. To check the results here as well, write `{name}` with "
            "triton.language (`tl.where`, `tl.exp2`, ...)."
        )

    def __repr__(self):  # the interpreter words its own error with it
        return f"{type(self).__name__}: {self}"


def _unsupplied(name: str):
    def stand_in(*args, **kwargs):
        raise NotInInterpreter(name)

    return stand_in


def supply() -> None:
    """Put these functions in libdevice's place, and NotInInterpreter's stand-ins in that of
    every other (interpreter mode only: grader.runtime.checks). Each is marked as libdevice's,
    so the GPU compile check compiles a kernel that names it with libdevice itself."""
    from triton.language.extra import cuda, libdevice

    for name, stub in vars(libdevice).copy().items():
        if not callable(stub) or getattr(stub, "__module__", None) != libdevice.__name__:
            continue
        standing = globals()[name] if name in SUPPLIED else _unsupplied(name)
        function = getattr(standing, "fn", standing)
        function.__module__, function.__qualname__ = libdevice.__name__, name
        for module in (libdevice, cuda.libdevice):
            setattr(module, name, standing)
