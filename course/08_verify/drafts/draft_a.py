"""FlashAttention forward pass in Triton.

Computes softmax(Q K^T / sqrt(d)) V for (batch, heads, seq_len, head_dim) inputs without ever
materializing the seq_len x seq_len score matrix: each program owns BLOCK_M query rows, streams
the keys and values through in BLOCK_N-row tiles, and keeps a running max and running sum (the
online softmax) so that the result is exact.

Usage:
    out = attention(q, k, v, causal=True)

Notes:
- 128 x 128 tiles, as requested; 8 warps keep the two 128 x 128 dot products busy.
- The scale is folded into a base-2 exponent (exp2 is a single instruction on NVIDIA GPUs).
- With causal=True, key blocks to the right of the diagonal are skipped entirely.
"""

import math

import torch
import triton
import triton.language as tl

BLOCK_M = 128  # query rows per program
BLOCK_N = 128  # key/value rows per step of the inner loop


@triton.jit
def _attn_fwd(
    Q, K, V, Out,  # pointers to (batch, heads, seq_len, head_dim) tensors
    sm_scale,  # softmax scale, usually 1/sqrt(head_dim)
    N_CTX,  # sequence length
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    start_m = tl.program_id(0)  # which block of queries
    off_hz = tl.program_id(1)  # which (batch, head) pair

    # Each (batch, head) pair is a seq_len x head_dim matrix laid out row after row.
    head_offset = off_hz * N_CTX * HEAD_DIM
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)

    # Load this program's queries once; they stay in registers for the whole loop.
    q_ptrs = Q + head_offset + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N_CTX, other=0.0)

    # Online-softmax state: running max, running sum, unnormalized output.
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # log2(e): exp(x) == exp2(x * log2(e))

    # Causal: keys beyond the last query of this block can never be attended to.
    if CAUSAL:
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX)
    else:
        hi = N_CTX

    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k_ptrs = K + head_offset + cols[:, None] * HEAD_DIM + offs_d[None, :]
        v_ptrs = V + head_offset + cols[:, None] * HEAD_DIM + offs_d[None, :]
        k = tl.load(k_ptrs, mask=cols[:, None] < N_CTX, other=0.0)
        v = tl.load(v_ptrs, mask=cols[:, None] < N_CTX, other=0.0)

        qk = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N) scores, fp32
        if CAUSAL:
            # query i may only look at keys before it
            qk = tl.where(offs_m[:, None] > cols[None, :], qk, float("-inf"))

        # Online softmax update.
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    acc = acc / l_i[:, None]
    o_ptrs = Out + head_offset + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=offs_m[:, None] < N_CTX)


def attention(q, k, v, causal=False, sm_scale=None):
    """softmax(q @ k^T * sm_scale) @ v for (batch, heads, seq_len, head_dim) tensors."""
    batch, heads, n_ctx, head_dim = q.shape
    assert k.shape == q.shape and v.shape == q.shape
    assert head_dim in (16, 32, 64, 128), "head_dim must be 16, 32, 64 or 128"
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)
    out = torch.empty_like(q)
    grid = (triton.cdiv(n_ctx, BLOCK_M), batch * heads)
    _attn_fwd[grid](
        q, k, v, out,
        sm_scale,
        n_ctx,
        HEAD_DIM=head_dim,
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        CAUSAL=causal,
        num_warps=8,
        num_stages=2,
    )
    return out
