import math

import pytest
import torch

from grader.runtime import bounds, checks, recorded, stubs
from tests import kernels


def inputs(n, dtype=torch.float32):
    return lambda gen: (checks.randn(n, gen=gen, dtype=dtype),)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("n", [1, 127, 128, 129, 1000])
def test_reference_kernel_is_accepted(n, dtype):
    checks.check(kernels.launch(kernels.relu_kernel), kernels.relu_reference, inputs(n, dtype))


@pytest.mark.parametrize("name", sorted(kernels.KNOWN_WRONG))
def test_known_wrong_kernel_is_rejected(name):
    with pytest.raises(AssertionError):
        checks.check(kernels.KNOWN_WRONG[name], kernels.relu_reference, inputs(1000))


def test_stub_in_kernel_is_one_sentence():
    with pytest.raises(stubs.StubNotFilled) as info:
        checks.check(kernels.KNOWN_WRONG["stub in kernel"], kernels.relu_reference, inputs(100))
    message = str(info.value)
    assert message.startswith("`relu_stub` still holds the exercise stub")
    assert "\n" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_stub_in_python_wrapper_is_named():
    def add(x, out):
        # YOUR CODE HERE
        raise NotImplementedError()

    with pytest.raises(stubs.StubNotFilled, match="`add` still holds the exercise stub"):
        checks.check(add, kernels.relu_reference, inputs(10))


def test_never_stored_output_is_reported_in_plain_words():
    with pytest.raises(checks.KernelCheckError, match="output untouched: your kernel never stored"):
        checks.check(kernels.KNOWN_WRONG["never stores"], kernels.relu_reference, inputs(100))


def test_partly_written_output_names_first_unwritten_index():
    with pytest.raises(checks.KernelCheckError) as info:
        checks.check(
            kernels.launch(kernels.relu_kernel, block=128, programs=1),
            kernels.relu_reference,
            inputs(300),
        )
    message = str(info.value)
    assert "172 elements were never written" in message
    assert "the first at [128]" in message
    assert "poison (never written)" in message


def test_input_mutation_is_rejected():
    with pytest.raises(checks.KernelCheckError, match="input 0 was modified"):
        checks.check(kernels.KNOWN_WRONG["writes its input"], kernels.relu_reference, inputs(100))


def test_address_cache_is_caught_on_the_second_trial():
    with pytest.raises(checks.KernelCheckError):
        checks.check(kernels.cached_by_address(), kernels.relu_reference, inputs(64), trials=2)


def test_compare_message_has_index_expected_and_actual():
    expected = torch.zeros(4, 5, dtype=torch.float64)
    actual = torch.zeros(4, 5)
    actual[2, 3] = 0.25
    with pytest.raises(checks.KernelCheckError) as info:
        checks.compare(actual, expected)
    message = str(info.value)
    assert "wrong at 1 of 20 elements" in message
    assert "max abs error 0.25 at [2, 3] (expected 0, got 0.25" in message


def test_compare_nan_must_match_reference_nan():
    expected = torch.tensor([1.0, float("nan"), float("inf")], dtype=torch.float64)
    checks.compare(torch.tensor([1.0, float("nan"), float("inf")]), expected)
    with pytest.raises(checks.KernelCheckError):
        checks.compare(torch.tensor([float("nan"), float("nan"), float("inf")]), expected)
    with pytest.raises(checks.KernelCheckError):
        checks.compare(torch.tensor([1.0, 0.0, float("inf")]), expected)
    with pytest.raises(checks.KernelCheckError):
        checks.compare(torch.tensor([1.0, float("nan"), float("-inf")]), expected)


def test_poison_left_where_nan_is_expected_still_counts_as_unwritten():
    expected = torch.tensor([float("nan"), 1.0], dtype=torch.float64)
    out = checks.poisoned(2, torch.float32)
    out[1] = 1.0
    with pytest.raises(checks.KernelCheckError, match="never written"):
        checks.compare(out, expected)


def test_shape_mismatch_is_reported():
    with pytest.raises(checks.KernelCheckError, match=r"shape \(3,\), expected \(4,\)"):
        checks.compare(torch.zeros(3), torch.zeros(4, dtype=torch.float64))


