"""grader.runtime.bounds: in the interpreter, a load or store outside a kernel's tensor arguments
fails the check that launched it, naming the argument, how far, the line and the fix; masked
lanes, aliasing arguments and data that happens to hold the guard's bytes do not."""

import pytest
import torch
import triton

from grader.runtime import bounds, checks, launches
from tests import bounds_kernels as k

pytestmark = pytest.mark.skipif(checks.device.current().is_gpu, reason="interpreter mode only")


def run(kernel, x, out, n=None, block=256, grid=None):
    n = x.numel() if n is None else n
    with launches.recording():
        kernel[grid or (triton.cdiv(n, block),)](x, out, n, BLOCK=block)


def test_masked_loads_and_stores_pass_and_write_their_output():
    x = torch.randn(1000)
    out = torch.zeros(1000)
    run(k.copy_masked, x, out)
    assert torch.equal(out, x)


def test_an_unmasked_load_is_reported_with_its_argument_distance_line_and_fix():
    x = torch.randn(1000)
    out = torch.zeros(1000)
    with pytest.raises(bounds.OutOfBoundsError) as caught:
        run(k.copy_unmasked_load, x, out)
    message = str(caught.value)
    assert message.startswith("`copy_unmasked_load` goes outside its tensors: a load at line")
    assert "24 elements past the end of `x_ptr` (float32[1000])" in message
    assert "`x = tl.load(x_ptr + offsets)`" in message
    assert "Does the load past n carry a mask?" in message
    assert "Likely cause [missing-mask]" in message
    assert torch.equal(out, x)  # the masked store still wrote, and came back


def test_an_unmasked_store_is_reported_and_the_memory_after_it_is_untouched():
    buffer = torch.full((1100,), 7.0)
    out = buffer[:1000]
    with pytest.raises(bounds.OutOfBoundsError, match="a store writes 24 elements past the end"):
        run(k.copy_unmasked_store, torch.randn(1000), out)
    assert bool((buffer[1000:] == 7.0).all())  # the store went to the guard, not the neighbour


def test_reads_before_the_start_through_a_helper_and_scalar_loads_are_reported():
    with pytest.raises(bounds.OutOfBoundsError, match="1 element before the start of `x_ptr`"):
        run(k.shift_left, torch.randn(1000), torch.zeros(1000))
    x = torch.randn(4, 32)
    with pytest.raises(bounds.OutOfBoundsError, match=r"8 elements past the end of `x_ptr`"):
        with launches.recording():
            k.rows_through_helper[(4,)](x, torch.zeros(4, 32), 32, 32, BLOCK=64)
    with pytest.raises(bounds.OutOfBoundsError, match="1 element past the end of `x_ptr`"):
        run(k.first_element, torch.randn(100), torch.zeros(100), block=128, grid=(1,))


def test_a_neighbouring_tensor_does_not_hide_a_read_past_the_end():
    """x and y side by side in one allocation: x's overshoot would land in y's memory."""
    both = torch.randn(2000)
    x, y = both[:1000], both[1000:]
    with pytest.raises(bounds.OutOfBoundsError, match="past the end of `x_ptr`"):
        run(k.copy_unmasked_load, x, y)


def test_data_that_holds_the_guards_bytes_and_aliasing_arguments_pass():
    x = torch.full((1000,), 0xA5, dtype=torch.uint8)
    out = torch.zeros(1000, dtype=torch.uint8)
    run(k.copy_masked, x, out)
    assert torch.equal(out, x)
    inplace = torch.arange(1000, dtype=torch.float32)
    run(k.copy_masked, inplace, inplace)  # one tensor given twice
    assert torch.equal(inplace, torch.arange(1000, dtype=torch.float32))


def test_checks_check_reports_it_as_the_verdict():
    def copy(x, out):
        k.copy_unmasked_load[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)

    inputs = lambda gen: (checks.randn(1000, gen=gen),)  # noqa: E731
    with pytest.raises(bounds.OutOfBoundsError, match="past the end of `x_ptr`"):
        checks.check(copy, lambda x: x, inputs, kernels=["copy_unmasked_load"])
