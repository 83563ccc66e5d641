"""The integrity guards of a graded call: reference calls are seen, a result made without a
launch of the exercise's kernel is refused, a stub is explained."""

import pytest
import torch

from grader.runtime import device, integrity, precision
from tests import integrity_kernels as ik

DEV = device.current().torch_device  # where kernels read their tensors


def test_reference_watch_sees_attention_and_its_parts_only():
    q = torch.randn(2, 4, 8)
    with integrity.ReferenceWatch() as watch:
        torch.empty(3)
        torch.exp(q)
        q.transpose(-2, -1).contiguous()
    assert watch.calls == []
    with integrity.ReferenceWatch() as watch:
        torch.softmax(q, dim=-1)
        q @ q.transpose(-2, -1)
        torch.bmm(q, q.transpose(-2, -1))
        torch.nn.functional.scaled_dot_product_attention(q[None], q[None], q[None])
        torch.einsum("bij,bkj->bik", q, q)
        torch.nn.functional.softmax(q, dim=-1)
        q.softmax(-1)
    assert watch.calls == [
        "torch.softmax",
        "Tensor.matmul",
        "torch.bmm",
        "torch.scaled_dot_product_attention",
        "torch.functional.einsum",
        "torch.nn.functional.softmax",
        "Tensor.softmax",
    ]


def test_checked_call_accepts_an_honest_launcher():
    x = torch.randn(300, device=DEV)
    out = integrity.checked_call(ik.scale, x, kernels=["scale_kernel"])
    assert torch.allclose(out, 2 * x)


def test_checked_call_names_a_reference_call():
    with pytest.raises(integrity.IntegrityError, match="called torch.softmax"):
        integrity.checked_call(
            ik.scale_with_torch, torch.randn(10, device=DEV), kernels=["scale_kernel"]
        )


def test_checked_call_catches_a_result_made_without_launching():
    x = torch.randn(10, device=DEV)
    ik._RESULTS[x.data_ptr()] = 2 * x  # prepared earlier, in the notebook
    try:
        with pytest.raises(integrity.IntegrityError, match="without launching scale_kernel"):
            integrity.checked_call(ik.scale_precomputed, x, kernels=["scale_kernel"])
    finally:
        ik._RESULTS.clear()


def test_checked_call_explains_a_stub():
    with pytest.raises(AssertionError, match="still holds the exercise stub"):
        integrity.checked_call(ik.scale_stub, torch.randn(10, device=DEV), kernels=["scale_kernel"])


def test_the_source_keeps_the_decorator():
    source = precision.source(ik.scale_kernel)
    assert source.startswith("@triton.jit\ndef scale_kernel(")
    assert precision.source(ik.scale).startswith("def scale(")
