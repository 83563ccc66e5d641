"""An upper bound for notebook 07's kernel on this device: the same tiles, loads and two `tl.dot`
per key block, with the online softmax taken out (the scores go straight to float16 and into the
product with V). It is not attention. Timed against naive eager attention beside the kernel, it
says whether the speed cell's threshold is within reach of this loop structure at all, and how
much of the gap the softmax's arithmetic accounts for.

Import after `grader.runtime.device.setup()`: it imports triton.
"""

from __future__ import annotations

from grader.runtime import device

DEVICE = device.current()

import triton  # noqa: E402 (after the mode is chosen)
import triton.language as tl  # noqa: E402


@triton.jit
def matmuls_only_kernel(
    # pointers: (B, H, N, HEAD_DIM), the last dimension contiguous
    Q,
    K,
    V,
    Out,
    # strides of batch, head and row
    stride_qb,
    stride_qh,
    stride_qn,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_ob,
    stride_oh,
    stride_on,
    # sizes: N a multiple of BLOCK_M and of BLOCK_N
    H,
    N,
    # compile-time constants
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # -- the same program layout as 07's kernel: one query tile of one head
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = (off_bh // H).to(tl.int64)
    off_h = (off_bh % H).to(tl.int64)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    offs_d = tl.arange(0, HEAD_DIM)  # (HEAD_DIM,)
    q_ptrs = Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qn
    k_ptrs = K + off_b * stride_kb + off_h * stride_kh + offs_n[:, None] * stride_kn
    v_ptrs = V + off_b * stride_vb + off_h * stride_vh + offs_n[:, None] * stride_vn
    q = tl.load(q_ptrs + offs_d[None, :])  # (BLOCK_M, HEAD_DIM)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    # -- per key block: the two products, nothing between them but a conversion
    for _ in range(0, N, BLOCK_N):
        k = tl.load(k_ptrs + offs_d[None, :])  # (BLOCK_N, HEAD_DIM)
        s = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N) float32
        v = tl.load(v_ptrs + offs_d[None, :])  # (BLOCK_N, HEAD_DIM)
        acc = tl.dot(s.to(v.dtype), v, acc)  # (BLOCK_M, HEAD_DIM)
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    o_ptrs = Out + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_on
    tl.store(o_ptrs + offs_d[None, :], acc.to(Out.dtype.element_ty))


def matmuls_only(q, k, v, out, config):
    """out = float16(q kᵀ) v per head, with 07's tiles `config` = (BLOCK_M, BLOCK_N, num_warps,
    num_stages). N must be a multiple of both blocks (no masks: nothing beyond the products)."""
    b, h, n, d = q.shape
    block_m, block_n, num_warps, num_stages = config
    assert n % block_m == 0 and n % block_n == 0, "N must be a multiple of BLOCK_M and BLOCK_N"
    assert all(t.stride(-1) == 1 for t in (q, k, v, out)), "the head dim must be contiguous"
    matmuls_only_kernel[(n // block_m, b * h)](
        q,
        k,
        v,
        out,
        *q.stride()[:3],
        *k.stride()[:3],
        *v.stride()[:3],
        *out.stride()[:3],
        h,
        n,
        HEAD_DIM=d,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out
