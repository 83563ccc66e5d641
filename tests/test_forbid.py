"""integrity.forbid catches forbidden torch calls however they are reached."""

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
