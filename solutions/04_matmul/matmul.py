# %% [markdown]
# # 04 · The matmul ladder
#
# *Reading time: about 12 minutes.*
#
# Every linear layer, attention score and projection is a matrix multiplication, and for it the
# vendor's library, cuBLAS, sets a high bar. This notebook climbs toward it one rung at a time:
# each version a small change to the one before, checked first, then on a GPU timed, placed on the
# roofline and compared with cuBLAS in the same run. You write the kernel at its heart: the blocked
# matmul, correct for any shape and memory layout.
#
# **You will learn:** why a naive matmul is slow, measured; how tiles on chip raise arithmetic
# intensity; how `tl.dot` puts the tensor cores to work; why the launch order of tiles matters for
# the L2 cache; what `num_stages` and `num_warps` buy; why "faster than `torch.matmul`" on fp32
# usually means TF32; and what a transposed operand costs.

# %%
from grader.runtime import device

DEVICE = device.setup()

import math
from contextlib import contextmanager

import numpy as np
import torch
import triton
import triton.language as tl
from tqdm.auto import tqdm

from grader.runtime import (
    checks,
    launches,
    perf,
    plots,
    profile,
    recorded,
    results,
    roofline,
    timing,
)

print(f"Kernels run on {DEVICE.describe()}; tensors for them live on '{DEVICE.torch_device}'.")

# %% tags=["parameters"]
# You may change these while you work; grading restores this cell as released.
# Sizes adapt to the mode: the interpreter runs every program as Python, so it gets small problems.
SPEED_N = DEVICE.pick(gpu=4096, interpreter=64)  # the graded speed: SPEED_N^3 in float16
LADDER_N = DEVICE.pick(gpu=8192, interpreter=64)  # where the versions are compared
NAIVE_N = DEVICE.pick(gpu=1024, interpreter=12)  # v0 runs only at small sizes (see below)
DTYPE_N = DEVICE.pick(gpu=4096, interpreter=48)  # fp32 / TF32 / fp16 / bf16 comparison
RUN_BENCHMARKS = True

# %% [markdown]
# ## The problem and its cost
#
# $C = AB$ with $A$ of shape $M \times K$ and $B$ of shape $K \times N$: $MN$ dot products of
# length $K$, $2MNK$ FLOPs. The least traffic is reading $A$ and $B$ once and writing $C$ once,
# $(MK + KN + MN)\cdot s$ bytes for $s$-byte elements. For square sides $n$ the intensity is
# $2n^3 / (3n^2 s) = 2n/(3s)$ FLOP per byte: it grows with $n$, so a large matmul is compute
# bound, *if* the kernel reads each element once. Whether it does is what this notebook is about.
#
# On a GPU the ceilings are measured now (copy bandwidth and cuBLAS's rate per precision, as in
# 01); on the CPU the H100 SXM datasheet stands in, and says so.

# %%
def matmul_reference(a, b):  # reads M*K + K*N, writes M*N
    return a @ b


def matmul_flops(M, N, K):
    return 2 * M * N * K


def matmul_bytes(M, N, K, itemsize):
    """The least traffic: A and B read once, C written once."""
    return (M * K + K * N + M * N) * itemsize


MEASURED = DEVICE.supports("timing") and RUN_BENCHMARKS
with recorded.cell("04_matmul/ceilings"):
    CEILINGS = roofline.measure_ceilings() if MEASURED else roofline.datasheet_h100()
    print(f"ceilings: {CEILINGS.source}")
    print(f"  memory {CEILINGS.bandwidth / 1e12:.2f} TB/s; " + ", ".join(
        f"{p} {f / 1e12:.0f} TFLOP/s (ridge {CEILINGS.ridge(p):.0f} FLOP/B)"
        for p, f in CEILINGS.flops.items()))
    for n in (1024, 4096, 8192):
        ai = roofline.intensity(matmul_flops(n, n, n), matmul_bytes(n, n, n, 2))
        print(f"n={n} float16: intensity {ai:.0f} FLOP/B -> "
              f"{CEILINGS.bound(matmul_flops(n, n, n), matmul_bytes(n, n, n, 2))} bound")
if not MEASURED:
    recorded.show("04_matmul/ceilings")

# %% [markdown]
# ## v0 · Naive: one program per output element
#
# The most direct kernel gives each $C_{mn}$ its own program, which walks along row $m$ of $A$ and
# column $n$ of $B$ in steps of `BLOCK_K`. It is correct, and slow for two reasons you can count:
#
# - **No reuse.** Each program reads $2K$ elements for $2K$ FLOPs, so the kernel *requests* $2MNK$
#   elements, $n$ times what $A$ and $B$ hold for square sides $n$. Caches catch some repeats, but
#   the kernel asks for one FLOP per element loaded.
# - **Uncoalesced reads of $B$.** Walking down a column of a row-major $B$ steps $N$ elements at a
#   time: each element comes from another memory segment (more at the end).
#
# Its time grows like $MNK$, so the cell times it at `NAIVE_N` and scales to the graded size.

# %%
@triton.jit
def matmul_naive_kernel(
    # pointers
    a_ptr,  # A, (M, K)
    b_ptr,  # B, (K, N)
    c_ptr,  # C, (M, N), written
    # sizes
    M, N, K,
    # strides (elements)
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    # compile-time constants
    BLOCK_K: tl.constexpr,  # terms of the dot product per step
):
    # -- this program computes the single element C[m, n]
    m = tl.program_id(axis=0)
    n = tl.program_id(axis=1)
    acc = tl.zeros((BLOCK_K,), dtype=tl.float32)  # (BLOCK_K,) partial sums
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)  # (BLOCK_K,)
        a = tl.load(a_ptr + m * stride_am + offs_k * stride_ak, mask=offs_k < K, other=0.0)
        b = tl.load(b_ptr + offs_k * stride_bk + n * stride_bn, mask=offs_k < K, other=0.0)
        acc += a.to(tl.float32) * b.to(tl.float32)  # (BLOCK_K,)
    tl.store(c_ptr + m * stride_cm + n * stride_cn, tl.sum(acc))  # reads 2K, writes 1


def matmul_naive(a, b, out, block_k=64):
    M, K = a.shape
    N = b.shape[1]
    matmul_naive_kernel[(M, N)](a, b, out, M, N, K, *a.stride(), *b.stride(), *out.stride(),
                                BLOCK_K=block_k, num_warps=1)
    return out


# %%
checks.check(matmul_naive, matmul_reference,
             lambda gen: (checks.randn((NAIVE_N, NAIVE_N + 5), gen=gen),
                          checks.randn((NAIVE_N + 5, NAIVE_N + 1), gen=gen)),
             trials=1, atol=1e-4)
print(f"v0 is correct on {NAIVE_N}x{NAIVE_N + 5} @ {NAIVE_N + 5}x{NAIVE_N + 1} (float32).")

