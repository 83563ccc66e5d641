"""integrity.forbid catches forbidden torch calls however they are reached; integrity.allocations
counts new storage."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as sdpa_alias

from grader.runtime import integrity


def test_forbid_catches_functions_methods_and_aliases():
    q = torch.randn(1, 2, 8, 4)
    calls = {
        "torch.softmax": lambda: torch.softmax(q, -1),
        "Tensor.softmax": lambda: q.softmax(-1),
        "F.softmax": lambda: F.softmax(q, -1),
        "matmul operator": lambda: q @ q.transpose(-1, -2),
        "an alias of sdpa": lambda: sdpa_alias(q, q, q),
        "einsum": lambda: torch.einsum("bhnd,bhmd->bhnm", q, q),
    }
    for what, call in calls.items():
        with (
            pytest.raises(integrity.IntegrityError, match="graded code called"),
            integrity.forbid(integrity.REFERENCE_OPS),
        ):
            call()
        assert isinstance(call(), torch.Tensor), f"{what} is refused outside the block"


def test_forbid_lets_other_work_through_and_says_why():
    x = torch.randn(4, 5)
    with integrity.forbid(integrity.SOFTMAX_OPS, why="stream the row in chunks"):
        y = (x - x.max(dim=1, keepdim=True).values).exp()
        out = torch.empty_like(x)
        out.copy_(y / y.sum(dim=1, keepdim=True))
    torch.testing.assert_close(out, torch.softmax(x, 1))
    with (
        pytest.raises(integrity.IntegrityError, match="stream the row in chunks"),
        integrity.forbid({"logsumexp"}, why="stream the row in chunks"),
    ):
        x.logsumexp(1)


def test_allocations_count_new_storage_once():
    x = torch.randn(100, 10)
    with integrity.allocations() as a:
        y = torch.empty(64, 64)  # 16 KiB
        y.zero_()  # in place: nothing new
        y.view(-1)[:10]  # views: nothing new
        z = x.new_empty(0)  # zero bytes
        x.t().contiguous()  # a copy: 4000 bytes
    assert a.bytes == 64 * 64 * 4 + 100 * 10 * 4
    assert z.numel() == 0


def test_allocations_see_a_large_intermediate():
    q = torch.randn(1, 1, 256, 16)
    with integrity.allocations() as a:
        s = q @ q.transpose(-1, -2)  # (256, 256): 256 KiB
        s.softmax(-1)  # another 256 KiB
    assert a.bytes >= 2 * 256 * 256 * 4
    with integrity.allocations() as b:
        pass
    assert b.bytes == 0
