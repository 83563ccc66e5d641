"""grader.runtime.launches: honest launchers pass checks.check(kernels=...), and each way of
passing the value check without the kernel doing the work is refused with its own reason."""

import pytest
import torch
from triton.runtime import KernelInterface

from grader.runtime import checks, device, integrity, launches
from tests import launch_kernels as lk

DEV = device.current().torch_device


def _inputs(n=300):
    return lambda gen: (checks.randn(n, gen=gen),)


def _check(launcher, kernels=("double_kernel",)):
    checks.check(launcher, lambda x: 2 * x, _inputs(), kernels=kernels)


@pytest.mark.parametrize("launcher", [lk.honest, lk.in_halves], ids=lambda f: f.__name__)
def test_honest_launchers_pass(launcher):
    _check(launcher)


def test_a_block_pointer_is_refused_whatever_triton_would_do():
    """Triton 3.9 (the student kit's) has removed block pointers and the grading image's 3.6
    runs them: a kernel that makes one, here in a function it calls, is refused before it runs,
    on a laptop as on a GPU, with what to use instead."""
    with pytest.raises(launches.BlockPointerError, match="make_tensor_descriptor") as refused:
        _check(lk.block_pointers, kernels=("double_block_ptr_kernel",))
    said = "`double_block_ptr_kernel` makes a block pointer (`tl.make_block_ptr`, in `_tile`)"
    assert str(refused.value).startswith(said)


def test_a_wrapped_kernel_is_recorded_once_under_its_function_name():
    _check(lk.tuned, kernels=("double_tuned_kernel",))
    x = torch.randn(100, device=DEV)
    with launches.recording(["double_tuned_kernel"]) as rec:
        lk.tuned(x, torch.empty_like(x))
    assert [launch.kernel for launch in rec.launches] == ["double_tuned_kernel"]


@pytest.mark.parametrize(
    "launcher, reason",
    [
        (lk.torch_only, "returned without launching double_kernel"),
        (lk.dummy_launch, "300 of its 300 elements were not written by double_kernel"),
        (lk.torch_then_empty_launch, "300 of its 300 elements were not written by double_kernel"),
        (lk.kernel_then_torch, "300 elements that double_kernel wrote were changed afterwards"),
        (lk.partly_torch, "150 of its 300 elements were not written by double_kernel"),
        (lk.on_a_torch_result, "was given input 0"),
        (lk.on_a_copy, "was given input 0"),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_a_result_the_kernel_did_not_make_is_refused(launcher, reason):
    _check(lk.honest)
    with pytest.raises(launches.IntegrityError, match=reason) as caught:
        _check(launcher)
    assert f"`{launcher.__name__}`" in str(caught.value)
    assert "torch" in str(caught.value)  # the likely cause is named


def test_elements_nobody_wrote_are_left_to_the_value_check():
    with pytest.raises(checks.KernelCheckError, match="never written"):
        _check(lambda x, out: lk.launch(x, out, n=x.numel() - 10))


def test_another_kernels_name_does_not_count():
    with pytest.raises(launches.IntegrityError, match="without launching other_kernel"):
        _check(lk.honest, kernels=("other_kernel",))


def test_the_hook_is_removed_afterwards_even_on_error_and_nests():
    plain = KernelInterface.__getitem__
    x = torch.randn(64, device=DEV)
    with pytest.raises(RuntimeError, match="boom"):
        with launches.recording() as outer:
            with launches.recording() as inner:
                lk.honest(x, torch.empty_like(x))
            raise RuntimeError("boom")
    assert KernelInterface.__getitem__ is plain
    assert len(outer.launches) == len(inner.launches) == 1


def test_spans_cover_strided_and_split_tensors():
    base = torch.zeros(10, 8)
    view = base[:, ::2]
    span = launches.Span.of(view)
    assert span.stop - span.start == (9 * 8 + 3 * 2 + 1) * 4
    halves = [launches.Span.of(base[:5]), launches.Span.of(base[5:])]
    assert launches._covered(launches.Span.of(base), halves)
    assert not launches._covered(launches.Span.of(base), halves[:1])


def test_checked_call_requires_the_returned_tensor_to_be_the_kernels():
    x = torch.randn(300, device=DEV)
    out = integrity.checked_call(lk.returns_its_output, x, kernels=["double_kernel"])
    assert torch.equal(out, 2 * x)
    with pytest.raises(launches.IntegrityError, match="returned a tensor .* that no launch"):
        integrity.checked_call(lk.returns_a_torch_result, x, kernels=["double_kernel"])
