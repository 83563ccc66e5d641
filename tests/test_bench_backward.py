"""bench/backward.py imports notebook 10's cells (one definition of the kernels, their launchers
and tiles, and of the float32 check of a timed call) and runs without a GPU as far as it can:
the backward itself, in the interpreter, against the float64 gradients of eager attention."""

import pytest
import torch

from bench import backward
from grader.runtime import checks, device


def test_loaded_cells_compute_the_gradients():
    ref = backward.load()
    assert set(ref.GPU_DKDV_CONFIGS) == set(ref.GPU_DQ_CONFIGS) == set(backward.HEAD_DIMS)
    gen = checks.generator(0, where=device.current().torch_device)
    q, k, v, do = (checks.randn((2, 2, 37, 16), gen=gen, dtype=torch.float16) for _ in "qkvo")
    for causal in (False, True):
        o, lse = ref.attention_forward(q, k, v, causal)
        out = torch.empty((3, *q.shape), device=q.device)
        grads = ref.attention_gradients(q, k, v, o, do, lse, out, causal)
        want = ref.attention_backward_reference(*(t.double() for t in (q, k, v, do)), causal)
        # from the kernels' own O and lse: their formula, and the gradients themselves
        ref.matches_formula(grads, q, k, v, o, do, lse, causal)
        with pytest.raises(checks.KernelCheckError, match="dQ, dK, dV"):  # other inputs' result
            ref.matches_formula(grads.roll(1, dims=-2), q, k, v, o, do, lse, causal)
        torch.testing.assert_close(grads.double(), torch.stack(want[:3]), rtol=1e-2, atol=1e-2)


def test_no_gpu_exit(capsys):
    if not device.current().supports("timing"):  # on a GPU, main() measures: the GPU tests do
        assert backward.main([]) == 2
        assert "measures on a CUDA GPU" in capsys.readouterr().err


def test_the_one_kernel_form_matches_the_two_kernels_and_its_check_can_fail(monkeypatch, capsys):
    assert backward.check_atomic() == 0, capsys.readouterr().out
    from bench import _backward_atomic as atomic

    right = atomic.attention_gradients_atomic

    def dq_short_of_one_key_block(*args, **kwargs):  # the first row of dQ off by half
        out = right(*args, **kwargs)
        out[0, ..., :1, :] *= 0.5
        return out

    monkeypatch.setattr(atomic, "attention_gradients_atomic", dq_short_of_one_key_block)
    monkeypatch.setattr(backward, "CHECK_SHAPES_INTERPRETER", backward.CHECK_SHAPES_INTERPRETER[:1])
    assert backward.check_atomic() == 1
    assert "FAILED" in capsys.readouterr().out
