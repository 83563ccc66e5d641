"""Attention kernels for the audit's tests: one correct Triton kernel, and one variant for each
defect in grader.runtime.verify.TAXONOMY. Kernel-level defects are chosen by the constexpr BUG;
the others live in the launchers. tests/test_verify.py requires the correct one to pass every
case and each variant to fail a case built to catch its defect (int32-offset: the offset review)."""

import math

import torch
import triton
import triton.language as tl

from grader.runtime import device

# Kernel-level defects, selected by the kernel's BUG argument.
BUGS = {
    "missing-mask": 1,
    "wrong-scale": 2,
    "no-rescale": 3,
    "causal-off-by-one": 4,
    "zero-fill": 5,
    "fp16-accum": 6,
    "assumes-contiguous": 7,
    "uninit-read": 8,  # loads without masks from buffers the launcher pads with torch.empty
}

TILE = device.current().pick(gpu=64, interpreter=32)


@triton.jit
def attention_kernel(
    Q,
    K,
    V,
    Out,  # (B, H, N, D)
    stride_qz,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kz,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vz,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_oz,
    stride_oh,
    stride_om,
    stride_od,
    H,
    N,
    sm_scale,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    BUG: tl.constexpr,
):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)
    if BUG == 7:  # the strides of a contiguous tensor, whatever the real ones are
        stride_qm = D
        stride_qd = 1
        stride_kn = D
        stride_kd = 1
        stride_vn = D
        stride_vd = 1
        stride_om = D
        stride_od = 1
        stride_qh = N * D
        stride_kh = N * D
        stride_vh = N * D
        stride_oh = N * D
        stride_qz = H * N * D
        stride_kz = H * N * D
        stride_vz = H * N * D
        stride_oz = H * N * D
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q_base = Q + off_z * stride_qz + off_h * stride_qh
    q_ptrs = q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N, other=0.0)
    k_base = K + off_z * stride_kz + off_h * stride_kh
    v_base = V + off_z * stride_vz + off_h * stride_vh
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    if BUG == 6:
        acc = tl.zeros([BLOCK_M, D], dtype=tl.float16)
    else:
        acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    if BUG == 2:
        qk_scale = sm_scale  # exp2 without log2(e)
    else:
        qk_scale = sm_scale * 1.4426950408889634
    if CAUSAL:
        hi = tl.minimum((start_m + 1) * BLOCK_M, N)
    else:
        hi = N
    if BUG == 8:  # the launcher padded K and V to whole tiles
        hi = tl.cdiv(hi, BLOCK_N) * BLOCK_N
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k_ptrs = k_base + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd
        v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd
        if BUG == 8:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        else:
            k = tl.load(k_ptrs, mask=cols[:, None] < N, other=0.0)
            v = tl.load(v_ptrs, mask=cols[:, None] < N, other=0.0)
        qk = tl.dot(q, tl.trans(k))
        if BUG == 1:
            keep = cols[None, :] >= 0
        else:
            keep = cols[None, :] < N
        if CAUSAL:
            if BUG == 4:
                keep = keep & (offs_m[:, None] > cols[None, :])
            else:
                keep = keep & (offs_m[:, None] >= cols[None, :])
        if BUG == 5:
            qk = tl.where(keep, qk, 0.0)
        else:
            qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        if BUG == 3:
            acc = acc + tl.dot(p.to(v.dtype), v)
        elif BUG == 6:
            acc = (acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)).to(tl.float16)
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]
    o_base = Out + off_z * stride_oz + off_h * stride_oh
    o_ptrs = o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=offs_m[:, None] < N)


@triton.jit
def attention_kernel_int32(Q, Out, stride_h, N, D: tl.constexpr, BLOCK_M: tl.constexpr):
    """The head offset in int32: right until B*H*N*D passes 2^31 (reviewed, not run)."""
    off_hz = tl.program_id(1)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs = off_hz * stride_h + offs_m[:, None] * D + tl.arange(0, D)[None, :]
    x = tl.load(Q + offs, mask=offs_m[:, None] < N)
    tl.store(Out + offs, x, mask=offs_m[:, None] < N)


def _pad(x, n_pad):
    b, h, n, d = x.shape
    buf = torch.empty((b, h, n_pad, d), dtype=x.dtype, device=x.device)
    buf[:, :, :n] = x
    return buf


def launcher(bug: int = 0):
    """attention(q, k, v, causal=False, sm_scale=None) running attention_kernel with BUG=bug."""

    def attention(q, k, v, causal=False, sm_scale=None):
        b, h, n, d = q.shape
        scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
        if bug == BUGS["uninit-read"]:
            n_pad = triton.cdiv(n, TILE) * TILE
            k, v = _pad(k, n_pad), _pad(v, n_pad)
        out = torch.empty((b, h, n, d), dtype=q.dtype, device=q.device)
        grid = (triton.cdiv(n, TILE), b * h)
        attention_kernel[grid](
            q, k, v, out,
            *q.stride(), *k.stride(), *v.stride(), *out.stride(),
            h, n, scale,
            D=d, BLOCK_M=TILE, BLOCK_N=TILE, CAUSAL=causal, BUG=bug,
            num_warps=4, num_stages=2,
        )  # fmt: skip
        return out

    attention.__name__ = f"attention_bug{bug}"
    return attention


def torch_fallback():
    """Right everywhere, but ragged sizes are handed to PyTorch."""
    kernel = launcher()

    def attention(q, k, v, causal=False, sm_scale=None):
        n, d = q.shape[-2:]
        if n % TILE:
            scores = q @ k.transpose(-2, -1) * (sm_scale or 1.0 / math.sqrt(d))
            if causal:
                future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
                scores = scores.masked_fill(future, float("-inf"))
            return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v
        return kernel(q, k, v, causal, sm_scale)

    return attention


def address_cache():
    """Right on the first call; remembers results by the inputs' addresses."""
    kernel = launcher()
    cache = {}

    def attention(q, k, v, causal=False, sm_scale=None):
        key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), tuple(q.shape), causal, sm_scale)
        if key not in cache:
            cache[key] = kernel(q, k, v, causal, sm_scale)
        return cache[key]

    return attention


def variant(kind: str):
    """The attention launcher with the defect `kind` planted (int32-offset excepted)."""
    if kind == "torch-fallback":
        return torch_fallback()
    if kind == "address-cache":
        return address_cache()
    return launcher(BUGS[kind])
