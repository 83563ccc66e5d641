"""Notebook 10's backward in one kernel with atomic dQ, the form of FlashAttention-2's CUDA
backward (Dao 2023, arXiv:2307.08691) and cuDNN's: each program of the dK/dV kernel, one per key
block, walks the query blocks as the notebook's does and also adds its share of dQ, dS K, into a
float32 buffer with `tl.atomic_add`; a small kernel then scales that buffer and converts it to
float16. Five products per tile pair instead of the two kernels' seven (QKᵀ and dO Vᵀ are not
computed a second time), at the price of atomic traffic and of a dQ whose last bits change from
run to run. It is a measured alternative for bench/backward.py, not one of the notebook's cells.

The conventions are the notebook's (solutions/10_flash_backward/flash_backward.py): q, k, v, dO
of shape (B, H, N, D), the last dimension contiguous; `lse` of 07's forward in base 2 and in the
units of `qk * qk_scale`, qk_scale = log2(e) / sqrt(D); δ from the notebook's `attention_delta`;
`out` of shape (3, B, H, N, D) holding dQ, dK, dV.

Import after `grader.runtime.device.setup()`: it imports triton.
"""

from __future__ import annotations

import math
import sys

from bench import _notebook
from grader.runtime import device

DEVICE = device.current()
_FOLDER = str(_notebook.source_path("10_flash_backward").parent)
if _FOLDER not in sys.path:  # flash_forward.py, released beside the notebook, as it imports it
    sys.path.insert(0, _FOLDER)

import torch  # noqa: E402
import triton  # noqa: E402 (after the mode is chosen)
import triton.language as tl  # noqa: E402
from flash_forward import LOG2E, _rows  # noqa: E402

# Tile sizes (BLOCK_M, BLOCK_N, num_warps, num_stages) on a GPU, per head dim: the notebook's
# dK/dV tiles, the same loop with one more product and a (BLOCK_M, D) float32 tile more in
# registers; bench/backward.py --configs times the alternatives. The interpreter gets the
# notebook's small dK/dV tile.
GPU_ATOMIC_CONFIGS = {64: (32, 64, 4, 3), 128: (64, 128, 8, 3)}
INTERPRETER_ATOMIC_CONFIG = (16, 32, 4, 1)
CONVERT_BLOCK = DEVICE.pick(gpu=64, interpreter=32)  # rows per program of the dQ conversion


