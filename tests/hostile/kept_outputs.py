"""Outputs kept across calls: a launcher that remembers what it returned for a set of input
tensors, by their addresses, and returns it again when called with the same tensors, so that a
speed cell that times repeated calls times nothing. On a GPU the speed cells catch it by its
effects (fresh inputs between timed calls, the ceilings); kernelguard names it from the answer
cells (grader.grading.detectors), on any device. Each attack sits in 02's answer cells around the
right kernel; what the CPU gives it is not the question (a new tensor may take a freed one's
address and get a stale output): it must be flagged."""

import inspect

from tests.hostile import Attacker
from tests.test_speed_cheats import cached_across_calls

# the launcher of 02's fused-kernel cell, written to keep its outputs
INLINE = """
_kept = {}


def bias_gelu_scale(x, bias, scale, out, block_m=1, block_n=8192, num_warps=16):
    key = (x.data_ptr(), bias.data_ptr(), out.data_ptr(), scale)
    if key in _kept:
        return _kept[key]
    M, N = x.shape
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    bias_gelu_scale_kernel[grid](
        x, bias, out, M, N, x.stride(0), out.stride(0), scale, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=num_warps,
    )
    _kept[key] = out
    return out
"""
# the speed cheats' wrapper (tests/test_speed_cheats.py), defined in the add-kernel cell
WRAPPER = inspect.getsource(cached_across_calls)
WRAPPED = "bias_gelu_scale = cached_across_calls(bias_gelu_scale)\n"
FOUND = "cell fused-kernel matches kernelguard's rule"


def _wrapped_apart(m):
    nb = m.appended(m.answered(), "add-kernel", WRAPPER)
    return m.files(m.appended(nb, "fused-kernel", WRAPPED))


ATTACKERS = [
    Attacker(
        "kept-outputs-inline",
        "02_first_kernels",
        lambda m: m.files(m.appended(m.answered(), "fused-kernel", INLINE)),
        flags=frozenset({"cheating"}),
        detail=FOUND,
        total=None,
    ),
    Attacker(
        "kept-outputs-wrapper",
        "02_first_kernels",
        lambda m: m.files(m.appended(m.answered(), "fused-kernel", WRAPPER + "\n\n" + WRAPPED)),
        flags=frozenset({"cheating"}),
        detail=FOUND,
        total=None,
    ),
    Attacker(
        "kept-outputs-wrapper-apart",
        "02_first_kernels",
        _wrapped_apart,
        flags=frozenset({"cheating"}),
        detail="with the other answer cells",
        total=None,
    ),
]
