"""Hints that name a cause the output alone would blame on another (grader.runtime.hints): the
right result rounded to float16 at the store, not float16 arithmetic; a running sum not rescaled
when its maximum grows, not a wrong reduction; a merge that adds sums without their factors; the
operation whose dtype or shapes Triton's type checks refuse. Each is shown to appear where its
evidence holds and to stay silent for the cause it is told from."""

import math

import pytest
import torch
import triton
import triton.language as tl

from grader.runtime import checks, device, hints, stubs


def gen(seed=0):
    return checks.generator(seed, where="cpu")


def patterns(error) -> list[str]:
    assert all(f"[{h.pattern}]" in str(error) for h in error.hints), "every hint is rendered"
    return [h.pattern for h in error.hints]


def rejected(candidate, reference, make_inputs, **options):
    with pytest.raises(AssertionError) as caught:
        checks.check(candidate, reference, make_inputs, **options)
    return caught.value


# -- float16 at the store, or float16 arithmetic ---------------------------------------------------


def matrices(g):
    return checks.randn((37, 71), gen=g), checks.randn((71, 53), gen=g)


def matmul_stored_as_float16(a, b, out):
    """float32 arithmetic, rounded to float16 on the way into the float32 output."""
    out.copy_((a @ b).half())


def matmul_of_float16_inputs(a, b, out):
    out.copy_((a.half().float() @ b.half().float()).half())


def relu_in_float16(x, out):
    """Exact in float16: its output is the right result rounded to float16, as a store's is."""
    out.copy_(torch.relu(x.half()))


def test_the_right_result_rounded_once_is_the_stores_dtype():
    error = rejected(matmul_stored_as_float16, torch.matmul, matrices)
    assert patterns(error) == ["store-dtype"], str(error)
    assert "c_ptr.dtype.element_ty" in str(error)


def test_float16_arithmetic_is_not_blamed_on_the_store():
    error = rejected(matmul_of_float16_inputs, torch.matmul, matrices)
    assert patterns(error) == ["low-precision"], str(error)


def test_an_exact_operation_in_float16_is_told_from_the_store_by_float16_inputs():
    """relu's output is float16's rounding of the right one, but it is right on float16 inputs:
    the kernel converted its inputs, which a second run with inputs rounded to float16 shows."""
    error = rejected(relu_in_float16, torch.relu, lambda g: (checks.randn(1000, gen=g),))
    assert patterns(error) == ["low-precision"], str(error)
    assert "right when the inputs are float16 numbers" in str(error)


def test_float16_numbers_with_more_than_one_rounding_are_not_the_store():
    expected = checks.randn((64, 64), gen=gen(), scale=3.0).double()
    noisy = (expected * (1 + 4e-4)).half().float()  # float16 numbers, not the nearest ones
    with pytest.raises(checks.KernelCheckError) as caught:
        checks.compare(noisy, expected)
    assert patterns(caught.value) == ["low-precision"]


# -- a running sum not rescaled --------------------------------------------------------------------


def rows(g):
    return (checks.randn((6, 300), gen=g, scale=3.0),)


def softmax(x):
    return torch.softmax(x, dim=-1)


def chunked_softmax(x, out, rescale=True, chunk=64):
    m = torch.full((x.shape[0], 1), -math.inf, dtype=torch.float64)
    d = torch.zeros((x.shape[0], 1), dtype=torch.float64)
    for s in range(0, x.shape[1], chunk):
        part = x[:, s : s + chunk].double()
        grown = torch.maximum(m, part.amax(dim=1, keepdim=True))
        d = (d * torch.exp(m - grown) if rescale else d) + torch.exp(part - grown).sum(1, True)
        m = grown
    out.copy_(torch.exp(x.double() - m) / d)


def never_rescaled(x, out):
    chunked_softmax(x, out, rescale=False)


def padded_with_zero(x, out):
    """A softmax whose sum counts a lane of 0 too, for rows whose maximum is 0: off by a factor
    per row, sorted or not."""
    e = torch.exp(x.double() - x.double().amax(dim=1, keepdim=True))
    out.copy_(e / (e.sum(dim=1, keepdim=True) + 1.0))


def test_a_sum_right_on_rows_sorted_largest_first_is_not_rescaled():
    error = rejected(never_rescaled, softmax, rows)
    assert patterns(error) == ["rescale"], str(error)
    assert "e^(m - m')" in str(error)


def test_a_factor_per_row_that_sorting_keeps_is_the_normaliser():
    error = rejected(padded_with_zero, softmax, rows)
    assert patterns(error) == ["row-normalisation"], str(error)


def states(g, rows=200):
    a, b = (torch.randn(rows, 16, generator=g, dtype=torch.float64) * 3 for _ in range(2))
    m1, m2 = a.amax(dim=1), b.amax(dim=1)
    d1 = torch.exp(a - m1[:, None]).sum(dim=1)
    d2 = torch.exp(b - m2[:, None]).sum(dim=1)
    m = torch.maximum(m1, m2)
    return m1, d1, m2, d2, m, d1 * torch.exp(m1 - m) + d2 * torch.exp(m2 - m)