LADDER = {}  # version -> roofline.Point, filled by the GPU measurements below


def measure(label, fn, M, N, K, dtype=torch.float16):
    """Time fn, keep it as a point for the roofline, and return the Timing."""
    t = timing.bench(fn)
    itemsize = torch.tensor([], dtype=dtype).element_size()
    LADDER[label] = roofline.Point(label, matmul_flops(M, N, K), matmul_bytes(M, N, K, itemsize),
                                   t.median_ms * 1e-3)
    return t


if MEASURED:
    with recorded.cell("04_matmul/naive-vs-cublas"):
        n = NAIVE_N
        a = torch.randn(n, n, device=DEVICE.torch_device, dtype=torch.float16)
        b = torch.randn(n, n, device=DEVICE.torch_device, dtype=torch.float16)
        c = torch.empty(n, n, device=DEVICE.torch_device, dtype=torch.float16)
        naive = measure(f"v0 naive ({n})", lambda: matmul_naive(a, b, c), n, n, n)
        cublas = measure(f"cuBLAS ({n})", lambda: torch.matmul(a, b, out=c), n, n, n)
        print(f"n={n} float16: v0 {naive.per_second(matmul_flops(n, n, n)) / 1e12:.2f} TFLOP/s, "
              f"cuBLAS {cublas.per_second(matmul_flops(n, n, n)) / 1e12:.0f} TFLOP/s: v0 runs at "
              f"{cublas.median_ms / naive.median_ms:.4f}x cuBLAS's speed")
        scale = (SPEED_N / n) ** 3
        requested = 2 * SPEED_N**3 * 2
        print(f"at n={SPEED_N}: the work is {scale:.0f}x larger, so v0 would take about "
              f"{naive.median_ms * scale / 1e3:.1f} s per call; it requests {requested / 1e9:.0f} GB, "
              f"{requested / CEILINGS.bandwidth:.2f} s at the copy bandwidth even if none of it hit a cache")
else:
    print("On a GPU this cell times v0 against cuBLAS at NAIVE_N and extrapolates its time to "
          "SPEED_N; here it has been validated only.")
    recorded.show("04_matmul/naive-vs-cublas")

# %% [markdown]
# ## v1 · Blocked: tiles on chip, `tl.dot` on the tensor cores
#
# Give each program a `BLOCK_M x BLOCK_N` **tile** of $C$. It walks along $K$ in steps of
# `BLOCK_K`, loading an `A` block (`BLOCK_M x BLOCK_K`) and a `B` block (`BLOCK_K x BLOCK_N`) on
# chip and multiplying them with `tl.dot` into an accumulator that stays on chip. Each `A` element
# is used `BLOCK_N` times, each `B` element `BLOCK_M` times:
#
# $$\text{intensity} = \frac{2\,B_M B_N B_K}{(B_M B_K + B_K B_N)\,s} = \frac{2\,B_M B_N}{(B_M + B_N)\,s}$$
#
# FLOP per byte requested from L2 and memory, $T/s$ for a square tile, whatever $B_K$. The price
# is on-chip memory: each pipeline stage (v3) holds $(B_M + B_N) B_K s$ bytes of shared memory (an
# H100 gives a block at most 227 KB: NVIDIA H100 datasheet; CUDA C++ Programming Guide,
# compute-capability table, 9.0), the fp32 accumulator $4 B_M B_N$ bytes of registers.
#
# `tl.dot` on float16 or bfloat16 compiles to tensor-core instructions (`mma` on Ampere, also the
# warpgroup-wide `wgmma` on Hopper for large tiles), the source of the datasheet's fp16 rate; on
# float32 it uses TF32 unless told otherwise (see Dtypes). The plot works out the trade-off for
# every square tile size.

# %%
def tile_intensity(block_m, block_n, itemsize):
    """FLOP per byte requested by one K-step of a block_m x block_n tile."""
    return 2 * block_m * block_n / ((block_m + block_n) * itemsize)


def smem_per_stage(block_m, block_n, block_k, itemsize):
    """Bytes of shared memory for one stage: an A block and a B block."""
    return (block_m + block_n) * block_k * itemsize


SMEM_LIMIT = 227 * 1024  # bytes per block on an H100 (datasheet; CUDA C++ Programming Guide)
sides = [16, 32, 64, 128, 256, 512]
itemsizes = {"float16": 2, "float32": 4}
plots.tile_tradeoff(
    sides,
    {name: [tile_intensity(t, t, size) for t in sides] for name, size in itemsizes.items()},
    {f"{name}, 3 stages, BLOCK_K=64": [3 * smem_per_stage(t, t, 64, size) / 1024 for t in sides]
     for name, size in itemsizes.items()},
    # a 128x256 tile, drawn at the side of the square of the same area
    marked=(181, tile_intensity(128, 256, 2),
            f"128x256 float16: {tile_intensity(128, 256, 2):.0f}"),
    ridges={f"{p} ridge {CEILINGS.ridge(p):.0f} ({'measured' if MEASURED else 'datasheet'})":
            CEILINGS.ridge(p) for p in ("fp16", "fp32")},
    limit=(SMEM_LIMIT / 1024, "227 KB per block (H100)"),
)

# %% [markdown]
# Read the two panels together. By the formula, float16 tiles of 128x128, 128x256 and 256x256
# request 64, 85 and 128 FLOP per byte, and three stages of each fit in 227 KB; 512x512 does not.
# A tile below the ridge relies on L2 to serve repeated requests for the same blocks (v2). Float32
# tiles cost twice the bytes for the same intensity.
#
# ### Exercise 1 · the blocked matmul kernel (6 points)
#
# The signature, the launcher and the tile this program owns are given. Write the rest:
#
# 1. This tile's row, column and `K` offsets, and pointers to the first `(BLOCK_M, BLOCK_K)` block
#    of `A` and `(BLOCK_K, BLOCK_N)` block of `B`. Address through the strides only, so that a
#    transposed or sliced tensor works without a copy.
# 2. An accumulator: in which dtype, given that float16's largest finite value is 65504 (IEEE 754)?
# 3. A loop over the `K` steps: which lanes must the masked loads switch off, and what must they
#    read there so the padding adds nothing to the sum? `tl.dot` takes the accumulator and must
#    honour `INPUT_PRECISION`. How far do the pointers move per step?
# 4. The store: in which dtype, and under which mask?

