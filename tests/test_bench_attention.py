"""bench/attention.py imports the notebook's kernel cell (one definition of the kernel) and
runs without a GPU as far as it can: the kernel itself, in the interpreter."""

import math

import torch

from bench import attention
from grader.runtime import device


def test_reference_cell_is_the_notebooks_kernel():
    source = attention.reference_source()
    assert "def attn_fwd_kernel(" in source and "def flash_attention(" in source
    assert "GPU_CONFIGS = {" in source


def test_loaded_kernel_computes_attention(tmp_path):
    ref = attention.load_reference(tmp_path)
    assert set(ref.GPU_CONFIGS) == {64, 128}
    gen = torch.Generator().manual_seed(0)
    dev = device.current().torch_device  # the interpreter's CPU, or the GPU
    q, k, v = (torch.randn(2, 2, 45, 16, generator=gen).half().to(dev) for _ in range(3))
    for causal in (False, True):
        out = ref.flash_attention(q, k, v, torch.empty_like(q), causal=causal)
        s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(16)
        if causal:
            s = s.masked_fill(torch.ones(45, 45, dtype=torch.bool, device=dev).triu(1), -math.inf)
        want = torch.softmax(s, -1) @ v.double()
        torch.testing.assert_close(out.double(), want, rtol=1e-3, atol=1e-3)


def test_no_gpu_exit(capsys):
    if not device.current().supports("timing"):  # on a GPU, main() measures: the GPU tests do
        assert attention.main([]) == 2
        assert "needs a CUDA GPU" in capsys.readouterr().out


def test_bound_kernel_does_the_two_products_and_nothing_else():
    from bench import _attention_bound

    gen = torch.Generator().manual_seed(1)
    dev = device.current().torch_device
    q, k, v = (torch.randn(1, 2, 64, 16, generator=gen).div(4).half().to(dev) for _ in range(3))
    out = _attention_bound.matmuls_only(q, k, v, torch.empty_like(q), (32, 16, 4, 1))
    scores = (q.float() @ k.float().transpose(-1, -2)).half().float()  # float16, as the kernel
    torch.testing.assert_close(out.float(), scores @ v.float(), rtol=2e-3, atol=2e-3)