def atomic_config(d):
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of the one-kernel backward for head dim d."""
    if not DEVICE.is_gpu:
        return INTERPRETER_ATOMIC_CONFIG
    return GPU_ATOMIC_CONFIGS.get(d, (16, 64, 4, 2))


# fmt: off
@triton.jit
def _attn_bwd_fused_blocks(
    dk, dv,  # the accumulators, (BLOCK_N, HEAD_DIM) of ACC each
    k, v,  # this program's key and value tiles, (BLOCK_N, HEAD_DIM)
    q_ptrs, do_ptrs,  # (BLOCK_M, HEAD_DIM) pointers to query/dO block 0 of this head
    dq_ptrs,  # (BLOCK_M, HEAD_DIM) pointers to row block 0 of this head's dQ accumulator
    lse_ptrs, delta_ptrs,  # lse and delta of query row 0 of this head
    stride_qn, stride_don, stride_dqn,
    offs_m,  # (BLOCK_M,) 0..BLOCK_M-1
    lo, hi,  # the query rows this call covers: [lo, hi), lo a multiple of BLOCK_M
    N,
    first_query,  # (BLOCK_N,) with MASKED, key row c is seen by the queries i >= first_query[c]
    qk_scale,  # (1 / sqrt(D)) * log2(e)
    BLOCK_M: tl.constexpr,
    MASKED: tl.constexpr,  # False: every query of [lo, hi) sees every key, no mask
):
    q_ptrs += lo * stride_qn
    do_ptrs += lo * stride_don
    dq_ptrs += lo * stride_dqn
    for start_m in range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        rows = start_m + offs_m  # (BLOCK_M,) query rows of this block
        # -- the block's scores, transposed: reads BLOCK_M * D of Q and of dO (the notebook's)
        if MASKED:
            q = tl.load(q_ptrs, mask=rows[:, None] < N, other=0.0)  # (BLOCK_M, D)
            do = tl.load(do_ptrs, mask=rows[:, None] < N, other=0.0)  # (BLOCK_M, D)
            lse = tl.load(lse_ptrs + rows, mask=rows < N, other=float("inf"))  # (BLOCK_M,)
            delta = tl.load(delta_ptrs + rows, mask=rows < N, other=0.0)  # (BLOCK_M,)
            qkT = tl.dot(k, tl.trans(q))  # (BLOCK_N, BLOCK_M)
            qkT = tl.where(rows[None, :] >= first_query[:, None], qkT, float("-inf"))
        else:
            q = tl.load(q_ptrs)
            do = tl.load(do_ptrs)
            lse = tl.load(lse_ptrs + rows)
            delta = tl.load(delta_ptrs + rows)
            qkT = tl.dot(k, tl.trans(q))  # (BLOCK_N, BLOCK_M)
        # -- Pᵀ rebuilt, dV += Pᵀ dO, dPᵀ = V dOᵀ, dSᵀ = Pᵀ (dPᵀ - delta), dK += dSᵀ Q
        pT = tl.math.exp2(qkT * qk_scale - lse[None, :])  # (BLOCK_N, BLOCK_M); 0 where masked
        dv += tl.dot(pT.to(do.dtype), do)  # (BLOCK_N, D)
        dpT = tl.dot(v, tl.trans(do))  # (BLOCK_N, BLOCK_M)
        dsT = (pT * (dpT - delta[None, :])).to(q.dtype)  # (BLOCK_N, BLOCK_M), both products'
        dk += tl.dot(dsT, q)  # (BLOCK_N, D)
        # -- this key block's share of dQ, dS K, unscaled as in the dQ kernel's accumulator:
        # (BLOCK_M, D) added to the rows of this query block, in float32, by atomic additions
        dq = tl.dot(tl.trans(dsT), k)  # (BLOCK_M, D)
        if MASKED:
            tl.atomic_add(dq_ptrs, dq, mask=rows[:, None] < N, sem="relaxed")
        else:
            tl.atomic_add(dq_ptrs, dq, sem="relaxed")
        q_ptrs += BLOCK_M * stride_qn
        do_ptrs += BLOCK_M * stride_don
        dq_ptrs += BLOCK_M * stride_dqn
    return dk, dv


@triton.jit
def attn_bwd_fused_kernel(
    # pointers: (B, H, N, HEAD_DIM), the last dimension contiguous; Lse, Delta (B, H, N) float32;
    # DQAcc (B, H, N, HEAD_DIM) of ACC, zeroed: dS K is added into it, unscaled
    Q, K, V, DO, Lse, Delta, DK, DV, DQAcc,
    # strides of batch, head and row
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_don,
    stride_dkb, stride_dkh, stride_dkn,
    stride_dvb, stride_dvh, stride_dvn,
    stride_dqb, stride_dqh, stride_dqn,
    # sizes and scales
    H, N,
    sm_scale,  # 1 / sqrt(HEAD_DIM)
    qk_scale,  # sm_scale * log2(e)
    # compile-time constants
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,  # query rows per loop step; divides BLOCK_N
    BLOCK_N: tl.constexpr,  # key rows per program
    CAUSAL: tl.constexpr,
):
    # -- which key block, batch and head; its K and V tiles, resident: reads BLOCK_N * D of each
    start_n = tl.program_id(0) * BLOCK_N
    off_bh = tl.program_id(1)
    cols = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key rows of this program
    offs_m = tl.arange(0, BLOCK_M)
    k_ptrs = _rows(K, stride_kb, stride_kh, stride_kn, off_bh, H, cols, HEAD_DIM)
    v_ptrs = _rows(V, stride_vb, stride_vh, stride_vn, off_bh, H, cols, HEAD_DIM)
    k = tl.load(k_ptrs, mask=cols[:, None] < N, other=0.0)  # (BLOCK_N, HEAD_DIM); 0 past N,
    v = tl.load(v_ptrs, mask=cols[:, None] < N, other=0.0)  # so those keys add 0 to dQ
    q_ptrs = _rows(Q, stride_qb, stride_qh, stride_qn, off_bh, H, offs_m, HEAD_DIM)
    do_ptrs = _rows(DO, stride_dob, stride_doh, stride_don, off_bh, H, offs_m, HEAD_DIM)
    dq_ptrs = _rows(DQAcc, stride_dqb, stride_dqh, stride_dqn, off_bh, H, offs_m, HEAD_DIM)
    lse_ptrs = Lse + off_bh * N
    delta_ptrs = Delta + off_bh * N
    ACC = tl.float64 if Q.dtype.element_ty == tl.float64 else tl.float32  # gradcheck's: float64
    dk = tl.zeros((BLOCK_N, HEAD_DIM), ACC)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), ACC)
    if CAUSAL:
        # -- the diagonal: the query blocks that overlap the key block, masked per pair
        first_query = cols  # key j is seen by the queries i >= j
        dk, dv = _attn_bwd_fused_blocks(dk, dv, k, v, q_ptrs, do_ptrs, dq_ptrs, lse_ptrs,
                                        delta_ptrs, stride_qn, stride_don, stride_dqn, offs_m,
                                        start_n, tl.minimum(start_n + BLOCK_N, N), N,
                                        first_query, qk_scale, BLOCK_M, True)
        # -- the later queries see the whole key block: whole query blocks, then the ragged tail
        after = start_n + BLOCK_N
        full = tl.maximum((N // BLOCK_M) * BLOCK_M, after)
        dk, dv = _attn_bwd_fused_blocks(dk, dv, k, v, q_ptrs, do_ptrs, dq_ptrs, lse_ptrs,
                                        delta_ptrs, stride_qn, stride_don, stride_dqn, offs_m,
                                        after, full, N, first_query, qk_scale, BLOCK_M, False)
        dk, dv = _attn_bwd_fused_blocks(dk, dv, k, v, q_ptrs, do_ptrs, dq_ptrs, lse_ptrs,
                                        delta_ptrs, stride_qn, stride_don, stride_dqn, offs_m,
                                        full, N, N, first_query, qk_scale, BLOCK_M, True)
    else:
        # -- whole query blocks without a mask, then the ragged tail with one
        full = (N // BLOCK_M) * BLOCK_M
        every_query = tl.zeros((BLOCK_N,), tl.int32)  # each key is seen by the queries i >= 0
        dk, dv = _attn_bwd_fused_blocks(dk, dv, k, v, q_ptrs, do_ptrs, dq_ptrs, lse_ptrs,
                                        delta_ptrs, stride_qn, stride_don, stride_dqn, offs_m,
                                        0, full, N, every_query, qk_scale, BLOCK_M, False)
        dk, dv = _attn_bwd_fused_blocks(dk, dv, k, v, q_ptrs, do_ptrs, dq_ptrs, lse_ptrs,
                                        delta_ptrs, stride_qn, stride_don, stride_dqn, offs_m,
                                        full, N, N, every_query, qk_scale, BLOCK_M, True)
    # -- dK carries sm_scale; writes BLOCK_N * D twice (dQ's sm_scale waits for the conversion)
    dk_ptrs = _rows(DK, stride_dkb, stride_dkh, stride_dkn, off_bh, H, cols, HEAD_DIM)
    dv_ptrs = _rows(DV, stride_dvb, stride_dvh, stride_dvn, off_bh, H, cols, HEAD_DIM)
    tl.store(dk_ptrs, (dk * sm_scale).to(DK.dtype.element_ty), mask=cols[:, None] < N)
    tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=cols[:, None] < N)


@triton.jit
def attn_bwd_dq_convert_kernel(
    DQAcc,  # (B, H, N, HEAD_DIM) float32: the sums of dS K, unscaled
    DQ,  # (B, H, N, HEAD_DIM): written, sm_scale * DQAcc in DQ's dtype
    stride_ab, stride_ah, stride_an,
    stride_dqb, stride_dqh, stride_dqn,
    H, N,
    sm_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,  # rows per program
):
    # -- reads BLOCK_M * D float32, writes BLOCK_M * D: the dQ kernel's store, scale included
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    acc_ptrs = _rows(DQAcc, stride_ab, stride_ah, stride_an, off_bh, H, rows, HEAD_DIM)
    dq = tl.load(acc_ptrs, mask=rows[:, None] < N, other=0.0)  # (BLOCK_M, HEAD_DIM)
    dq_ptrs = _rows(DQ, stride_dqb, stride_dqh, stride_dqn, off_bh, H, rows, HEAD_DIM)
    tl.store(dq_ptrs, (dq * sm_scale).to(DQ.dtype.element_ty), mask=rows[:, None] < N)
# fmt: on


def attention_gradients_atomic(
    ref, q, k, v, o, do, lse, out, causal=False, delta=None, config=None, dq_acc=None
):
    """out[0], out[1], out[2] = dQ, dK, dV, as the notebook's `attention_gradients` (module `ref`,
    bench/_notebook.py) writes them: its delta kernel, then the one-kernel backward with atomic
    dQ and the conversion of dQ. `delta` ((B, H, N) float32) and `dq_acc` ((B, H, N, D) float32,
    contiguous) are scratch tensors, made if not given; dq_acc is zeroed here, in every call."""
    b, h, n, d = q.shape
    assert k.shape == v.shape == do.shape == o.shape == q.shape, "q, k, v, o, do: one shape"
    assert out.shape == (3, *q.shape) and lse.shape == (b, h, n) and lse.is_contiguous()
    block_m, block_n, num_warps, num_stages = config or atomic_config(d)
    assert block_n % block_m == 0, "BLOCK_M must divide BLOCK_N (the causal diagonal)"
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    if delta is None:
        delta = torch.empty(lse.shape, device=q.device, dtype=torch.float32)
    if dq_acc is None:
        dq_acc = torch.empty(q.shape, device=q.device, dtype=acc_dtype)
    assert dq_acc.shape == q.shape and dq_acc.dtype == acc_dtype and dq_acc.is_contiguous()
    ref.attention_delta(o, do, delta)
    dq_acc.zero_()
    dq, dk, dv = out[0], out[1], out[2]
    sm_scale = 1 / math.sqrt(d)
    attn_bwd_fused_kernel[(triton.cdiv(n, block_n), b * h)](
        q, k, v, do, lse, delta, dk, dv, dq_acc,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
        *dk.stride()[:3], *dv.stride()[:3], *dq_acc.stride()[:3],
        h, n, sm_scale, LOG2E / math.sqrt(d),
        HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    attn_bwd_dq_convert_kernel[(triton.cdiv(n, CONVERT_BLOCK), b * h)](
        dq_acc, dq, *dq_acc.stride()[:3], *dq.stride()[:3], h, n, sm_scale,
        HEAD_DIM=d, BLOCK_M=CONVERT_BLOCK,
    )  # fmt: skip
    return out
