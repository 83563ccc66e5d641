"""07's FlashAttention forward kernel, for notebook 10: the same tiled loop and causal block
skipping, one kernel for both (`CAUSAL`), which also stores each query row's log-sum-exp, the one
statistic the backward pass needs. It holds the answers of 07's first two exercises, so it is
released with 10 only, after 07's deadline.

The log-sum-exp is kept in base 2 and in the units of the scaled scores, `qk * qk_scale` with
`qk_scale = log2(e) / sqrt(D)`: lse = m + log2(l), so that P = exp2(qk * qk_scale - lse).
Float64 inputs get float64 arithmetic throughout (`ACC`), for torch.autograd.gradcheck.

Import this module after `grader.runtime.device.setup()` (the mode is chosen before triton is
imported).
"""

from __future__ import annotations

import math

from grader.runtime import device

DEVICE = device.current()

import torch  # noqa: E402
import triton  # noqa: E402 (after the mode is chosen)
import triton.language as tl  # noqa: E402

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E)
# (BLOCK_M, BLOCK_N, num_warps, num_stages) per head dim on a GPU: 07's; one small tile in the
# interpreter, with several blocks per row.
GPU_CONFIGS = {64: (128, 64, 8, 3), 128: (128, 64, 8, 3)}
INTERPRETER_CONFIG = (32, 16, 4, 1)


@triton.jit
def _fwd_blocks(
    acc, m_i, l_i,  # the state: (BLOCK_M, HEAD_DIM), (BLOCK_M,), (BLOCK_M,)
    q,  # the query tile, (BLOCK_M, HEAD_DIM)
    k_ptrs, v_ptrs,  # (BLOCK_N, HEAD_DIM) pointers to key/value block 0 of this head
    stride_kn, stride_vn,
    offs_n,  # (BLOCK_N,) 0..BLOCK_N-1
    lo, hi,  # the key rows this call covers, lo a multiple of BLOCK_N
    N,
    key_limit,  # (BLOCK_M,) with MASKED, query row r sees the keys j < key_limit[r]
    qk_scale,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
):
    k_ptrs += lo * stride_kn
    v_ptrs += lo * stride_vn
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[:, None] < N, other=0.0)  # (BLOCK_N, D)
            qk = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N)
            qk = tl.where(cols[None, :] < key_limit[:, None], qk, float("-inf"))
            v = tl.load(v_ptrs, mask=cols[:, None] < N, other=0.0)
        else:
            k = tl.load(k_ptrs)
            qk = tl.dot(q, tl.trans(k))
            v = tl.load(v_ptrs)
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        # `+=`: Triton 3.6 adds a float64 product (gradcheck's) into an accumulator only so
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_ij
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return acc, m_i, l_i


@triton.jit
def _rows(Base, stride_b, stride_h, stride_n, off_bh, H, rows, HEAD_DIM: tl.constexpr):
    """(len(rows), HEAD_DIM) pointers to `rows` of batch off_bh // H, head off_bh % H."""
    off_b = (off_bh // H).to(tl.int64)
    off_h = (off_bh % H).to(tl.int64)
    base = Base + off_b * stride_b + off_h * stride_h
    return base + rows[:, None] * stride_n + tl.arange(0, HEAD_DIM)[None, :]


@triton.jit
def attn_fwd_lse_kernel(
    Q, K, V, Out,  # (B, H, N, HEAD_DIM), the last dimension contiguous
    Lse,  # (B, H, N) float32, contiguous: written
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_on,
    H, N,
    qk_scale,  # (1 / sqrt(HEAD_DIM)) * log2(e)
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,  # divides BLOCK_M
    CAUSAL: tl.constexpr,
    ACC: tl.constexpr,  # the state's dtype: float32, float64 for float64 inputs
):
    # -- which query tile (causal: the last first, it has the most key blocks), batch and head
    start_m = tl.program_id(0)
    if CAUSAL:
        start_m = tl.num_programs(0) - 1 - start_m
    off_bh = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    k_ptrs = _rows(K, stride_kb, stride_kh, stride_kn, off_bh, H, offs_n, HEAD_DIM)
    v_ptrs = _rows(V, stride_vb, stride_vh, stride_vn, off_bh, H, offs_n, HEAD_DIM)
    q_ptrs = _rows(Q, stride_qb, stride_qh, stride_qn, off_bh, H, offs_m, HEAD_DIM)
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), ACC)
    l_i = tl.zeros((BLOCK_M,), ACC)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), ACC)
    if CAUSAL:  # the blocks before the tile, then the diagonal ones, masked; none after
        diagonal = start_m * BLOCK_M
        own_key = offs_m + 1
        acc, m_i, l_i = _fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                    offs_n, 0, diagonal, N, own_key, qk_scale, BLOCK_N, False)
        acc, m_i, l_i = _fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                    offs_n, diagonal, tl.minimum(diagonal + BLOCK_M, N), N,
                                    own_key, qk_scale, BLOCK_N, True)
    else:  # whole key blocks, then the ragged tail
        full = (N // BLOCK_N) * BLOCK_N
        every_key = tl.zeros((BLOCK_M,), tl.int32) + N
        acc, m_i, l_i = _fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                    offs_n, 0, full, N, every_key, qk_scale, BLOCK_N, False)
        acc, m_i, l_i = _fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                    offs_n, full, N, N, every_key, qk_scale, BLOCK_N, True)
    # -- the output, and the log-sum-exp of each row: writes BLOCK_M * D of Out, BLOCK_M of Lse
    o_ptrs = _rows(Out, stride_ob, stride_oh, stride_on, off_bh, H, offs_m, HEAD_DIM)
    tl.store(o_ptrs, (acc / l_i[:, None]).to(Out.dtype.element_ty), mask=offs_m[:, None] < N)
    tl.store(Lse + off_bh * N + offs_m, m_i + tl.math.log2(l_i), mask=offs_m < N)


def accumulator(dtype: torch.dtype):
    """The Triton dtype a kernel accumulates inputs of `dtype` in: float64 for float64 (the
    gradient check), else float32."""
    return tl.float64 if dtype == torch.float64 else tl.float32


def forward_config(d: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for head dim `d` on this device."""
    if not DEVICE.is_gpu:
        return INTERPRETER_CONFIG
    return GPU_CONFIGS.get(d, (64, 64, 4, 2))


def attention_forward(q, k, v, causal=False, config=None):
    """(out, lse): softmax(q kᵀ / sqrt(D)) v for (B, H, N, D) tensors, and the log-sum-exp of each
    query row, base 2, in units of qk / sqrt(D) * log2(e): a (B, H, N) float32 tensor."""
    b, h, n, d = q.shape
    assert k.shape == v.shape == q.shape, "q, k and v must have one shape"
    assert all(t.stride(-1) == 1 for t in (q, k, v)), "the head dim must be contiguous"
    out = torch.empty_like(q)
    lse = torch.empty((b, h, n), device=q.device, dtype=torch.float32)
    block_m, block_n, num_warps, num_stages = config or forward_config(d)
    attn_fwd_lse_kernel[(triton.cdiv(n, block_m), b * h)](
        q, k, v, out, lse,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        h, n, LOG2E / math.sqrt(d),
        HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal,
        ACC=accumulator(q.dtype), num_warps=num_warps, num_stages=num_stages,
    )
    return out, lse