# %% nbgrader={"grade_id": "matmul-kernel", "solution": true}
@triton.jit
def matmul_kernel(
    # pointers
    a_ptr,  # A, (M, K)
    b_ptr,  # B, (K, N)
    c_ptr,  # C, (M, N), written
    # sizes
    M, N, K,
    # strides: how many elements to step for one row / one column of each matrix
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    # compile-time constants
    BLOCK_M: tl.constexpr,  # rows of C per program
    BLOCK_N: tl.constexpr,  # columns of C per program
    BLOCK_K: tl.constexpr,  # depth of one step along K
    GROUP_M: tl.constexpr,  # rows of tiles per group in the launch order (1: row-major; see v2)
    INPUT_PRECISION: tl.constexpr,  # "ieee" or "tf32": how tl.dot multiplies float32 blocks
):
    # -- which tile of C this program owns
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = tl.swizzle2d(pid // num_pid_n, pid % num_pid_n, num_pid_m, num_pid_n, GROUP_M)
    # -- offsets, pointers, the loop over K with tl.dot, the store: reads M*K + K*N (from L2
    #    and memory, N/BLOCK_N and M/BLOCK_M times over), writes M*N
    ### BEGIN SOLUTION
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    offs_k = tl.arange(0, BLOCK_K)  # (BLOCK_K,)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak  # (BLOCK_M, BLOCK_K)
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn  # (BLOCK_K, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # (BLOCK_M, BLOCK_N)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K  # columns of A (rows of B) not yet consumed
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)  # (BLOCK_M, BLOCK_N)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn  # (BLOCK_M, BLOCK_N)
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
    ### END SOLUTION


# Launch settings per input dtype. Float32 blocks take twice the bytes, so their tiles are smaller.
DEFAULT_CONFIG = {
    torch.float16: dict(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3),
    torch.bfloat16: dict(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3),
    torch.float32: dict(block_m=128, block_n=128, block_k=32, group_m=8, num_warps=8, num_stages=3),
}


def matmul(a, b, out, *, tf32=False, **config):
    """out = a @ b computed by matmul_kernel, for any strides; `config` overrides the defaults."""
    M, K = a.shape
    K_b, N = b.shape
    assert K == K_b and tuple(out.shape) == (M, N) and a.dtype == b.dtype, "shapes or dtypes"
    cfg = {**DEFAULT_CONFIG[a.dtype], **config}
    grid = (triton.cdiv(M, cfg["block_m"]) * triton.cdiv(N, cfg["block_n"]),)
    matmul_kernel[grid](
        a, b, out, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], INPUT_PRECISION="tf32" if tf32 else "ieee",
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return out


# %% [markdown]
# ### How your kernel is tested
#
# - **Layouts.** Every input is a view into a larger buffer of random numbers: contiguous,
#   transposed (`torch.randn(K, M).t()`, so `stride_am == 1`) or strided (every other column). A
#   kernel that ignores strides, or reads past a mask, gets wrong numbers rather than a crash.
# - **Guarded output.** `out` is a window in a larger poisoned buffer with its own row stride. In
#   the call, torch's matrix products are switched off and Triton launches recorded: `matmul_kernel`
#   must be given `A` and `B` and write every element of `out`.
# - **Tolerances.** Against the float64 reference, your result carries the output's rounding
#   (its dtype's `rtol`) and that of a $K$-term float32 sum, bounded by $\gamma_K \sum_k |a_k b_k|$
#   with $\gamma_K \approx K u$ (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed.,
#   2002, §3.1); in practice $\sqrt{K}$ replaces $K$ (Higham and Mary, *SIAM J. Sci. Comput.*
#   41(5), 2019). So `atol = 4 * sqrt(K) * u * max(|A| @ |B|)`, $u = 2^{-24}$.
# - **TF32.** The launcher passes `input_precision="ieee"`; a test that asks for TF32 (10 mantissa
#   bits) says so and uses $u = 2^{-10}$ per product. Where `tl.dot` would run in TF32 on a GPU,
#   the interpreter checks again with the float32 inputs rounded to TF32, as the GPU would fail.
#
# The visible test: odd sizes, float32, float16, small tiles, strided operands.

# %%
PAD = 256  # wider than any tile: a kernel that reads or writes past a matrix stays in our buffers
LAYOUTS = ("contiguous", "transposed", "strided")


