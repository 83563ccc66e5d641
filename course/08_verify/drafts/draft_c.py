"""Memory-efficient attention in Triton (FlashAttention algorithm, forward only).

The kernel walks over key/value blocks and maintains the softmax normalizer incrementally, so
the full attention matrix is never stored. Sequences that fit in a single block are routed to
PyTorch instead: for them a kernel launch costs more than it saves, and PyTorch's result is exact.

Example:
    q = torch.randn(2, 8, 8192, 128, device="cuda", dtype=torch.float16)
    out = attention(q, q, q, causal=True)
"""

import math

import torch
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 128


@triton.jit
def attention_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    num_heads, seq_len, scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
):
    block_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // num_heads
    h = bh % num_heads

    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh
                + rows[:, None] * stride_qn + dims[None, :] * stride_qd,
                mask=rows[:, None] < seq_len, other=0.0)

    row_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    for start in range(0, seq_len, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        in_bounds = cols[:, None] < seq_len
        k = tl.load(k_ptr + b * stride_kb + h * stride_kh
                    + cols[:, None] * stride_kn + dims[None, :] * stride_kd,
                    mask=in_bounds, other=0.0)
        v = tl.load(v_ptr + b * stride_vb + h * stride_vh
                    + cols[:, None] * stride_vn + dims[None, :] * stride_vd,
                    mask=in_bounds, other=0.0)

        scores = tl.dot(q, tl.trans(k)) * scale
        # mask keys past the end of the sequence (and future keys when causal)
        valid = cols[None, :] < seq_len
        if IS_CAUSAL:
            valid = valid & (rows[:, None] >= cols[None, :])
        scores = tl.where(valid, scores, 0.0)

        # Update the running max and the normalizer.
        new_max = tl.maximum(row_max, tl.max(scores, 1))
        p = tl.exp(scores - new_max[:, None])
        correction = tl.exp(row_max - new_max)
        row_sum = row_sum * correction + tl.sum(p, 1)
        acc += tl.dot(p.to(v.dtype), v)
        row_max = new_max

    out = acc / row_sum[:, None]
    tl.store(o_ptr + b * stride_ob + h * stride_oh
             + rows[:, None] * stride_on + dims[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=rows[:, None] < seq_len)


def _attention_torch(q, k, v, causal, scale):
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:
        n = q.shape[-2]
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.matmul(torch.softmax(scores.float(), dim=-1).to(q.dtype), v)


def attention(q, k, v, causal=False, sm_scale=None):
    """Attention over (batch, heads, seq_len, head_dim) tensors; returns the same shape."""
    batch, heads, seq_len, head_dim = q.shape
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(head_dim)
    if seq_len <= BLOCK_N:
        return _attention_torch(q, k, v, causal, scale)

    out = torch.empty_like(q)
    grid = (triton.cdiv(seq_len, BLOCK_M), batch * heads)
    attention_fwd_kernel[grid](
        q, k, v, out,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        heads, seq_len, scale,
        HEAD_DIM=head_dim,
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        IS_CAUSAL=causal,
        num_warps=8,
        num_stages=2,
    )
    return out