@pytest.mark.parametrize(
    "formed, says",
    [
        (lambda m1, d1, m2, d2, m: d1 + d2, "`d` is d1 + d2: d1 and d2 lack their factor"),
        (
            lambda m1, d1, m2, d2, m: d1 * torch.exp(m1 - m) + d2,
            "`d` is d1·e^(m1 - m) + d2: d2 lacks its factor",
        ),
    ],
    ids=["neither side", "the second side"],
)
def test_a_merge_that_adds_a_sum_without_its_factor_is_named(formed, says):
    m1, d1, m2, d2, m, want = states(torch.Generator().manual_seed(0))
    d = formed(m1, d1, m2, d2, m).float()
    found = hints.unrescaled_merge(d, m, [(m1, d1), (m2, d2)])
    assert found is not None and found.pattern == "rescale" and says in found.evidence
    with pytest.raises(checks.KernelCheckError) as caught:
        checks.compare(d, want, name="d", hint=found)
    assert patterns(caught.value) == ["rescale"]


def test_a_merge_wrong_in_another_way_gets_no_rescale_hint():
    m1, d1, m2, d2, m, want = states(torch.Generator().manual_seed(1))
    assert hints.unrescaled_merge(want * 2, m, [(m1, d1), (m2, d2)]) is None
    assert hints.unrescaled_merge(want, m, [(m1, d1), (m2, d2)]) is None  # right: nothing to say


# -- errors of Triton's type checks ----------------------------------------------------------------


@triton.jit
def silu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * tl.sigmoid(x), mask=mask)


@triton.jit
def copy_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[:, None] < N)  # the slip: [:, None] twice
    x = tl.load(x_ptr + offs_m[:, None] * N + offs_n[None, :], mask=mask)
    tl.store(out_ptr + offs_m[:, None] * N + offs_n[None, :], x, mask=mask)


def silu(x, out):
    silu_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)


def copy(x, out):
    M, N = x.shape
    copy_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 32))](x, out, M, N, BLOCK_M=16, BLOCK_N=32)


def float16_vector(g):
    return (checks.randn(1000, gen=g, dtype=torch.float16),)


def matrix(g):
    return (checks.randn((40, 50), gen=g),)


def test_a_float16_operand_of_a_math_function_names_the_function():
    error = rejected(silu, lambda x: x * torch.sigmoid(x), float16_vector, kernels=["silu_kernel"])
    assert patterns(error) == ["operand-dtype"], str(error)
    assert "`tl.sigmoid` takes float32 or float64 and was given float16" in str(error)
    assert ".to(tl.float32)" in str(error)


def test_shapes_that_do_not_broadcast_name_the_line():
    error = rejected(copy, lambda x: x, matrix, kernels=["copy_kernel"])
    assert patterns(error) == ["shape"], str(error)
    assert "`mask = (offs_m[:, None] < M) & (offs_n[:, None] < N)`" in str(error)


@pytest.mark.skipif(device.current().is_gpu, reason="the interpreter's error")
@pytest.mark.parametrize(
    "launch, inputs, pattern, names",
    [(silu, float16_vector, "operand-dtype", "`tl.sigmoid`"), (copy, matrix, "shape", "mask =")],
    ids=["dtype", "shape"],
)
def test_the_interpreters_error_in_a_graded_call_names_the_operation(
    launch, inputs, pattern, names
):
    """Outside a recorded launch nothing compiles the kernel: the interpreter's own error,
    wrapped twice around Triton's, gets the same hint."""
    (x,) = inputs(gen())
    with pytest.raises(checks.KernelCheckError) as caught:
        checks.call_graded(launch, x, torch.empty_like(x))
    assert patterns(caught.value) == [pattern] and names in str(caught.value)
    assert type(caught.value.__cause__).__name__ == "InterpreterError"


class CompilationError(Exception):
    """Stands for triton.CompilationError, which a GPU raises at the launch."""


def test_the_gpu_compilers_error_names_the_operation():
    message = """at 5:12:
def silu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = x * tl.sigmoid(x)
            ^
in the function called there:
Expected dtype ['fp32', 'fp64'] but got fp16"""
    found = hints.raised(CompilationError(message))
    assert found is not None and found.pattern == "operand-dtype"
    assert found.evidence.startswith("`tl.sigmoid` takes float32 or float64")
    too_large = "at 1:8:\n    z = x + b[:, None]\n        ^\nnumel (67108864) exceeds triton "
    found = hints.raised(CompilationError(too_large + "maximum tensor numel (1048576)"))
    assert found is not None and found.pattern == "shape"
    assert "`z = x + b[:, None]` broadcast to a block of 67108864 elements" in found.evidence
    assert hints.raised(CompilationError("at 1:0:\nx\n^\nunsupported AST node")) is None
    assert hints.raised(ValueError("Expected dtype ['fp32'] but got fp16")) is None  # not Triton's


# -- a stub in another exercise --------------------------------------------------------------------


def fits(config, itemsize, limit):
    raise NotImplementedError()


def test_a_stub_called_by_another_exercises_test_names_its_exercise():
    with pytest.raises(stubs.StubNotFilled) as caught:
        checks.call_graded(fits, None, 2, 1024, what="Exercise 1's `fits`")
    assert str(caught.value).startswith("Exercise 1's `fits` still holds the exercise stub")
    with pytest.raises(stubs.StubNotFilled) as caught:  # `what` names another function
        checks.call_graded(fits, None, 2, 1024, what="`config_space`")
    assert str(caught.value).startswith("`fits` still holds the exercise stub")
