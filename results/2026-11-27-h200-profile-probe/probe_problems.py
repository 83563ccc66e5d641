"""Factories for the profile probe on the GPU: a tl.dot matmul and a copy, coalesced or strided."""
import torch
import triton
import triton.language as tl


@triton.jit
def probe_matmul(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


@triton.jit
def probe_copy(x, y, n, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    j = (i * STRIDE) % n
    tl.store(y + i, tl.load(x + j, mask=m), mask=m)


def matmul(n=4096):
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    return lambda: probe_matmul[(n // 128, n // 128)](a, b, c, n, n, n, 128, 128, 64, num_warps=8, num_stages=3)


def copy(n=1 << 26, stride=1):
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    return lambda: probe_copy[(triton.cdiv(n, 1024),)](x, y, n, stride, 1024)