def make_matrix(rows, cols, dtype, layout, gen, values="normal"):
    """A (rows, cols) matrix of `dtype` with the given layout: a view into a larger buffer of
    random values, so that reads past its edges find numbers, not unmapped memory.

    values="normal": standard normal. "positive": between about 12 and 30. "cancel": the same
    magnitudes, positive in the first half of the columns and negative in the second (as A, its
    running dot products with a positive B climb past 65504 before they cancel)."""
    if layout == "contiguous":
        buffer = checks.randn((rows + PAD) * (cols + PAD), gen=gen, dtype=dtype)
        view = buffer[: rows * cols].view(rows, cols)
    elif layout == "transposed":
        buffer = checks.randn((cols + PAD, rows + PAD), gen=gen, dtype=dtype)
        view = buffer[:cols, :rows].t()
    elif layout == "strided":
        buffer = checks.randn((rows + PAD, 2 * (cols + PAD)), gen=gen, dtype=dtype)
        view = buffer[:rows, : 2 * cols : 2]
    else:
        raise ValueError(f"unknown layout {layout!r}")
    if values in ("positive", "cancel"):
        sign = torch.ones(cols, device=buffer.device)
        if values == "cancel":
            sign[cols // 2 :] = -1
        view.copy_((view.float().abs() * 4 + 12) * sign)
    return view


def matmul_inputs(M, N, K, dtype, layout="contiguous", values="normal"):
    """make_inputs(gen) for checks.check: (A, B) with a layout each (one name, or a pair)."""
    layout_a, layout_b = (layout, layout) if isinstance(layout, str) else layout
    values_a, values_b = ("cancel", "positive") if values == "cancel" else (values, values)
    return lambda gen: (make_matrix(M, K, dtype, layout_a, gen, values_a),
                        make_matrix(K, N, dtype, layout_b, gen, values_b))


def matmul_tolerance(a, b, out_dtype, tf32=False):
    """(rtol, atol) for C = A @ B in out_dtype against a float64 reference."""
    K = a.shape[1]
    rtol, atol_floor = checks.tolerance(out_dtype)
    u = 2.0**-10 if tf32 else 2.0**-24
    scale = float((a.double().abs() @ b.double().abs()).max())
    return rtol, 4 * math.sqrt(K) * u * scale + atol_floor


@contextmanager
def torch_matmul_switched_off():
    """Inside, torch's matrix products raise: the launcher must compute C with its kernel."""
    owners = [(torch, "matmul"), (torch, "mm"), (torch, "bmm"), (torch, "einsum"),
              (torch, "addmm"), (torch.Tensor, "__matmul__"), (torch.Tensor, "matmul"),
              (torch.Tensor, "mm")]
    saved = [(owner, name, getattr(owner, name)) for owner, name in owners]

    def refuse(*args, **kwargs):
        raise checks.KernelCheckError("the launcher called torch's matmul: compute C with the kernel")

    try:
        for owner, name, _ in saved:
            setattr(owner, name, refuse)
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def guarded(launch):
    """launch(a, b, out) run on a window of a poisoned frame; writes outside the window fail."""
    def run(a, b, out):
        M, N = out.shape
        frame = checks.poisoned((M + PAD, N + PAD), out.dtype, where=out.device.type)
        window = frame[:M, :N]
        with torch_matmul_switched_off(), launches.kernel_work(
                ["matmul_kernel"], (a, b), window, who=launches.who(launch)):
            launch(a, b, window)
        outside = checks.poison_mask(frame)
        outside[:M, :N] = True
        if not bool(outside.all()):
            raise checks.KernelCheckError(
                f"the kernel wrote {int((~outside).sum())} elements outside `out` ({M}x{N}): mask "
                "the store to rows < M and columns < N, and address C with its strides")
        out.copy_(window)
    run.__name__ = getattr(launch, "__name__", "matmul")
    return run


def check_matmul(fn, M, N, K, dtype, *, layout="contiguous", values="normal", tf32=False, trials=2):
    """checks.check on fresh inputs, with the tolerance worked out from each trial's inputs."""
    for _ in range(trials):
        seed = checks.new_seed()
        make = matmul_inputs(M, N, K, dtype, layout, values)
        rtol, atol = matmul_tolerance(*make(checks.generator(seed)), dtype, tf32=tf32)
        checks.check(guarded(fn), matmul_reference, make, trials=1, seed=seed, rtol=rtol, atol=atol)


# %% nbgrader={"grade": true, "grade_id": "test-matmul-visible", "points": 1}
LOW = [torch.float16] + ([torch.bfloat16] if DEVICE.supports("bf16") else [])
for dtype in (torch.float32, *LOW):
    check_matmul(matmul, 37, 53, 71, dtype)
tiles = dict(block_m=16, block_n=32, block_k=16, group_m=2, num_warps=2, num_stages=2)
check_matmul(lambda a, b, out: matmul(a, b, out, **tiles), 37, 53, 71, torch.float16,
             layout=("transposed", "strided"), trials=1)  # 3 x 2 tiles, 5 steps along K
print(f"visible test passed: 37x71 @ 71x53, float32 and {[str(d)[6:] for d in LOW]}; "
      "16x32 tiles on transposed and strided operands")

# %% [markdown]
# ### Hidden tests
#
# Sizes from 1x1x1 up, `K` shorter and longer than a block, transposed and strided operands on
# either side, several tiles and group sizes, bfloat16 and TF32 (with its own tolerance) on a GPU,
# and float16 inputs whose running sums pass 65504 before they cancel, which only a float32
# accumulator survives.

# %% nbgrader={"grade": true, "grade_id": "test-matmul-hidden", "points": 3}
check_matmul(matmul, 5, 7, 3, torch.float16, trials=1)  # a tiny case; the hidden tests follow
### BEGIN HIDDEN TESTS
small = dict(block_m=16, block_n=16, block_k=16, group_m=1, num_warps=2, num_stages=2)
grouped_tiles = dict(block_m=32, block_n=64, block_k=32, group_m=2, num_warps=4, num_stages=2)
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE.supports("bf16") else [])
for dtype in DTYPES:
    for shape in [(1, 1, 1), (37, 53, 71)]:
        check_matmul(matmul, *shape, dtype, trials=1)
# each layout is a separately compiled kernel on a GPU: float32 layouts are checked off the GPU
for dtype in DEVICE.pick(gpu=(torch.float16,), interpreter=(torch.float32, torch.float16)):
    for layout in [("contiguous", "transposed"), ("transposed", "contiguous"), "strided",
                   "transposed"]:
        check_matmul(lambda a, b, out: matmul(a, b, out, **small), 37, 29, 53, dtype,
                     layout=layout, trials=1)
check_matmul(lambda a, b, out: matmul(a, b, out, **small), 20, 18, 5, torch.float16)  # K < BLOCK_K
check_matmul(lambda a, b, out: matmul(a, b, out, **grouped_tiles), 150, 200, 100, torch.float16,
             layout=("strided", "contiguous"), trials=1)
check_matmul(lambda a, b, out: matmul(a, b, out, block_m=16, block_n=16, block_k=64, num_warps=2,
                                      num_stages=2),
             16, 16, 1024, torch.float16, values="cancel", trials=1)
if DEVICE.supports("tf32"):  # TF32 asked for on purpose, with the tolerance TF32 needs
    check_matmul(lambda a, b, out: matmul(a, b, out, tf32=True), 37, 53, 71, torch.float32,
                 tf32=True, trials=1)
print(f"hidden tests passed: dtypes {[str(d)[6:] for d in DTYPES]}, layouts, tiles, long K")
### END HIDDEN TESTS

# %% [markdown]
# ### Speed (graded on a GPU)
#
# With the launcher's float16 defaults (128x256 tiles, `BLOCK_K=64`, 8 warps, 3 stages, groups of
# 8; v3 explains them), your kernel must reach 0.6x the speed of cuBLAS (`torch.matmul`) on
# float16 matrices of side `SPEED_N` = 4096, timed alternately in the same run. Inputs change
# before every timed call and randomly drawn outputs are checked; a rate above cuBLAS's is flagged
# and scores 0. A kernel that casts its blocks to float32 before `tl.dot` (idling the float16
# tensor cores) or uses 16x16 tiles falls short; the course's tests check that it does.

# %% nbgrader={"grade": true, "grade_id": "speed-matmul-vs-cublas", "points": 2}
n_speed = SPEED_N
a_speed = torch.randn(n_speed, n_speed, device=DEVICE.torch_device, dtype=torch.float16)
b_speed = torch.randn(n_speed, n_speed, device=DEVICE.torch_device, dtype=torch.float16)
c_speed = torch.empty(n_speed, n_speed, device=DEVICE.torch_device, dtype=torch.float16)
c_cublas = torch.empty_like(c_speed)


def verify_speed():
    rtol, atol = matmul_tolerance(a_speed, b_speed, torch.float16)
    checks.compare(c_speed, a_speed.double() @ b_speed.double(), rtol=rtol, atol=atol,
                   context="after a timed call")


cublas = perf.Baseline("cuBLAS (torch.matmul)",
                       lambda: torch.matmul(a_speed, b_speed, out=c_cublas), at_least=0.6)
perf.grade(perf.Case(lambda: matmul(a_speed, b_speed, c_speed), kernels=["matmul_kernel"],
                     inputs=(a_speed, b_speed), out=c_speed, verify=verify_speed,
                     baselines=[cublas], flops=2 * n_speed**3, dtype=torch.float16), points=2)