@pytest.mark.parametrize(
    "dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int32]
)
def test_poison_is_recognised_bit_for_bit(dtype):
    out = checks.poisoned((3, 5), dtype, where="cpu")
    assert checks.poison_mask(out).all()
    if dtype.is_floating_point:
        assert out.isnan().all()
        computed_nan = torch.zeros(3, dtype=dtype) / torch.zeros(3, dtype=dtype)
        assert not checks.poison_mask(computed_nan).any()


def test_tolerances_follow_dtype():
    assert checks.tolerance(torch.float16) == (1e-3, 1e-5)
    assert checks.tolerance(torch.bfloat16)[0] > checks.tolerance(torch.float16)[0]
    assert checks.tolerance(torch.int32) == (0.0, 0.0)
    # float16 rounding of a float64 value passes; an error of 1% does not
    expected = torch.linspace(1, 2, 50, dtype=torch.float64)
    checks.compare(expected.to(torch.float16), expected)
    with pytest.raises(checks.KernelCheckError):
        checks.compare((expected * 1.01).to(torch.float16), expected)


def test_inputs_are_the_same_every_run_and_fresh_at_grading(monkeypatch):
    """Each trial draws its own inputs. Outside grading a check draws the same ones on every
    call, so a visible test's verdict is the same every run; while nbgrader grades, each call
    draws fresh ones."""
    seen = []

    def spy(x, out):
        seen.append(x.clone())
        return out.copy_(torch.relu(x))

    monkeypatch.delenv(recorded.GRADING_ENV, raising=False)
    checks.check(spy, kernels.relu_reference, inputs(32), trials=2)
    checks.check(spy, kernels.relu_reference, inputs(32), trials=1)
    assert not torch.equal(seen[0], seen[1])
    assert torch.equal(seen[0], seen[2])
    monkeypatch.setenv(recorded.GRADING_ENV, recorded.GRADING)
    checks.check(spy, kernels.relu_reference, inputs(32), trials=1)
    checks.check(spy, kernels.relu_reference, inputs(32), trials=1)
    assert not torch.equal(seen[3], seen[4])
    assert not torch.equal(seen[0], seen[3])


def test_seed_reproduces_inputs_and_is_printed_on_failure():
    with pytest.raises(checks.KernelCheckError, match="seed 1234"):
        checks.check(
            kernels.KNOWN_WRONG["wrong threshold"],
            kernels.relu_reference,
            inputs(1000),
            seed=1234,
            trials=1,
        )


def test_returning_candidates_are_checked_for_dtype():
    wrong_dtype = "dtype torch.float64, expected torch.float32"
    with pytest.raises(checks.KernelCheckError, match=wrong_dtype):
        checks.check(
            lambda x: torch.relu(x).double(), kernels.relu_reference, inputs(8), writes_out=False
        )
    checks.check(lambda x: torch.relu(x), kernels.relu_reference, inputs(8), writes_out=False)


def test_writes_past_the_end_of_the_output_are_caught():
    # in the interpreter, grader.runtime.bounds sees the store first and names the argument
    if checks.device.current().is_gpu:
        caught = (checks.KernelCheckError, "wrote outside `out`: 28 elements past")
    else:
        caught = (bounds.OutOfBoundsError, "a store writes 28 elements past the end of `out_ptr`")
    with pytest.raises(caught[0], match=caught[1]):
        checks.check(
            kernels.launch(kernels.relu_no_mask, block=128), kernels.relu_reference, inputs(100)
        )


@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 3, 4), (1, 7, 1, 3)])
def test_unravel_is_torchs_unravel_index(shape):
    for flat in range(math.prod(shape)):
        want = (
            tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape)) if shape else ()
        )
        assert checks.unravel(flat, shape) == tuple(int(i) for i in want)


def test_a_float8_input_is_compared_bit_for_bit():
    """Float8 inputs (09's e4m3 matmul) are checked unchanged like any other input, though torch
    has no nan_to_num for them."""

    def make(gen):
        return (checks.randn((4, 8), gen=gen).to(torch.float8_e4m3fn),)

    def reference(x):
        return x.sum(dim=1)

    checks.check(lambda x: x.float().sum(dim=1), reference, make, writes_out=False,
                 out_dtype=torch.float32)  # fmt: skip

    def mutates(x):
        total = x.float().sum(dim=1)
        x.copy_(-x.float())
        return total

    with pytest.raises(checks.KernelCheckError, match="input 0 was modified"):
        checks.check(mutates, reference, make, writes_out=False, out_dtype=torch.float32)