# %% [markdown]
# ## v2 · L2-aware ordering of the tiles
#
# CUDA promises no order in which a grid's programs start, but in practice they start roughly by
# id, as many as fit on the SMs: one *wave*. In **row-major** order (`GROUP_M = 1`) a wave covers a
# few whole rows of tiles: those rows' blocks of $A$, but *every* column block of $B$. If the
# wave's blocks fit in L2, each comes from device memory once; if not, blocks are evicted before
# their next use and fetched again. **Grouped** order launches tiles in groups of `GROUP_M` rows,
# walking down the columns within a group: a wave covers a squarer patch of $C$ and needs fewer
# distinct blocks. The kernel's first lines do this with `tl.swizzle2d`.
#
# ![6 x 6 C tiles in row-major and grouped order](figures/launch_order.svg)
#
# *The same 9 programs need 8 blocks of A and B in row-major order and 6 in grouped order; fewer
# distinct blocks means more of them are found in L2.*

# %% [markdown]
# ### Exercise 2 · the grouped mapping in plain Python (3 points)
#
# Write `grouped_pid(pid, num_pid_m, num_pid_n, group_m)`: the tile `(pid_m, pid_n)` that program
# `pid` computes, as `tl.swizzle2d` maps it. Ids run through group 0, then group 1, ...; a group
# has `group_m` rows of tiles (**the last has fewer when `group_m` does not divide `num_pid_m`**),
# and inside a group consecutive ids go *down* a column before the next. The picture below draws
# your function.

# %% nbgrader={"grade_id": "grouped-pid", "solution": true}
def grouped_pid(pid: int, num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[int, int]:
    """(pid_m, pid_n) of the tile that program `pid` computes in grouped launch order."""
    ### BEGIN SOLUTION
    tiles_per_group = group_m * num_pid_n
    group = pid // tiles_per_group
    first_m = group * group_m
    rows = min(num_pid_m - first_m, group_m)  # the last group may be shorter
    within = pid % tiles_per_group
    return first_m + within % rows, within // rows
    ### END SOLUTION


# %%
# The ground truth is what the kernel does: this small kernel runs the same tl.swizzle2d line as
# matmul_kernel and writes down each program's tile.
@triton.jit
def launch_order_kernel(out_ptr, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    pid_m, pid_n = tl.swizzle2d(pid // num_pid_n, pid % num_pid_n, num_pid_m, num_pid_n, GROUP_M)
    tl.store(out_ptr + 2 * pid, pid_m)
    tl.store(out_ptr + 2 * pid + 1, pid_n)


def kernel_order(num_pid_m, num_pid_n, group_m):
    """[(pid_m, pid_n) for each pid], as computed on the device by tl.swizzle2d."""
    out = torch.empty(2 * num_pid_m * num_pid_n, dtype=torch.int32, device=DEVICE.torch_device)
    launch_order_kernel[(num_pid_m * num_pid_n,)](out, num_pid_m, num_pid_n, GROUP_M=group_m)
    return [tuple(pair) for pair in out.view(-1, 2).tolist()]


def check_order(num_pid_m, num_pid_n, group_m, expected=None):
    expected = expected or kernel_order(num_pid_m, num_pid_n, group_m)
    got = [checks.call_graded(grouped_pid, pid, num_pid_m, num_pid_n, group_m)
           for pid in range(num_pid_m * num_pid_n)]
    for pid, (mine, want) in enumerate(zip(got, expected, strict=True)):
        assert all(isinstance(v, int) for v in mine), f"pid {pid}: return Python ints, got {mine!r}"
        assert tuple(mine) == tuple(want), (
            f"grid {num_pid_m}x{num_pid_n} tiles, group_m={group_m}: program {pid} should compute "
            f"tile {tuple(want)}, grouped_pid says {tuple(mine)}")


# %% nbgrader={"grade": true, "grade_id": "test-grouped-pid-visible", "points": 1}
check_order(5, 4, 2)  # 5 rows of tiles in groups of 2: the last group has one row
print("visible test passed: 5x4 tiles, groups of 2")

# %% nbgrader={"grade": true, "grade_id": "test-grouped-pid-hidden", "points": 2}
check_order(4, 3, 1)  # group_m=1 is row-major; the hidden tests follow
### BEGIN HIDDEN TESTS
for case in [(1, 1, 1), (1, 7, 4), (7, 1, 3), (8, 8, 4), (9, 5, 4), (6, 6, 8), (3, 11, 2)]:
    check_order(*case)


def _reference_order(num_pid_m, num_pid_n, group_m):
    order = []
    for first in range(0, num_pid_m, group_m):
        rows = min(group_m, num_pid_m - first)
        order += [(first + r, c) for c in range(num_pid_n) for r in range(rows)]
    return order


rng = np.random.default_rng()
for _ in range(200):
    case = (int(rng.integers(1, 40)), int(rng.integers(1, 40)), int(rng.integers(1, 12)))
    check_order(*case, expected=_reference_order(*case))
print("hidden tests passed: edge grids and 200 random ones against an independent reference")
### END HIDDEN TESTS

# %% [markdown]
# Each square is a tile of $C$, coloured and numbered by launch order; the first wave (here 16
# programs) is outlined, and the titles count the distinct blocks of $A$ and $B$ it needs. Then
# the same at full size: for the float16 default tiles (128x256) at `LADDER_N`, the bytes of
# distinct blocks one wave (one program per SM) needs in each order, against this GPU's L2 (on the
# CPU, the H100 SXM datasheet's: 132 SMs, 50 MB).

# %%
orders = {f"GROUP_M={g}": [grouped_pid(p, 8, 8, g) for p in range(8 * 8)] for g in (1, 4)}
plots.launch_orders(orders, num_pid_m=8, num_pid_n=8, wave=16)


def wave_bytes(n, block_m, block_n, group_m, programs, itemsize=2):
    """Bytes of distinct A row-blocks and B column-blocks read by the first `programs` tiles."""
    num_pid_m, num_pid_n = triton.cdiv(n, block_m), triton.cdiv(n, block_n)
    tiles = [grouped_pid(p, num_pid_m, num_pid_n, group_m)
             for p in range(min(programs, num_pid_m * num_pid_n))]
    rows = len({m for m, _ in tiles})
    cols = len({c for _, c in tiles})
    return (rows * block_m * n + cols * block_n * n) * itemsize


if DEVICE.is_gpu:
    props = torch.cuda.get_device_properties(0)
    sms, l2 = props.multi_processor_count, props.L2_cache_size
else:
    sms, l2 = 132, 50 * 2**20  # H100 SXM datasheet
n = max(LADDER_N, 8192) if not DEVICE.is_gpu else LADDER_N
for group_m in (1, 8):
    need = wave_bytes(n, 128, 256, group_m, sms)
    print(f"n={n}, GROUP_M={group_m}: one wave of {sms} tiles reads {need / 2**20:.0f} MiB of "
          f"distinct blocks for the same work ({need / l2:.1f}x the {l2 / 2**20:.0f} MiB L2)")

# %% [markdown]
# ## Measured: v1 against v2
#
# v1 and v2 differ only in `GROUP_M`: 128x128 tiles, `BLOCK_K=64`, 4 warps, one stage, at
# `LADDER_N`, each timed against cuBLAS in the same run. The cell also counts, in your kernel's PTX
# (the GPU assembly Triton generates) for float16 and float32, the tensor-core instructions
# (`wgmma.mma_async` on Hopper, `mma.sync`) and the plain float32 multiply-adds (`fma.rn.f32`).

# %%
VERSIONS = {
    "v1 blocked": dict(block_m=128, block_n=128, block_k=64, group_m=1, num_warps=4, num_stages=1),
    "v2 grouped": dict(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=4, num_stages=1),
}
if MEASURED:
    with recorded.cell("04_matmul/v1-v2"):
        n = LADDER_N
        a = torch.randn(n, n, device=DEVICE.torch_device, dtype=torch.float16)
        b = torch.randn(n, n, device=DEVICE.torch_device, dtype=torch.float16)
        c = torch.empty(n, n, device=DEVICE.torch_device, dtype=torch.float16)
        flops = matmul_flops(n, n, n)
        cublas = measure(f"cuBLAS ({n})", lambda: torch.matmul(a, b, out=c), n, n, n)
        for name, cfg in VERSIONS.items():
            t = measure(f"{name} ({n})", lambda cfg=cfg: matmul(a, b, c, **cfg), n, n, n)
            print(f"{name}: {t.per_second(flops) / 1e12:.0f} TFLOP/s, "
                  f"{cublas.median_ms / t.median_ms:.2f}x cuBLAS ({t})")
        print(f"cuBLAS: {cublas.per_second(flops) / 1e12:.0f} TFLOP/s\n")
        ptx_cases = [("float16", torch.float16, False),
                     ("float32, input_precision='ieee'", torch.float32, False),
                     ("float32, input_precision='tf32'", torch.float32, True)]
        for label, dtype, tf32 in ptx_cases if DEVICE.is_gpu else []:  # PTX exists once compiled
            cfg = DEFAULT_CONFIG[dtype]
            x = torch.empty(256, 256, device=DEVICE.torch_device, dtype=dtype)
            compiled = matmul_kernel.warmup(
                x, x, x, 256, 256, 256, 256, 1, 256, 1, 256, 1, BLOCK_M=cfg["block_m"],
                BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"], GROUP_M=cfg["group_m"],
                INPUT_PRECISION="tf32" if tf32 else "ieee", num_warps=cfg["num_warps"],
                num_stages=cfg["num_stages"], grid=(1,))
            ptx = compiled.asm["ptx"]
            counts = ", ".join(f"{ptx.count(op)} {op}" for op in ("wgmma.mma_async", "mma.sync", "fma.rn.f32"))
            print(f"PTX of matmul_kernel, {label}: {counts}")
else:
    for cfg in VERSIONS.values():
        check_matmul(lambda a, b, out, cfg=cfg: matmul(a, b, out, **cfg), 70, 90, 130,
                     torch.float16, trials=1)
    print("v1 and v2 validated in the interpreter; on a GPU this cell times both against cuBLAS.")
    recorded.show("04_matmul/v1-v2")

# %% [markdown]
# ## v3 · Software pipelining and warps
#
# So far each step of the K loop waits for its blocks before the tensor cores start. With
# `num_stages = S`, Triton software-pipelines the loop: S buffers of $A$ and $B$ blocks in shared
# memory, loads for later steps issued while the current step computes, so memory latency hides
# behind arithmetic (`triton.Config` documentation: "Mostly useful for matrix multiplication
# workloads on SM80+ GPUs"). Each stage costs another $(B_M + B_N) B_K s$ bytes of shared memory.
#
# `num_warps` is how many warps share a tile. More warps give each thread a smaller piece of the
# accumulator (fewer registers) and the scheduler more independent work; too many for a small tile
# leaves each too little. The sweep measures every combination on 128x128x64 tiles in groups of 8,
# then the launcher's default (128x256 tiles, 8 warps, 3 stages).

# %%
STAGES = [1, 2, 3, 4]
WARPS = [4, 8]
if MEASURED:
    with recorded.cell("04_matmul/stages-warps"):
        n = LADDER_N
        flops = matmul_flops(n, n, n)
        sweep = np.full((len(WARPS), len(STAGES)), np.nan)
        combos = [(w, s) for w in WARPS for s in STAGES]
        for w, s in tqdm(combos, desc="num_warps x num_stages"):
            cfg = dict(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=w, num_stages=s)
            try:
                t = timing.bench(lambda cfg=cfg: matmul(a, b, c, **cfg))
            except triton.runtime.OutOfResources as exc:  # does not fit: leave the cell blank
                print(f"num_warps={w}, num_stages={s}: {exc}")
                continue
            sweep[WARPS.index(w), STAGES.index(s)] = t.per_second(flops) / 1e12
        best_w, best_s = np.unravel_index(np.nanargmax(sweep), sweep.shape)
        VERSIONS["v3 pipelined"] = dict(block_m=128, block_n=128, block_k=64, group_m=8,
                                        num_warps=WARPS[best_w], num_stages=STAGES[best_s])
        VERSIONS["v3 large tile"] = DEFAULT_CONFIG[torch.float16]
        for name in ("v3 pipelined", "v3 large tile"):
            t = measure(f"{name} ({n})", lambda name=name: matmul(a, b, c, **VERSIONS[name]), n, n, n)
            print(f"{name} {VERSIONS[name]}: {t.per_second(flops) / 1e12:.0f} TFLOP/s, "
                  f"{LADDER[f'cuBLAS ({n})'].seconds * 1e3 / t.median_ms:.2f}x cuBLAS")
        plots.heatmap(sweep, STAGES, WARPS, xlabel="num_stages", ylabel="num_warps",
                      title=f"TFLOP/s, 128x128x64 tiles, n={n}, float16")
else:
    for s, w in [(1, 4), (3, 8)]:
        cfg = dict(block_m=64, block_n=32, block_k=16, group_m=8, num_warps=w, num_stages=s)
        check_matmul(lambda a, b, out, cfg=cfg: matmul(a, b, out, **cfg), 70, 90, 40,
                     torch.float16, trials=1)
    print("The interpreter ignores num_stages and num_warps (they are compiler settings): the "
          "results are validated here, and a GPU run measures the sweep.")
    recorded.show("04_matmul/stages-warps")

# %% [markdown]
# ## The ladder on the roofline
#
# Every version measured above on this GPU's roofline, with cuBLAS at the same sizes. Each point's
# intensity is the whole problem's (its least traffic), so versions of one size share an abscissa
# and differ in height: the gap to the fp16 roof is what each rung left on the table. The fastest
# is kept in your course record for 08.
#
# Then each rung's signature in the GPU's counters (Nsight Compute, each version in a process of
# its own, clocks locked, caches flushed before each pass), v0 and v1 at `NAIVE_N`, v1 to v3 at
# `LADDER_N`. **v0 → v1**, `tl.dot` on tiles: the tensor pipes go from idle to busy (at `NAIVE_N`
# both read A and B from DRAM once: L2 holds them). **v1 → v2**, grouped order: the L2 hit rate
# up, DRAM bytes down. **v2 → v3**, pipelining: the top stall no longer a wait on global memory
# (`long_scoreboard`).

# %%
def matmul_problem(n, cfg, naive=False):
    """What profile.each calls in the profiled process: an n^3 float16 matmul by v0, or by
    matmul_kernel with the settings cfg."""
    a, b, c = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(3))
    if naive:
        return lambda: matmul_naive_kernel[(n, n)](a, b, c, n, n, n, n, 1, n, 1, n, 1,
                                                   BLOCK_K=64, num_warps=1)
    grid = (triton.cdiv(n, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]),)
    return lambda: matmul_kernel[grid](
        a, b, c, n, n, n, n, 1, n, 1, n, 1, BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
        BLOCK_K=cfg["block_k"], GROUP_M=cfg["group_m"], INPUT_PRECISION="ieee",
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])


NOT_PROFILED = profile.unavailable() or (None if RUN_BENCHMARKS else "RUN_BENCHMARKS is off")
if MEASURED and LADDER:
    with recorded.cell("04_matmul/ladder-roofline"):
        roofline.show(CEILINGS, list(LADDER.values()), precision="fp16",
                      title=f"The matmul ladder on {DEVICE.name} (float16)")
        for point in LADDER.values():
            print(f"{point.label:28s} {point.achieved / 1e12:7.1f} TFLOP/s")
        best = max((p for p in LADDER.values() if p.label.startswith("v3")), key=lambda p: p.achieved)
        results.record("04_matmul", f"matmul {best.label}", flops=best.flops,
                       bytes_moved=best.bytes_moved, seconds=best.seconds, precision="fp16")
        if NOT_PROFILED is None:
            rungs = {f"v0 naive ({NAIVE_N})": (NAIVE_N, "v1 blocked", True)}
            rungs |= {f"v1 blocked ({NAIVE_N})": (NAIVE_N, "v1 blocked", False)}
            rungs |= {f"{v} ({LADDER_N})": (LADDER_N, v, False)
                      for v in ("v1 blocked", "v2 grouped", "v3 pipelined")}
            profile.compare(profile.each({
                label: profile.Call(matmul_problem,
                                    ["matmul_naive_kernel" if naive else "matmul_kernel"],
                                    {"n": n, "cfg": VERSIONS[v], "naive": naive})
                for label, (n, v, naive) in rungs.items()
            }), columns=("duration", "dram_read", "tensor", "l2_hit", "stall"))
        else:
            print(f"Not profiled here: {NOT_PROFILED}.")
else:
    print("On a GPU this cell places v0-v3 and cuBLAS on the measured roofline and profiles "
          "them; the interpreter has nothing to time.")
    recorded.show("04_matmul/ladder-roofline")

# %% [markdown]
# ## Dtypes: float32, TF32, float16, bfloat16
#
# The tensor cores multiply narrow formats. float16 and bfloat16 go to them directly; float32 only
# after rounding to **TF32**, a 19-bit format with float32's 8 exponent bits and 10 mantissa bits,
# as many as float16 (bfloat16 keeps 7; NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020).
# Otherwise float32 runs on the ordinary units, at the datasheet's much lower fp32 rate. Two
# defaults differ:
#
# - `tl.dot` uses TF32 for float32 inputs unless `input_precision="ieee"` (Triton documentation,
#   `triton.language.dot`).
# - `torch.matmul` on float32 does *not*, unless `torch.backends.cuda.matmul.allow_tf32 = True`;
#   the default has been `False` since PyTorch 1.12 (PyTorch documentation, "TensorFloat-32 (TF32)
#   on Ampere (and later) devices").
#
# So a Triton kernel with the defaults, timed against `torch.matmul` on float32, races TF32 against
# true float32 and "wins". Like for like is TF32 against TF32, IEEE against IEEE. The next cell
# measures what TF32 costs in accuracy; the one after times `torch.matmul` and your kernel in each
# precision, ending with the misleading comparison and the honest one.

# %%
def round_to_tf32(x):
    """float32 -> the nearest value with a 10-bit mantissa (round to nearest, ties to even)."""
    bits = x.contiguous().view(torch.int32)
    keep = (bits >> 13) & 1
    rounded = (bits + 0x0FFF + keep) & ~0x1FFF
    return rounded.view(torch.float32)


gen = checks.generator(checks.new_seed(), where="cpu")
n = 256
a32 = checks.randn((n, n), gen=gen)
b32 = checks.randn((n, n), gen=gen)
exact = a32.double() @ b32.double()
formats = {
    "float32": (a32, b32),
    "TF32 (emulated)": (round_to_tf32(a32), round_to_tf32(b32)),
    "bfloat16": (a32.bfloat16(), b32.bfloat16()),
    "float16": (a32.half(), b32.half()),
}
print(f"{n}x{n} @ {n}x{n}: inputs rounded to each format, products summed in float32 "
      "(as the tensor cores accumulate), compared with the exact product:")
for name, (x, y) in formats.items():
    err = ((x.float() @ y.float()).double() - exact).abs().max() / exact.abs().max()
    print(f"  {name:16s} max error / max |C| = {err:.1e}")


# %%
@contextmanager
def torch_tf32(enabled):
    """torch.matmul on float32 with or without TF32, restored afterwards."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


if MEASURED:
    with recorded.cell("04_matmul/dtypes"):
        n = DTYPE_N
        flops = matmul_flops(n, n, n)
        rows = []
        cases = [("float32 (IEEE)", torch.float32, False), ("float32 via TF32", torch.float32, True),
                 ("float16", torch.float16, False)]
        cases += [("bfloat16", torch.bfloat16, False)] if DEVICE.supports("bf16") else []
        times = {}
        for label, dtype, tf32 in tqdm(cases, desc="dtypes"):
            a = torch.randn(n, n, device=DEVICE.torch_device).to(dtype)
            b = torch.randn(n, n, device=DEVICE.torch_device).to(dtype)
            c = torch.empty(n, n, device=DEVICE.torch_device, dtype=dtype)
            exact = a.double() @ b.double()
            with torch_tf32(tf32):
                theirs = timing.bench(lambda a=a, b=b, c=c: torch.matmul(a, b, out=c))
                their_err = float((c.double() - exact).abs().max() / exact.abs().max())
            mine = timing.bench(lambda a=a, b=b, c=c, tf32=tf32: matmul(a, b, c, tf32=tf32))
            my_err = float((c.double() - exact).abs().max() / exact.abs().max())
            times[label] = (mine.median_ms, theirs.median_ms)
            print(f"{label:18s} torch {theirs.per_second(flops) / 1e12:6.0f} TFLOP/s (error {their_err:.1e})"
                  f"   yours {mine.per_second(flops) / 1e12:6.0f} TFLOP/s (error {my_err:.1e})")
        misleading = times["float32 (IEEE)"][1] / times["float32 via TF32"][0]
        honest = times["float32 via TF32"][1] / times["float32 via TF32"][0]
        print(f"\nyour TF32 kernel against torch's float32 default: {misleading:.2f}x its speed "
              "(TF32 against IEEE float32: not like for like)")
        print(f"your TF32 kernel against torch with TF32 allowed: {honest:.2f}x its speed (like for like)")
else:
    print("On a GPU this cell times torch.matmul and your kernel in float32 (IEEE), TF32, float16 "
          "and bfloat16, with the error of each against float64, and shows how a TF32 kernel "
          "'beats' torch's float32 default; the interpreter cannot time, and computes tl.dot in "
          "float32 whatever input_precision says.")
    recorded.show("04_matmul/dtypes")

# %% [markdown]
# ## Coalescing in matmul: transposed operands and strides
#
# A warp's load coalesces when its threads read consecutive addresses (CUDA C++ Best Practices
# Guide, "Coalesced Access to Global Memory"), and which direction is consecutive depends on the
# layout: along a row for a row-major $B$, down a column for $B$ given as the transpose of a
# row-major $N \times K$ tensor. Taking strides, the kernel needs no copy: `torch.randn(N, K).t()`
# is the same memory with strides `(1, K)`. Triton compiles a separate version of a kernel when an
# integer argument equals 1 (it becomes a constant) or is a multiple of 16
# (`triton/backends/compiler.py` and `python/src/specialize.cc` in Triton's source), so it knows
# which side of each block is contiguous and lays out the loads to match. The cell checks a
# transposed view and, on a GPU, measures each layout. Should the naive v0, which reads a column
# of $B$ per program, care more than the blocked kernel?

# %%
gen = checks.generator(checks.new_seed())
base = checks.randn((19, 37), gen=gen)  # a row-major N x K tensor
b_t = base.t()  # K x N, the same memory
print(f"b_t: shape {tuple(b_t.shape)}, strides {b_t.stride()}, contiguous: {b_t.is_contiguous()}, "
      f"same memory as base: {b_t.data_ptr() == base.data_ptr()}")
a_small = checks.randn((23, 37), gen=gen)
out_small = torch.empty(23, 19, device=DEVICE.torch_device)
rtol_t, atol_t = matmul_tolerance(a_small, b_t, torch.float32)
checks.compare(matmul(a_small, b_t, out_small), a_small.double() @ b_t.double(), rtol=rtol_t,
               atol=atol_t)
print("matmul on the transposed view is correct, and no copy was made")

if MEASURED:
    with recorded.cell("04_matmul/layouts"):
        layouts = {}
        n = SPEED_N
        a = torch.randn(n, n, device=DEVICE.torch_device, dtype=torch.float16)
        b = torch.randn(n, n, device=DEVICE.torch_device, dtype=torch.float16)
        c = torch.empty(n, n, device=DEVICE.torch_device, dtype=torch.float16)
        a_col, b_col = a.t().contiguous().t(), b.t().contiguous().t()  # same values, column-major
        runs = {
            "A, B row-major": lambda: matmul(a, b, c),
            "B column-major (transposed view)": lambda: matmul(a, b_col, c),
            "A column-major (transposed view)": lambda: matmul(a_col, b, c),
            "B column-major, copied first": lambda: matmul(a, b_col.contiguous(), c),
        }
        flops = matmul_flops(n, n, n)
        for name, fn in tqdm(runs.items(), desc="layouts"):
            layouts[name] = timing.bench(fn)
        base_ms = layouts["A, B row-major"].median_ms
        for name, t in layouts.items():
            print(f"blocked, n={n}: {name:34s} {t.per_second(flops) / 1e12:5.0f} TFLOP/s "
                  f"({t.median_ms / base_ms:.2f}x the time)")
        n = NAIVE_N
        a, b, c = a[:n, :n].contiguous(), b[:n, :n].contiguous(), c[:n, :n].contiguous()
        b_col = b.t().contiguous().t()
        row = timing.bench(lambda: matmul_naive(a, b, c))
        col = timing.bench(lambda: matmul_naive(a, b_col, c))
        print(f"naive v0, n={n}: B row-major {row.median_ms:.3f} ms, B column-major "
              f"{col.median_ms:.3f} ms (column-major takes {col.median_ms / row.median_ms:.2f}x the "
              "time of row-major)")
else:
    print("On a GPU this cell times the blocked kernel with each operand row- or column-major "
          "(and with a copy first), and v0 with B in both layouts.")
    recorded.show("04_matmul/layouts")

# %% [markdown]
# ## Summary
#
# - A matmul does $2MNK$ FLOPs on at least $(MK+KN+MN)s$ bytes: large ones are compute bound, but
#   only for a kernel that reuses what it loads. v0 requests every element $K$ times.
# - A `BLOCK_M x BLOCK_N` tile requests $2B_MB_N/((B_M+B_N)s)$ FLOP per byte, for $(B_M+B_N)B_K s$
#   bytes of shared memory per stage and $4B_MB_N$ bytes of accumulator.
# - `tl.dot` on float16/bfloat16 blocks runs on the tensor cores; accumulate in float32.
# - Grouped launch order (`tl.swizzle2d`, `GROUP_M`) shrinks the blocks a wave needs, so more come
#   from L2.
# - `num_stages` overlaps loads with compute for shared memory; `num_warps` splits a tile among
#   threads. Both are measured, not guessed.
# - `tl.dot` on float32 defaults to TF32, `torch.matmul` does not: compare like with like and state
#   the precision with every speed claim.
# - Strides make transposed and sliced operands work without copies.

# %% [markdown]
# ## Further exercises
#
# 1. Rerun v1 and v2 at `LADDER_N` = 4096 and 8192 beside the wave-footprint numbers. From which
#    size does grouping pay on your GPU?
# 2. Replace the load masks on $M$ and $N$ with `offs_m % M` and `offs_n % N` (rows past the end
#    then read valid memory whose results are never stored). Is it faster at 4000³?
# 3. Fuse an epilogue, `out = relu(A @ B + bias)` with `bias` of shape `(N,)`, applied to the
#    accumulator before the store. What does it cost?
# 4. Try `input_precision="tf32x3"` on float32 inputs: its speed and error against float64, beside
#    `"ieee"` and `"tf32"`.
