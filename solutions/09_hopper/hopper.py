# %% [markdown]
# # 09 · Hopper
#
# *Reading time: about 13 minutes.*
#
# 05's tuned matmul reaches cuBLAS on large problems, and 07's attention kernel stops at
# FlashAttention-2's loop. What took attention from about 35% to about 75% of an H100's fp16 peak
# (FlashAttention-3, Shah et al. 2024) was not new mathematics: it was the machine. Hopper (sm_90)
# adds a Tensor Memory Accelerator that copies whole tiles while the tensor cores work, lets warps
# take separate roles (some copy, some multiply), and multiplies float8 at twice the float16 rate
# (NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022). Triton reaches all three. This
# notebook continues 05's matmul one version at a time, each checked, then timed on your GPU, and
# ends by carrying what pays to 07's attention kernel.
#
# **You will learn:** to write a persistent kernel that walks the output tiles in a snake of
# grouped bands;
# to size tensor-descriptor blocks against shared memory; when Triton actually warp-specializes a
# loop, read from the compiled kernel; where the scales of a float8 matmul go and what float8
# costs in accuracy; which of these steps pays on which problem; and how each step shows in the
# GPU's counters.

# %%
from grader.runtime import device

DEVICE = device.setup()

import math

import gemm  # 05's gemm.py, released beside this notebook too
import numpy as np
import torch
import triton
import triton.language as tl

from grader.runtime import attention, checks, gpu_compile, hints, perf, profile, recorded, timing

print(f"Kernels run on {DEVICE.describe()}; tensors for them live on '{DEVICE.torch_device}'.")
HOPPER = DEVICE.supports("sm_90")
if DEVICE.is_gpu and not HOPPER:
    print(DEVICE.explain("sm_90"), "Versions 2 to 4 are checked here where they can run; their "
          "Hopper-only parts (warp specialization, float8) score nothing on this GPU.")

# %% tags=["parameters"]
# You may change these while you work; grading restores this cell as released.
SIZES = DEVICE.pick(gpu=[2048, 4096, 8192], interpreter=[64])  # square problems of the ladder
SPEED_N = DEVICE.pick(gpu=4096, interpreter=64)  # the graded float16 problem (float8: twice)
RUN_BENCHMARKS = True

# %% [markdown]
# ## The starting point, and how each version is checked
#
# Every version below computes `C = A @ B` with a float32 accumulator and is checked as in 04 and
# 05: fresh random inputs, a float64 reference, and a tolerance of the output's rounding plus
# that of a $K$-term float32 sum, `4 * sqrt(K) * 2**-24 * max(|A| @ |B|)` (Higham and Mary,
# *SIAM J. Sci. Comput.* 41(5), 2019). Tile sizes come in a dict per version: the tiles measured
# best on an H200 for the GPU, small ones in the interpreter, where a persistent grid of
# `gemm.num_sms()` programs (a stand-in of 4 there) still gives each program several tiles.
#
# In the interpreter, Triton's `tl.dot` on bfloat16 gives wrong results (Triton 3.6 and 3.9), so
# correctness runs in float16 here; bfloat16 is timed on a GPU only.

# %%
def matmul_reference(a, b):  # reads M*K + K*N, writes M*N
    return a @ b


def matmul_inputs(M, N, K, dtype=torch.float16):
    """make_inputs(gen) for checks.check: A (M, K) and B (K, N), row-major."""
    def make(gen):
        return (checks.randn((M, K), gen=gen, dtype=dtype),
                checks.randn((K, N), gen=gen, dtype=dtype))
    return make


def sum_tolerance(a, b):
    """atol of a float32 sum of K products, for these inputs."""
    K = a.shape[1]
    return 4 * math.sqrt(K) * 2.0**-24 * float((a.double().abs() @ b.double().abs()).max())


def check_matmul(fn, M, N, K, kernels=(), dtype=torch.float16):
    seed = checks.new_seed()
    make = matmul_inputs(M, N, K, dtype)
    atol = sum_tolerance(*make(checks.generator(seed))) + checks.tolerance(dtype)[1]
    checks.check(fn, matmul_reference, make, trials=1, seed=seed, atol=atol, kernels=kernels)


def tflops(M, N, K, t):
    return t.per_second(2 * M * N * K) / 1e12


NOT_SPECIALIZED = dict(WARP_SPECIALIZE=False, FLATTEN=True)  # version 3 too, until Exercise 3
GPU_TILES = {  # from a first search on an H200 (the course's probe of 2026-11-27)
    "v1": dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3),
    "v2": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3,
               **NOT_SPECIALIZED),
    "v3": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_stages=3, **NOT_SPECIALIZED),
    "v4": dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3),
}
SMALL_TILES = {  # the interpreter: several tiles per program on small problems
    "v1": dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=1),
    "v2": dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=1,
               **NOT_SPECIALIZED),
    "v3": dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_stages=1, **NOT_SPECIALIZED),
    "v4": dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, num_warps=4, num_stages=1),
}
TILES = DEVICE.pick(gpu=GPU_TILES, interpreter=SMALL_TILES)
print(f"{gemm.num_sms()} programs in a persistent grid here")

# %% [markdown]
# ## Version 1 · persistent: one program per SM
#
# 04 and 05 launch one program per output tile, in waves as SMs come free. A **persistent**
# kernel launches one program per SM (`gemm.num_sms()`: 132 on an H100 SXM, per its
# datasheet), each looping over tiles `pid`, `pid + NUM_SMS`, ... until they run out: no
# program waits to be scheduled, setup is paid once, and stores may overlap the next tile's
# loads. The tiles go in 04's bands of `GROUP_M` tile rows (the last may be shorter), numbered
# down each column, but odd bands go right to left, from the B columns the last one ended on:
# `tl.swizzle2d` gives 04's order, not this **snake**.
#
# ### Exercise 1 · the persistent tile loop (4 points)
#
# 1. `tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)` (`@triton.jit`): `(pid_m, pid_n)` of
#    tile number `tile` in the snake order.
# 2. `matmul_persistent_kernel`: 04's blocked matmul as a loop over the program's tiles.
#    `NUM_SMS` is the grid's size: where does program `pid` start, what is its step, where does
#    it stop? `tl.range(start, end, step, flatten=True)` lets the compiler pipeline both loops
#    as one.
#
# The speed point asks for 0.30x cuBLAS: version 1 keeps 04's pointer loads, and an H200 ran it
# at 0.44x to 0.52x (the course's probe, November 2026). Persistence alone is not speed.

# %% nbgrader={"grade_id": "persistent-kernel", "solution": true}
@triton.jit
def tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of output tile `tile` in the snake of grouped bands."""
    ### BEGIN SOLUTION
    tiles_per_band = GROUP_M * num_pid_n
    band = tile // tiles_per_band
    first_m = band * GROUP_M
    rows = tl.minimum(num_pid_m - first_m, GROUP_M)  # the last band may be shorter
    in_band = tile % tiles_per_band
    col = in_band // rows
    pid_n = tl.where(band % 2 == 0, col, num_pid_n - 1 - col)  # odd bands: right to left
    return first_m + in_band % rows, pid_n
    ### END SOLUTION


@triton.jit
def matmul_persistent_kernel(
    # pointers
    a_ptr,  # A, (M, K)
    b_ptr,  # B, (K, N)
    c_ptr,  # C, (M, N), written
    # sizes
    M,
    N,
    K,
    # strides (elements)
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    # compile-time constants
    BLOCK_M: tl.constexpr,  # rows of C per tile
    BLOCK_N: tl.constexpr,  # columns of C per tile
    BLOCK_K: tl.constexpr,  # depth of one step along K
    GROUP_M: tl.constexpr,  # tile rows per band of the snake order
    NUM_SMS: tl.constexpr,  # programs in the grid, and the step of each one's walk
):
    ### BEGIN SOLUTION
    # -- this program's tiles: pid, pid + NUM_SMS, ... below num_tiles
    start = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    offs_k = tl.arange(0, BLOCK_K)  # (BLOCK_K,)
    # the store keeps a tile counter of its own, as Triton's persistent-matmul tutorial does:
    # with the loops flattened, the pipeliner then shares no value between a tile's first loads
    # and its store
    tile_c = start - NUM_SMS
    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
        # -- 04's K loop, a mask at every edge
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # (BLOCK_M, BLOCK_N)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)  # (BLOCK_M, BLOCK_N) float32
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        # -- epilogue: the tile, in the output's dtype
        tile_c += NUM_SMS
        pid_m_c, pid_n_c = tile_coords(tile_c, num_pid_m, num_pid_n, GROUP_M)
        offs_cm = pid_m_c * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
        offs_cn = pid_n_c * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
    ### END SOLUTION


# %%
def matmul_persistent(a, b, out, num_programs=None, **tiles):
    """out = a @ b with matmul_persistent_kernel: min(num_programs, tiles) programs, by default
    one per SM; `tiles` overrides TILES["v1"]."""
    M, K = a.shape
    N = b.shape[1]
    meta = {**TILES["v1"], **tiles}
    num_tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
    programs = min(num_programs or gemm.num_sms(), num_tiles)
    matmul_persistent_kernel[(programs,)](
        a, b, out, M, N, K, *a.stride(), *b.stride(), *out.stride(), NUM_SMS=programs, **meta)
    return out


# The ground truth of the order is what the kernel computes: this kernel calls your
# tile_coords once per tile and writes the pair down.
@triton.jit
def tile_order_kernel(out_ptr, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    tile = tl.program_id(axis=0)
    pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
    tl.store(out_ptr + 2 * tile, pid_m)
    tl.store(out_ptr + 2 * tile + 1, pid_n)


def grouped_order(num_pid_m, num_pid_n, group_m, snake=True):
    """[(pid_m, pid_n) of each tile index], written out in Python: the snake order, or 04's
    (tl.swizzle2d's) with snake=False."""
    order = []
    for band, first in enumerate(range(0, num_pid_m, group_m)):
        rows = min(group_m, num_pid_m - first)
        cols = range(num_pid_n)[:: -1 if snake and band % 2 else 1]
        order += [(first + r, c) for c in cols for r in range(rows)]
    return order


def check_order(num_pid_m, num_pid_n, group_m):
    out = torch.full((2 * num_pid_m * num_pid_n,), -1, dtype=torch.int32,
                     device=DEVICE.torch_device)
    checks.call_graded(
        lambda: tile_order_kernel[(num_pid_m * num_pid_n,)](out, num_pid_m, num_pid_n,
                                                             GROUP_M=group_m),
        what="`tile_coords`")
    got = [tuple(p) for p in out.view(-1, 2).tolist()]
    want = grouped_order(num_pid_m, num_pid_n, group_m)
    assert got == want or got != grouped_order(num_pid_m, num_pid_n, group_m, snake=False), (
        f"{num_pid_m}x{num_pid_n} tiles in bands of {group_m}: tile_coords gives 04's grouped "
        "order (tl.swizzle2d's), in which every band walks its columns left to right; in the "
        "snake order the odd bands (1, 3, ...) walk them from right to left")
    for tile, (mine, right) in enumerate(zip(got, want, strict=True)):
        assert mine == right, (
            f"{num_pid_m}x{num_pid_n} tiles in bands of {group_m}: tile {tile} is {right}, "
            f"tile_coords says {mine}")


def persistent_with(num_programs, **tiles):
    """Version 1 with `num_programs` programs and small tiles (SMALL_TILES, on a GPU too), so
    that the tests' small problems have several tiles per program everywhere."""
    def run(a, b, out):
        return matmul_persistent(a, b, out, num_programs=num_programs,
                                 **{**SMALL_TILES["v1"], **tiles})
    return run


def carried(a, b, programs, BLOCK_M, BLOCK_N, GROUP_M, **_):
    """What version 1 writes when its accumulator is set to zero once, before the loop over
    tiles: each tile the sum of A @ B over every tile its program did so far (a program does
    tiles start, start + programs, ...; past M and N, the masked loads add zeros)."""
    M, N = a.shape[0], b.shape[1]
    rows, cols = triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N)
    want = torch.zeros(rows * BLOCK_M, cols * BLOCK_N, dtype=torch.float64, device=a.device)
    want[:M, :N] = a.double() @ b.double()
    out, acc = torch.empty_like(want), {}
    for tile, (m, n) in enumerate(grouped_order(rows, cols, GROUP_M)):
        block = (slice(m * BLOCK_M, (m + 1) * BLOCK_M), slice(n * BLOCK_N, (n + 1) * BLOCK_N))
        acc[tile % programs] = acc.get(tile % programs, 0) + want[block]
        out[block] = acc[tile % programs]
    return out[:M, :N]


def check_persistent(programs, M, N, K, **tiles):
    """check_matmul of version 1 on `programs` programs, a failure named where the output is
    what an accumulator carried from one tile to the next gives."""
    run = persistent_with(programs, **tiles)
    try:
        check_matmul(run, M, N, K, kernels=["matmul_persistent_kernel"])
    except checks.KernelCheckError as failure:
        a, b = matmul_inputs(M, N, K)(checks.generator(checks.new_seed()))
        out = run(a, b, torch.empty(M, N, dtype=a.dtype, device=a.device))
        carry = ("each tile plus every tile its program did before it", "wrong-formula",
                 carried(a, b, programs, **{**SMALL_TILES["v1"], **tiles}),
                 "set the accumulator to zero at the start of each tile, inside the loop over "
                 "tiles, not once before it")
        hint = hints.known_mistake(out, a.double() @ b.double(), [carry])
        if hint is None:
            raise
        raise checks.KernelCheckError(failure.detail, [hint]) from None


def grade_v1(points=1):
    n = SPEED_N
    gen = checks.generator(checks.new_seed())
    a = checks.randn((n, n), gen=gen, dtype=torch.float16)
    b = checks.randn((n, n), gen=gen, dtype=torch.float16)
    c, theirs = torch.empty_like(a), torch.empty_like(a)

    def verify():  # against the inputs as they are now
        checks.compare(c, a.double() @ b.double(), atol=sum_tolerance(a, b) + 1e-5,
                       context="after a timed call")

    cublas = perf.Baseline("cuBLAS (torch.matmul)", lambda: torch.matmul(a, b, out=theirs),
                           at_least=0.30)
    return perf.grade(
        perf.Case(lambda: matmul_persistent(a, b, c), kernels=["matmul_persistent_kernel"],
                  inputs=(a, b), out=c, verify=verify, baselines=[cublas],
                  name=f"persistent matmul {n}^3", flops=2 * n**3, dtype=torch.float16),
        points=points)


# %% nbgrader={"grade": true, "grade_id": "test-persistent-visible", "points": 1}
check_order(5, 3, 2)  # 5 tile rows in bands of 2: the last band has one row
for programs in (1, 5):  # one program does every tile; five share 4x3 tiles unevenly
    check_persistent(programs, 61, 45, 40)
print("visible tests passed: the order of 5x3 tiles; 1 and 5 programs on 61x45x40")

# %% nbgrader={"grade": true, "grade_id": "test-persistent-hidden", "points": 2}
check_order(4, 3, 2)  # two bands, the second from right to left; the hidden tests follow
### BEGIN HIDDEN TESTS
for case in [(1, 1, 1), (1, 5, 3), (7, 2, 3), (6, 5, 1), (3, 4, 8)]:
    check_order(*case)
for programs, shape in [(2, (16, 80, 33)), (7, (50, 20, 16)), (64, (35, 35, 17))]:
    check_persistent(programs, *shape)
check_persistent(2, 70, 30, 24, GROUP_M=3)
print("hidden tests passed: orders, programs from 2 to more than the tiles, bands of 3")
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "speed-persistent", "points": 1}
grade_v1()

# %% [markdown]
# ## Version 2 · tensor descriptors (TMA)
#
# In version 1 every thread computes addresses and masks for its share of each block, and the
# loads occupy the same warps that feed the tensor cores. A **tensor descriptor** describes a
# matrix once (base, shape, strides, block shape); `desc.load([row, col])` then moves a whole
# block. On Hopper the Tensor Memory Accelerator performs that copy into shared memory by itself,
# fills zeros past the matrix's edges and drops stores that fall outside (05 introduced the
# rules: a 16-byte aligned base, leading strides in multiples of 16 bytes, a contiguous last
# dimension). Before sm_90 Triton lowers the same code to ordinary loads.
#
# 05's persistent kernel makes its descriptors on the host. Version 2 makes them inside the
# kernel with `tl.make_tensor_descriptor`, which on a GPU needs scratch memory that Triton asks
# for at launch: `triton.set_allocator` gives it a function that returns a buffer (05's
# `gemm._allocate`, one buffer per stream, grown as needed). The interpreter emulates
# descriptors, with the same alignment checks, and needs no allocator.

# %%
@triton.jit
def matmul_tma_kernel(
    # pointers: rows contiguous, rows and base 16-byte aligned (the launcher checks)
    a_ptr,  # A, (M, K)
    b_ptr,  # B, (K, N)
    c_ptr,  # C, (M, N), written
    # sizes
    M,
    N,
    K,
    # row strides (elements); the last stride is 1
    stride_am,
    stride_bk,
    stride_cm,
    # compile-time constants
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,  # version 3: give the K loop's copies and dots separate warps
    FLATTEN: tl.constexpr,  # one loop of tiles and K steps for the pipeliner (versions 1, 2)
):
    # -- descriptors, made once per program; the block shapes are the shared-memory buffers
    #    each copy fills. The last stride must be the literal 1.
    a_desc = tl.make_tensor_descriptor(
        a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(
        b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(
        c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
    # -- this program's tiles, as in version 1
    start = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    tile_c = start - NUM_SMS  # the store's own tile counter, as in version 1
    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=FLATTEN):
        # 04's grouped order (tl.swizzle2d), not version 1's snake: this kernel does not
        # depend on Exercise 1
        pid_m, pid_n = tl.swizzle2d(tile // num_pid_n, tile % num_pid_n, num_pid_m, num_pid_n,
                                    GROUP_M)
        # -- the K loop: no pointers, no masks
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # (BLOCK_M, BLOCK_N)
        for k in tl.range(0, tl.cdiv(K, BLOCK_K), warp_specialize=WARP_SPECIALIZE):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])  # (BLOCK_M, BLOCK_K)
            b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])  # (BLOCK_K, BLOCK_N)
            acc = tl.dot(a, b, acc)  # (BLOCK_M, BLOCK_N) float32
        # -- epilogue: one descriptor store, clipped at the edges
        tile_c += NUM_SMS
        pid_m_c, pid_n_c = tl.swizzle2d(tile_c // num_pid_n, tile_c % num_pid_n, num_pid_m,
                                        num_pid_n, GROUP_M)
        c_desc.store([pid_m_c * BLOCK_M, pid_n_c * BLOCK_N], acc.to(c_ptr.dtype.element_ty))


def matmul_tma(a, b, out, version="v2", num_programs=None, **tiles):
    """out = a @ b with matmul_tma_kernel, tiles of TILES[version] (overridden by `tiles`);
    version "v3" warp-specializes the K loop (its options from Exercise 3)."""
    assert gemm.descriptor_layout(a, b, out), "descriptors need contiguous rows, 16-byte aligned"
    M, K = a.shape
    N = b.shape[1]
    meta = {**TILES[version], **tiles}
    num_tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
    programs = min(num_programs or gemm.num_sms(), num_tiles)
    if DEVICE.is_gpu:
        triton.set_allocator(gemm._allocate)  # scratch for the device-made descriptors
    matmul_tma_kernel[(programs,)](
        a, b, out, M, N, K, a.stride(0), b.stride(0), out.stride(0), NUM_SMS=programs, **meta)
    return out


check_matmul(matmul_tma, 64, 48, 80, kernels=["matmul_tma_kernel"])  # edges fall inside tiles
print("version 2 agrees with the float64 reference, its blocks moved "
      + ("by Triton's fallback loads (no TMA before sm_90)" if DEVICE.is_gpu and not HOPPER
         else "through descriptors"))


# for Exercise 2 below: the limit it sizes against, and its tests
if DEVICE.is_gpu:
    SMEM_LIMIT = getattr(torch.cuda.get_device_properties(0), "shared_memory_per_block_optin",
                         227 * 1024)
else:
    SMEM_LIMIT = 227 * 1024  # H100 (datasheet; CUDA C++ Programming Guide)
print(f"shared memory per block: {SMEM_LIMIT / 1024:.0f} KB; TMA box: at most "
      f"{gemm.TMA_MAX_BOX} elements a side")


def tile_config(bm, bn, bk, stages, warps=8):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                         num_warps=warps, num_stages=stages)


def check_fits(config, in_bytes, out_bytes, limit, want):
    got = checks.call_graded(tma_fits, config, in_bytes, out_bytes, limit)
    assert got == want, (f"{gemm.describe(config)}, {in_bytes}-byte inputs, {out_bytes}-byte "
                         f"output, limit {limit / 1024:g} KiB: tma_fits says {got}, expected {want}")

# %% [markdown]
# ## Sizing descriptor blocks against shared memory
#
# The pipeline keeps `num_stages` A blocks (`BLOCK_M x BLOCK_K`) and B blocks (`BLOCK_K x
# BLOCK_N`) in shared memory, in the inputs' dtype, as 05's pruning counted. The descriptor store
# adds the finished C tile (`BLOCK_M x BLOCK_N`, in the output's dtype), staged there for the TMA
# to copy out. A block may use 227 KB on an H100 (datasheet; CUDA C++ Programming Guide, compute
# capability 9.0); a TMA box is at most 256 elements a side (CUDA Driver API,
# `cuTensorMapEncodeTiled`; `gemm.TMA_MAX_BOX`). Breaking either fails only at compile or launch.
#
# ### Exercise 2 · descriptor blocks and shared memory (3 points)
#
# 1. `tma_smem_bytes(block_m, block_n, block_k, num_stages, in_bytes, out_bytes)`: the bytes of
#    the pipeline's A and B buffers plus the staged C tile.
# 2. `tma_fits(config, in_bytes, out_bytes, limit)`: whether a `triton.Config` (tiles in
#    `config.kwargs`, stages in `config.num_stages`) can run through descriptors: every box
#    within the TMA's limit, and the buffers within `limit` bytes (exactly `limit` fits).
#
# Which of 128x256x64 with 3 stages and with 4 stages fits in float16? And with float32 output?

# %% nbgrader={"grade_id": "tma-smem", "solution": true}
def tma_smem_bytes(block_m: int, block_n: int, block_k: int, num_stages: int, in_bytes: int,
                   out_bytes: int) -> int:
    """Shared memory of a descriptor matmul: num_stages A and B blocks, and the C tile."""
    ### BEGIN SOLUTION
    pipeline = num_stages * (block_m * block_k + block_k * block_n) * in_bytes
    return pipeline + block_m * block_n * out_bytes
    ### END SOLUTION


def tma_fits(config: triton.Config, in_bytes: int, out_bytes: int, limit: int) -> bool:
    """Whether config's boxes are within the TMA's limit and its buffers within `limit` bytes."""
    ### BEGIN SOLUTION
    kw = config.kwargs
    bm, bn, bk = kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"]
    if max(bm, bn, bk) > gemm.TMA_MAX_BOX:
        return False
    return tma_smem_bytes(bm, bn, bk, config.num_stages, in_bytes, out_bytes) <= limit
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-tma-smem-visible", "points": 1}
# 128x256x64 in float16: A blocks of 16 KiB, B blocks of 32 KiB, a C tile of 64 KiB
assert checks.call_graded(tma_smem_bytes, 128, 256, 64, 3, 2, 2) == 3 * 48 * 1024 + 64 * 1024, (
    "3 stages of 48 KiB and a 64 KiB C tile: 208 KiB")
check_fits(tile_config(128, 256, 64, 3), 2, 2, 227 * 1024, True)  # 208 KiB
check_fits(tile_config(128, 256, 64, 4), 2, 2, 227 * 1024, False)  # 256 KiB
check_fits(tile_config(128, 256, 64, 3), 2, 4, 227 * 1024, False)  # a float32 C tile: 272 KiB
check_fits(tile_config(64, 512, 32, 1), 1, 1, 227 * 1024, False)  # a box of 512 columns
check_fits(tile_config(128, 256, 64, 3), 2, 2, 208 * 1024, True)  # exactly the limit fits
check_fits(tile_config(256, 16, 256, 1), 1, 1, 227 * 1024, True)  # boxes of 256 are allowed
print("visible tests passed")

# %% nbgrader={"grade": true, "grade_id": "test-tma-smem-hidden", "points": 2}
check_fits(tile_config(256, 256, 32, 2), 1, 2, 256 * 1024, True)  # the hidden tests follow
### BEGIN HIDDEN TESTS
rng = np.random.default_rng()


def _need(bm, bn, bk, s, i, o):
    return s * i * bk * (bm + bn) + bm * bn * o


powers = [16, 32, 64, 128, 256, 512]
for _ in range(300):
    bm, bn, bk = (int(rng.choice(powers)) for _ in range(3))
    s, i, o = int(rng.integers(1, 6)), int(rng.choice([1, 2, 4])), int(rng.choice([1, 2, 4]))
    need = _need(bm, bn, bk, s, i, o)
    assert tma_smem_bytes(bm, bn, bk, s, i, o) == need, (
        f"tma_smem_bytes{(bm, bn, bk, s, i, o)} = {tma_smem_bytes(bm, bn, bk, s, i, o)}, expected "
        f"{need}")
    limit = int(rng.integers(16, 600)) * 1024
    boxes = max(bm, bn, bk) <= 256
    check_fits(tile_config(bm, bn, bk, s), i, o, limit, boxes and need <= limit)
    check_fits(tile_config(bm, bn, bk, s), i, o, need, boxes)  # exactly the limit fits
for bm, bn, bk in [(256, 256, 16), (16, 256, 256), (256, 16, 256)]:  # boxes at the limit
    check_fits(tile_config(bm, bn, bk, 1), 1, 1, 10**9, True)
print("hidden tests passed: 300 random configs, limits and boxes at the boundary")
### END HIDDEN TESTS

# %%
# How good is the model? On an sm_90 GPU this cell compiles version 2 (without running it) at
# the configs your tma_fits passes and sets the shared memory the compiler allocated
# (metadata.shared) beside your model; configs your function refuses are listed, not compiled.
SMEM_CONFIGS = [tile_config(128, 256, 64, s) for s in (2, 3, 4)] + [tile_config(128, 128, 128, 3)]
rows = []
n = 4096 if HOPPER else 64
a = torch.empty(n, n, dtype=torch.float16, device=DEVICE.torch_device)
for cfg in SMEM_CONFIGS:
    kw = cfg.kwargs
    model = tma_smem_bytes(kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], cfg.num_stages, 2, 2)
    compiled = math.nan
    if HOPPER and tma_fits(cfg, 2, 2, SMEM_LIMIT):
        triton.set_allocator(gemm._allocate)
        compiled = matmul_tma_kernel.warmup(
            a, a, a, n, n, n, n, n, n, NUM_SMS=gemm.num_sms(), WARP_SPECIALIZE=False,
            FLATTEN=True, grid=(1,), num_warps=cfg.num_warps, num_stages=cfg.num_stages,
            **kw).metadata.shared
    rows.append((gemm.describe(cfg), model / 1024, compiled / 1024, tma_fits(cfg, 2, 2, SMEM_LIMIT)))
with recorded.cell("09_hopper/compiled-smem"):
    print(f"{'config (float16)':28s} {'model KB':>9s} {'compiler KB':>12s}  fits")
    for name, model_kb, compiled_kb, fits in rows:
        print(f"{name:28s} {model_kb:9.0f} {compiled_kb:12.0f}  {fits}")
if not HOPPER:
    print("(the compiler's column needs an sm_90 GPU)")
    recorded.show("09_hopper/compiled-smem")

# %% [markdown]
# ## Version 3 · warp specialization
#
# In version 2 the same warps issue the TMA copies for later K steps and the tensor-core work for
# this one, interleaved by the compiler's software pipeline. **Warp specialization** splits the
# roles: a producer warp group only issues copies, consumer warp groups only multiply, and they
# hand buffers over through barriers (FlashAttention-3 builds on it, Shah et al. 2024). In Triton
# it is one keyword on the loop to split, `tl.range(..., warp_specialize=True)`: version 2's
# kernel passes `WARP_SPECIALIZE` to its K loop. The keyword is a request; where the compiler
# cannot honour it, it compiles the ordinary loop without a word. The compiled kernel tells: a
# specialized program runs more warps than `num_warps`. `compiled_warps` reads that number for
# sm_90 (in interpreter mode from Triton's compiler on the CPU, on a GPU from the device's).
#
# ### Exercise 3 · make it specialize (2 points)
#
# `ws_options()` returns version 3's `{"num_warps": ..., "FLATTEN": ...}`. Try `compiled_warps`
# with 4 and 8 warps, the tile loop flattened or not, and return options under which the
# program runs more warps than it asked for. Why might flattening stop the split?

# %%
def compiled_warps(num_warps: int, flatten: bool) -> int | None:
    """Warps per program of version 3, 64x64x32 tiles, as compiled for sm_90; None where this
    device cannot tell (a GPU older than sm_90)."""
    n = 256
    a = torch.empty(n, n, dtype=torch.float16, device=DEVICE.torch_device)
    tiles = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8)
    args = (a, a, a, n, n, n, n, n, n)
    kwargs = dict(NUM_SMS=4, WARP_SPECIALIZE=True, FLATTEN=flatten, num_warps=num_warps,
                  num_stages=2, **tiles)
    if not DEVICE.is_gpu:  # the launch, compiled (not run) for sm_90 by the course's check
        return gpu_compile.compiled_warps(matmul_tma_kernel, args, kwargs, capability=90)
    if not HOPPER:
        return None
    triton.set_allocator(gemm._allocate)
    return matmul_tma_kernel.warmup(*args, grid=(1,), **kwargs).metadata.num_warps


def check_ws(options):
    assert isinstance(options, dict) and set(options) == {"num_warps", "FLATTEN"}, (
        f"ws_options() returns {options!r}: a dict with the keys num_warps and FLATTEN")
    warps = compiled_warps(options["num_warps"], options["FLATTEN"])
    assert warps is not None, (
        f"{DEVICE.explain('sm_90')} Warp specialization is checked in interpreter mode or on an "
        "sm_90 GPU: this test scores 0 here")
    assert warps > options["num_warps"], (
        f"with {options}, the compiled program runs {warps} warps, as many as asked for: the "
        "K loop was not specialized (the compiler dropped the keyword without a word)")
    return warps


# %% nbgrader={"grade_id": "ws-options", "solution": true}
def ws_options() -> dict:
    """num_warps and FLATTEN for version 3, such that sm_90 compiles its K loop specialized."""
    ### BEGIN SOLUTION
    # Triton 3.6 and 3.9 specialize for sm_90 only with 4 warps (they add two consumer warp
    # groups: 12 in all) and a loop nest that is not flattened
    return {"num_warps": 4, "FLATTEN": False}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-ws-visible", "points": 1}
options = checks.call_graded(ws_options)
warps = check_ws(options)
TILES["v3"] = {**TILES["v3"], "num_warps": options["num_warps"], "FLATTEN": options["FLATTEN"],
               "WARP_SPECIALIZE": True}
check_matmul(lambda a, b, out: matmul_tma(a, b, out, version="v3"), 64, 48, 80,
             kernels=["matmul_tma_kernel"])
print(f"visible tests passed: {options} compiles to {warps} warps per program, and computes "
      "the product")

# %% nbgrader={"grade": true, "grade_id": "test-ws-hidden", "points": 1}
check_ws(checks.call_graded(ws_options))  # the hidden tests follow
### BEGIN HIDDEN TESTS
assert ws_options() == ws_options(), "ws_options() should give the same answer every time"
check_matmul(lambda a, b, out: matmul_tma(a, b, out, version="v3", num_programs=1), 40, 72, 48,
             kernels=["matmul_tma_kernel"])
print("hidden tests passed")
### END HIDDEN TESTS

# %%
# The four combinations, compiled for sm_90. The ladder below times version 3 (your options)
# against version 2, which keeps the flattened, ordinary pipeline: specialization is not free
# (barriers, fewer registers per warp), and whether it pays depends on the problem.
for w in (4, 8):
    for flatten in (False, True):
        got = compiled_warps(w, flatten)
        shown = "cannot tell on this GPU" if got is None else f"{got} warps"
        print(f"num_warps={w}, FLATTEN={flatten!s:5s}: {shown}"
              + (" (specialized)" if got and got > w else ""))

# %% [markdown]
# ## Version 4 · float8
#
# Hopper's tensor cores multiply float8 at twice their float16 rate (H100 datasheet: about 1979
# dense FP8 TFLOP/s against 989 in fp16). **e4m3** has 4 exponent bits and 3 mantissa bits: its
# largest finite value is 448 and its relative rounding error up to 2⁻⁴ (Micikevicius et al.,
# "FP8 Formats for Deep Learning", arXiv:2209.05433). So few values fit that a tensor is first
# scaled into range; one scale per tensor lets a few large rows push the others down to e4m3's
# coarse small values, so version 4 keeps a **scale per row** of A and per column of B: row `i`
# is stored as `x8 = x / s_i`. The result is written in bfloat16.
#
# `torch._scaled_mm(a8, b8, scale_a=, scale_b=, out_dtype=)` is PyTorch's FP8 matmul; given
# scales of shapes `(M, 1)` and `(1, N)` it scales row-wise, as version 4 does. Like Hopper's FP8
# tensor-core instructions, it takes B column-major: the rows of Bᵀ contiguous. So does version
# 4: it loads `(BLOCK_N, BLOCK_K)` blocks of Bᵀ and multiplies by their transpose, a change of
# view, not a copy.
#
# sm_80 has no e4m3 tensor-core instruction and Triton refuses the type there; the interpreter
# runs it, so correctness is checked on a laptop and on sm_90, speed on sm_90 only.

# %%
E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max  # 448
FP8_HERE = HOPPER or not DEVICE.is_gpu
gpu_compile.needs("matmul_fp8_kernel", "sm_90")  # the compile check skips sm_80 for it


def require_fp8():
    """Float8 runs in the interpreter and on sm_90: elsewhere the test says so and fails."""
    assert FP8_HERE, (f"{DEVICE.explain('sm_90')} float8 e4m3 matmuls need one, so this test "
                      "scores 0 here; your instructor grades it on an sm_90 GPU or a laptop")


# the launcher, the tests' inputs and checks of Exercise 4 (the kernel is yours, below)
def matmul_fp8(a8, bt8, a_scale, b_scale, out, num_programs=None, **tiles):
    """out = (a_scale * a8) @ (b_scale * bt8).T with matmul_fp8_kernel: a_scale (M, 1) holds a
    scale per row of A, b_scale (N, 1) one per row of Bᵀ (column of B)."""
    assert gemm.descriptor_layout(a8, bt8, out), "descriptors need contiguous rows, 16-byte aligned"
    M, K = a8.shape
    N = bt8.shape[0]
    for name, scale, rows in (("a_scale", a_scale, M), ("b_scale", b_scale, N)):
        assert scale.shape == (rows, 1) and scale.is_contiguous(), (
            f"{name} should be a contiguous ({rows}, 1) tensor, one scale per row, as "
            f"quantize_e4m3 returns; got shape {tuple(scale.shape)}")
    meta = {**TILES["v4"], **tiles}
    num_tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
    programs = min(num_programs or gemm.num_sms(), num_tiles)
    if DEVICE.is_gpu:
        triton.set_allocator(gemm._allocate)
    matmul_fp8_kernel[(programs,)](
        a8, bt8, out, a_scale, b_scale, M, N, K, a8.stride(0), bt8.stride(0), out.stride(0),
        NUM_SMS=programs, **meta)
    return out


def fp8_inputs(M, N, K, a_range=(0.01, 0.1), b_range=(2.0, 5.0)):
    """make_inputs(gen): e4m3 A (M, K) and Bᵀ (N, K) over the whole e4m3 range, and a scale per
    row of each, A's in a_range and Bᵀ's in b_range, drawn apart, so that a scale that is
    missing, doubled, swapped or taken from another row shows."""
    def make(gen):
        a8 = (checks.randn((M, K), gen=gen) * 100).clamp(-E4M3_MAX, E4M3_MAX)
        bt8 = (checks.randn((N, K), gen=gen) * 100).clamp(-E4M3_MAX, E4M3_MAX)
        scales = []
        for rows, (lo, hi) in ((M, a_range), (N, b_range)):
            u = torch.rand(rows, 1, generator=gen, device=gen.device, dtype=torch.float64)
            scales.append((lo + (hi - lo) * u).to(DEVICE.torch_device, torch.float32))
        return (a8.to(torch.float8_e4m3fn), bt8.to(torch.float8_e4m3fn), *scales)
    return make


def fp8_reference(a8, bt8, a_scale, b_scale):  # inputs upcast to float64 by checks.check
    return (a_scale * a8) @ (b_scale * bt8).T


def fp8_atol(a8, bt8, sa, sb):
    """atol of the kernel's K-term sum on these inputs: on sm_90 the tensor cores sum products
    with fewer bits than float32 (about 14, arXiv:2412.19437), so 2**-12 per sqrt(K) term."""
    K = a8.shape[1]
    bound = float(((sa.double() * a8.double().abs()) @ (sb.double() * bt8.double().abs()).T).max())
    return 2.0**-12 * math.sqrt(K) * bound


def relative(x, ref):
    """max |x - ref| over max |ref|: an error relative to the product's largest value."""
    return float((x.float() - ref).abs().max() / ref.abs().max())


def scaled_mm(a8, bt8, a_scale, b_scale, *, fast_accum, out=None):
    """(a_scale * a8) @ (b_scale * bt8).T in bfloat16 by torch._scaled_mm, row-wise (a_scale
    (M, 1), b_scale (N, 1)); `fast_accum`: the whole K sum in the tensor cores' accumulator, as
    tl.dot's default on sm_90."""
    return torch._scaled_mm(a8, bt8.T, scale_a=a_scale, scale_b=b_scale.T,
                            out_dtype=torch.bfloat16, use_fast_accum=fast_accum, out=out)


def scaled_mm_baselines(a8, bt8, a_scale, b_scale, at_least):
    """Version 4's baselines, each writing an output of its own: _scaled_mm summing as the
    kernel does (fast accumulation), of which the kernel needs `at_least`, and its accurate mode,
    shown beside it."""
    fast, accurate = (torch.empty(a8.shape[0], bt8.shape[0], dtype=torch.bfloat16,
                                  device=a8.device) for _ in "fa")
    return [
        perf.Baseline("torch._scaled_mm, row-wise, use_fast_accum=True",
                      lambda: scaled_mm(a8, bt8, a_scale, b_scale, fast_accum=True, out=fast),
                      at_least),
        perf.Baseline("torch._scaled_mm, row-wise, use_fast_accum=False",
                      lambda: scaled_mm(a8, bt8, a_scale, b_scale, fast_accum=False,
                                        out=accurate),
                      None),
    ]


def grade_fp8(points=1):
    if not HOPPER:
        return perf.grade(points=points, needs="sm_90")
    n = 2 * SPEED_N  # at 4096³ a float8 call takes about 0.1 ms, and its timings scattered
    a8, bt8, sa, sb = fp8_inputs(n, n, n)(checks.generator(checks.new_seed()))
    c = torch.empty(n, n, dtype=torch.bfloat16, device=a8.device)

    def verify():  # against the inputs as they are now: they change before every timed call
        want = fp8_reference(a8.double(), bt8.double(), sa.double(), sb.double())
        checks.compare(c, want, rtol=2.0**-7, atol=fp8_atol(a8, bt8, sa, sb),
                       context="after a timed call")

    return perf.grade(
        perf.Case(lambda: matmul_fp8(a8, bt8, sa, sb, c), kernels=["matmul_fp8_kernel"],
                  inputs=(a8, bt8), out=c, verify=verify,
                  baselines=scaled_mm_baselines(a8, bt8, sa, sb, at_least=0.85),
                  name=f"float8 matmul {n}^3", flops=2 * n**3, dtype=torch.float16),
        points=points, needs="sm_90")


# tiles for the tests: small enough that a program walks several of them on a GPU too
FP8_TEST_TILES = DEVICE.pick(
    gpu=dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=2, num_warps=4, num_stages=2),
    interpreter=SMALL_TILES["v4"])


def scale_mistakes(a8, bt8, sa, sb):
    """hints.known_mistake's list: what the kernel writes with its scales misplaced."""
    plain = a8.double() @ bt8.double().T  # the sum, no scale
    sa, sb = sa.double(), sb.double().T
    both = "multiply each finished tile once by a_scale of its row times b_scale of its column"
    return [
        ("the sum without its scales", "wrong-formula", plain, both),
        ("the sum scaled twice", "wrong-formula", plain * (sa * sb) ** 2, both + ", once"),
        ("the sum divided by its scales", "wrong-formula", plain / (sa * sb), both),
        ("the sum times A's scales alone", "wrong-formula", plain * sa, both),
        ("the sum times B's scales alone", "wrong-formula", plain * sb, both),
        ("the sum times the first row's and column's scales everywhere", "wrong-formula",
         plain * sa[0] * sb[:, :1], "load the scales of the tile's own rows and columns: "
         "a_scale holds one per row of A, b_scale one per row of Bᵀ"),
    ]


def check_fp8(M, N, K, num_programs=3, **kw):
    """The kernel against float64 on exact e4m3 inputs: bfloat16 output rounding, and the
    K-term sum's (fp8_atol); a failure named where the output is what misplaced scales give."""
    require_fp8()
    seed = checks.new_seed()
    make = fp8_inputs(M, N, K, **kw)
    atol = fp8_atol(*make(checks.generator(seed)))

    def run(a8, bt8, sa, sb, out):
        return matmul_fp8(a8, bt8, sa, sb, out, num_programs=num_programs, **FP8_TEST_TILES)

    try:
        checks.check(run, fp8_reference, make, trials=1, seed=seed, out_dtype=torch.bfloat16,
                     atol=atol, kernels=["matmul_fp8_kernel"])
    except checks.KernelCheckError as failure:
        inputs = make(checks.generator(checks.new_seed()))
        out = run(*inputs, torch.empty(M, N, dtype=torch.bfloat16, device=inputs[0].device))
        right = fp8_reference(*(t.double() for t in inputs))
        hint = hints.known_mistake(out, right, scale_mistakes(*inputs))
        if hint is None:
            raise
        raise checks.KernelCheckError(failure.detail, [hint]) from None


def check_quantize(x):
    require_fp8()
    x8, scale = checks.call_graded(quantize_e4m3, x)
    rows = (x.shape[0], 1)
    assert isinstance(scale, torch.Tensor) and tuple(scale.shape) == rows, (
        f"the scales should be a tensor of shape {rows}, one per row of x, got {scale!r:.60}")
    assert scale.dtype == torch.float32 and scale.device == x.device, (
        f"the scales should be float32 on {x.device}, got {scale.dtype} on {scale.device}")
    assert x8.dtype == torch.float8_e4m3fn and x8.shape == x.shape, (
        f"x8 should be float8_e4m3fn of shape {tuple(x.shape)}, got {x8.dtype} {tuple(x8.shape)}")
    want = x.double().abs().amax(dim=1, keepdim=True) / E4M3_MAX
    off = int(((scale.double() - want).abs() / want).argmax())
    assert torch.allclose(scale.double(), want, rtol=1e-6, atol=0), (
        f"row {off}'s max|x| = {float(want[off]) * E4M3_MAX:.4g} should land on e4m3's largest "
        f"value, {E4M3_MAX:g}: its scale is {float(want[off]):.4g}, yours {float(scale[off]):.4g}")
    back = x8.double() * scale.double()
    assert torch.isfinite(back).all(), "x8 holds NaN or inf: a value overflowed e4m3"
    err = (back - x.double()).abs()
    allowed = 2.0**-4 * x.double().abs() + scale.double() * 2.0**-9  # rounding, and subnormals
    worst = int((err - allowed).argmax())
    assert (err <= allowed).all(), (
        f"scale * x8 is not x rounded to e4m3: at flat index {worst}, x = "
        f"{float(x.flatten()[worst]):.4g}, scale * x8 = {float(back.flatten()[worst]):.4g}")


print(f"e4m3: largest {E4M3_MAX:g}, float8 runs here: {FP8_HERE}")

# %% [markdown]
# ### Exercise 4 · float8 scales (4 points)
#
# 1. `quantize_e4m3(x)` for a matrix `x`: `(x8, scale)`, one float32 scale per row in a
#    `(rows, 1)` tensor on `x`'s device, so that each row's largest `|x|` lands on e4m3's
#    largest value and nothing overflows; `x8 = x / scale` in `torch.float8_e4m3fn`.
# 2. `matmul_fp8_kernel`: a persistent kernel on e4m3 A `(M, K)` and Bᵀ `(N, K)`, both
#    row-major, with scales `a_scale` `(M, 1)` and `b_scale` `(N, 1)` and a float32
#    accumulator, writing `C = (a_scale * A8) @ (b_scale * B8ᵀ)ᵀ` in C's dtype. Each product
#    `A[m, k] · B[k, n]` carries `a_scale[m] · b_scale[n]`, whatever `k`: where do the scales
#    go, so that they cost one multiplication per output element and no accuracy?
#
# **How `tl.dot` sums float8.** On sm_90 the tensor cores sum the products in an accumulator of
# fewer bits than float32 (about 14 on H800s: DeepSeek-AI, arXiv:2412.19437).
# `tl.dot`'s `max_num_imprecise_acc` bounds the K terms summed there before the sum is added to
# the float32 accumulator. Its default on sm_90, 2³⁰ (Triton's NVIDIA backend, `compiler.py`),
# leaves the whole K loop there: fast, with an error that grows with K.
# `max_num_imprecise_acc=BLOCK_K` adds every K step's sum in float32: more accurate, and slower.
# In `torch._scaled_mm` the first is `use_fast_accum=True`. Keep the default: the
# speed cell compares with `_scaled_mm` in that mode, and times the other beside it.

# %% nbgrader={"grade_id": "fp8-kernel", "solution": true}
def quantize_e4m3(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x8, scale): x ~= scale * x8, x8 in float8 e4m3, scale (rows, 1) float32, one per row."""
    ### BEGIN SOLUTION
    amax = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12)  # a zero row: finite
    scale = amax / E4M3_MAX
    x8 = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return x8, scale
    ### END SOLUTION


@triton.jit
def matmul_fp8_kernel(
    # pointers
    a_ptr,  # A8, (M, K) float8 e4m3, rows contiguous
    bt_ptr,  # B8 transposed, (N, K) float8 e4m3, rows contiguous (B column-major)
    c_ptr,  # C, (M, N) bfloat16 or float16, written
    a_scale_ptr,  # A's scales, (M,) float32: row m of A is a_scale[m] * A8[m, :]
    b_scale_ptr,  # B's scales, (N,) float32: column n of B is b_scale[n] * B8[:, n]
    # sizes
    M,
    N,
    K,
    # row strides (elements) of A8, B8ᵀ and C; the last stride is 1
    stride_am,
    stride_btn,
    stride_cm,
    # compile-time constants
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
):
    ### BEGIN SOLUTION
    a_desc = tl.make_tensor_descriptor(
        a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    bt_desc = tl.make_tensor_descriptor(
        bt_ptr, shape=[N, K], strides=[stride_btn, 1], block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(
        c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
    start = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    tile_c = start - NUM_SMS  # the store's own tile counter, as in version 1
    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # (BLOCK_M, BLOCK_N)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])  # (BLOCK_M, BLOCK_K) e4m3
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])  # (BLOCK_N, BLOCK_K) e4m3
            acc = tl.dot(a, bt.T, acc)  # (BLOCK_M, BLOCK_N) float32
        tile_c += NUM_SMS
        pid_m_c, pid_n_c = tile_coords(tile_c, num_pid_m, num_pid_n, GROUP_M)
        # -- the scales: the same for every K term of an element, so once, on the finished sum
        offs_m = pid_m_c * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
        offs_n = pid_n_c * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        a_scale = tl.load(a_scale_ptr + offs_m, mask=offs_m < M, other=0.0)  # (BLOCK_M,)
        b_scale = tl.load(b_scale_ptr + offs_n, mask=offs_n < N, other=0.0)  # (BLOCK_N,)
        c = (acc * a_scale[:, None] * b_scale[None, :]).to(c_ptr.dtype.element_ty)
        c_desc.store([pid_m_c * BLOCK_M, pid_n_c * BLOCK_N], c)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-fp8-visible", "points": 1}
x = checks.randn((64, 96), gen=checks.generator(checks.new_seed())) * 3
x[5, 7] = -40.0  # row 5's largest magnitude, negative
x[9] *= 1e3  # a row a thousand times larger than the others: it needs a scale of its own
check_quantize(x)
check_fp8(128, 96, 96)
print("visible tests passed: quantize_e4m3, and the kernel on 128x96x96 with a scale per row")

# %% nbgrader={"grade": true, "grade_id": "test-fp8-hidden", "points": 2}
# A's scales 1, B's a quarter; the hidden tests follow
check_fp8(40, 136, 64, num_programs=2, a_range=(1.0, 1.0), b_range=(0.25, 0.25))
### BEGIN HIDDEN TESTS
gen = checks.generator(checks.new_seed())
spread = torch.logspace(-3, 3, 7, device=DEVICE.torch_device)[:, None]  # rows 1e-3 to 1e3
for x in [checks.randn((33, 17), gen=gen) * 1e-3, -checks.randn((8, 200), gen=gen).abs() * 1e4,
          checks.randn((5, 7), gen=gen, dtype=torch.float16),
          checks.randn((7, 40), gen=gen) * spread]:
    check_quantize(x)
x = checks.randn((16, 16), gen=gen)
kept = x.clone()
x8_again, _ = quantize_e4m3(x)
assert torch.equal(x, kept), "quantize_e4m3 must not change its input"
check_fp8(96, 32, 160, a_range=(3.0, 4.0), b_range=(1e-3, 2e-3))  # K past a tile, edges
check_fp8(32, 96, 32, a_range=(0.5, 0.5), b_range=(0.5, 0.5))
print("hidden tests passed")
### END HIDDEN TESTS

# %% [markdown]
# ### What float8 costs in accuracy
#
# Three roundings stack up: quantizing rounds each input to 3 mantissa bits, on sm_90 the tensor
# cores sum the exact products of those with fewer bits than float32 (above), and the result is
# rounded to bfloat16. The cell measures them on one problem, each error relative to the
# largest `|C|`. Against the **exact product** of the quantized inputs (in float64): your kernel,
# and `torch._scaled_mm` in both modes where it runs on this device; on sm_90 the kernel's error
# should be that of the mode it sums like. Against a float64 product of the unquantized inputs:
# what the format itself costs.
#
# ### Speed (graded on an sm_90 GPU)
#
# Your float8 kernel against row-wise `torch._scaled_mm(..., use_fast_accum=True)` (summing as
# your kernel does) at `2 * SPEED_N`, bfloat16 out, timed alternately in the same run with fresh
# inputs: at least 0.85x. The accurate mode, `use_fast_accum=False`, is timed beside it and not
# graded. On an H200 the course's probe measured this kernel with one scale per tensor at 0.97x
# to 1.03x `_scaled_mm` per tensor with fast accumulation at 4096 and 8192 (November 2026); the
# row-wise scales add `BLOCK_M + BLOCK_N` loads per tile. On sm_80 this cell says so and scores 0.

# %%
if FP8_HERE:
    M, N, K = DEVICE.pick(gpu=(4096, 4096, 4096), interpreter=(64, 64, 128))
    gen = checks.generator(checks.new_seed())
    a, w = checks.randn((M, K), gen=gen), checks.randn((N, K), gen=gen)  # float32; B = w.T
    (a8, sa), (w8, sw) = quantize_e4m3(a), quantize_e4m3(w)
    exact = fp8_reference(a8.double(), w8.double(), sa.double(), sw.double())
    c8 = matmul_fp8(a8, w8, sa, sw, torch.empty(M, N, dtype=torch.bfloat16, device=a.device))
    print(f"{M}x{N}x{K}, error relative to max|C|, against the exact product:")
    print(f"  your kernel:                                {relative(c8, exact):.2e}")
    for fast in (True, False):
        try:
            theirs = scaled_mm(a8, w8, sa, sw, fast_accum=fast)
        except (RuntimeError, NotImplementedError) as err:  # no FP8 matmul for this device
            print(f"  torch._scaled_mm does not run here: {str(err).splitlines()[0][:80]}")
            break
        print(f"  torch._scaled_mm, use_fast_accum={fast!s:5}:     {relative(theirs, exact):.2e}")
    unquantized = a.double() @ w.double().T
    print(f"the exact product against the unquantized one: {relative(exact, unquantized):.2e}")
else:
    print(DEVICE.explain("sm_90"))

# %% nbgrader={"grade": true, "grade_id": "speed-fp8", "points": 1}
grade_fp8()

# %% [markdown]
# ## Version 5 · attention on descriptors
#
# 07's kernel is FlashAttention-2's loop, and the same tools apply to it. With them and float8,
# FlashAttention-3 reached about 740 TFLOP/s in fp16 on an H100, about 75% of peak, against about
# 35% for FlashAttention-2 (Shah et al. 2024). Version 5 is 07's kernel with its Q, K, V and
# output tiles moved by descriptors. One flat descriptor per tensor sees `(B, H, N, D)` as
# `B·H·N` rows of `D`: head `bh`'s rows start at row `bh·N`. A block of rows stays inside its
# head when `N` is a multiple of `BLOCK_M` (and `BLOCK_N` divides `BLOCK_M`); then a non-causal
# loop needs no mask at all, and a causal one masks only its diagonal blocks, as in 07.
#
# On sm_90 the D = 128 tiles also warp-specialize the key loop. Triton 3.6 and 3.9 specialize one
# loop only, so the causal kernel then walks every key block in one loop, each masked. And check
# before you time: after its checks, the next cell runs the specialized loop with 3 stages, which
# the course found wrong on an H100 and an H200 under Triton 3.6, though 2 stages were right.

# %%
@triton.jit
def _attn_blocks(
    acc, m_i, l_i,  # the state: (BLOCK_M, HEAD_DIM) float32, (BLOCK_M,) float32 twice
    q,  # the resident query tile, (BLOCK_M, HEAD_DIM)
    k_desc, v_desc,  # descriptors of K and V as (B * H * N, HEAD_DIM) rows
    head_row,  # the row of this head's position 0
    lo, hi,  # the key positions this loop covers: [lo, hi), lo a multiple of BLOCK_N
    offs_m,  # (BLOCK_M,) the query positions of the tile
    qk_scale,  # (1 / sqrt(HEAD_DIM)) * log2(e)
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,  # causal: query i sees the keys j <= i
    WARP_SPECIALIZE: tl.constexpr,
):
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        # -- scores: one descriptor copy of BLOCK_N key rows, no addresses, no masks
        k = k_desc.load([head_row + start_n, 0])  # (BLOCK_N, HEAD_DIM)
        qk = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N) float32
        if MASKED:
            qk = tl.where(start_n + offs_n[None, :] <= offs_m[:, None], qk, float("-inf"))
        # -- 07's online softmax, base 2
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)  # (BLOCK_M,)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.math.exp2(m_i - m_ij)  # (BLOCK_M,), 0 on the first block
        l_i = l_i * alpha + tl.sum(p, 1)
        # -- values, and the accumulator brought to the new max
        v = v_desc.load([head_row + start_n, 0])  # (BLOCK_N, HEAD_DIM)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])  # (BLOCK_M, HEAD_DIM) float32
        m_i = m_ij
    return acc, m_i, l_i


@triton.jit
def attention_tma_kernel(
    # pointers: (B, H, N, HEAD_DIM), contiguous (the launcher checks)
    Q, K, V, Out,
    # sizes
    rows,  # B * H * N
    N,  # a multiple of BLOCK_M
    qk_scale,  # (1 / sqrt(HEAD_DIM)) * log2(e)
    # compile-time constants
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,  # query rows per program
    BLOCK_N: tl.constexpr,  # key rows per loop step; divides BLOCK_M
    CAUSAL: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,  # one specialized loop over the key blocks (sm_90)
):
    # -- which query tile (causal: the longest rows first), batch and head
    start_m = tl.num_programs(0) - 1 - tl.program_id(0) if CAUSAL else tl.program_id(0)
    head_row = tl.program_id(1) * N  # int32, as descriptor coordinates are
    first = start_m * BLOCK_M
    offs_m = first + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    # -- descriptors: every tensor as (B * H * N, HEAD_DIM) rows
    q_desc = tl.make_tensor_descriptor(Q, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, HEAD_DIM])
    k_desc = tl.make_tensor_descriptor(K, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(V, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, HEAD_DIM])
    o_desc = tl.make_tensor_descriptor(Out, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, HEAD_DIM])
    # -- the resident query tile and the state
    q = q_desc.load([head_row + first, 0])  # (BLOCK_M, HEAD_DIM)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running max, base-2 units
    l_i = tl.zeros((BLOCK_M,), tl.float32)  # running sum
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)  # running output, unnormalised
    if WARP_SPECIALIZE or not CAUSAL:
        # -- one loop: every key the tile sees (causal: each block masked)
        hi = first + BLOCK_M if CAUSAL else N
        acc, m_i, l_i = _attn_blocks(acc, m_i, l_i, q, k_desc, v_desc, head_row, 0, hi, offs_m,
                                     qk_scale, BLOCK_N, CAUSAL, WARP_SPECIALIZE)
    else:
        # -- 07's split: the blocks before the tile without a mask, the diagonal ones with it
        acc, m_i, l_i = _attn_blocks(acc, m_i, l_i, q, k_desc, v_desc, head_row, 0, first,
                                     offs_m, qk_scale, BLOCK_N, False, False)
        acc, m_i, l_i = _attn_blocks(acc, m_i, l_i, q, k_desc, v_desc, head_row, first,
                                     first + BLOCK_M, offs_m, qk_scale, BLOCK_N, True, False)
    # -- normalise and store: writes BLOCK_M * HEAD_DIM of Out
    o_desc.store([head_row + first, 0], (acc / l_i[:, None]).to(Out.dtype.element_ty))


LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E)
GPU_ATTENTION_TILES = {  # per head dim, the best of a search on an H100 (the course's probe)
    64: dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3, WARP_SPECIALIZE=False),
    128: dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2, WARP_SPECIALIZE=True),
}
SMALL_ATTENTION_TILES = dict(BLOCK_M=32, BLOCK_N=16, num_warps=4, num_stages=1,
                             WARP_SPECIALIZE=False)


def attention_tiles(d):
    """Version 5's tiles for head dim d here; warp specialization on sm_90 only."""
    if not DEVICE.is_gpu:
        return dict(SMALL_ATTENTION_TILES)
    tiles = dict(GPU_ATTENTION_TILES.get(d, GPU_ATTENTION_TILES[64]))
    tiles["WARP_SPECIALIZE"] &= HOPPER
    return tiles


def attention_tma(q, k, v, out, causal=False, **tiles):
    """out = softmax(q kᵀ / sqrt(D)) v for contiguous (B, H, N, D) float16 tensors, N a multiple
    of BLOCK_M; `tiles` override attention_tiles(D)."""
    b, h, n, d = q.shape
    assert k.shape == v.shape == out.shape == q.shape, "q, k, v and out must have one shape"
    assert d in (16, 32, 64, 128), f"head dim {d}: version 5's tiles are for 16, 32, 64 or 128"
    meta = {**attention_tiles(d), **tiles}
    if not all(t.is_contiguous() for t in (q, k, v, out)) or n % meta["BLOCK_M"]:
        raise ValueError(f"version 5 reads (B*H*N, D) rows: it needs contiguous tensors and N "
                         f"a multiple of BLOCK_M = {meta['BLOCK_M']} (N = {n}); pad N or use "
                         "07's kernel")
    if DEVICE.is_gpu:
        triton.set_allocator(gemm._allocate)
    attention_tma_kernel[(n // meta["BLOCK_M"], b * h)](
        q, k, v, out, b * h * n, n, LOG2E / math.sqrt(d), HEAD_DIM=d, CAUSAL=causal, **meta)
    return out


def check_attention(b, h, n, d, causal, **tiles):
    def make(gen):
        return tuple(checks.randn((b, h, n, d), gen=gen, dtype=torch.float16) for _ in "qkv")
    checks.check(lambda q, k, v, out: attention_tma(q, k, v, out, causal=causal, **tiles),
                 lambda q, k, v: attention.reference(q, k, v, causal), make,  # float64
                 kernels=["attention_tma_kernel"], rtol=1e-3, atol=1e-3)


ATTENTION_CHECKS = DEVICE.pick(gpu=[(2, 3, 1024, 64), (2, 3, 1024, 128), (1, 2, 256, 128)],
                               interpreter=[(2, 3, 64, 32)])
for shape in ATTENTION_CHECKS:
    for causal in (False, True):
        check_attention(*shape, causal)
print(f"version 5 agrees with float64 attention on {len(ATTENTION_CHECKS)} shapes, causal and not; "
      + ("tiles " + ", ".join(f"D {d}: {attention_tiles(d)}" for d in (64, 128))
         if DEVICE.is_gpu else f"tiles {attention_tiles(32)}"))


def nan_rows(**tiles):
    """How many output rows of version 5 hold a NaN, at B 2, H 3, N 1024, D 128."""
    q, k, v = (torch.randn(2, 3, 1024, 128, device="cuda", dtype=torch.float16) for _ in "qkv")
    out = attention_tma(q, k, v, torch.empty_like(q), **tiles)
    return int(out.isnan().any(-1).sum()), out.shape[0] * out.shape[1] * out.shape[2]


if HOPPER:
    with recorded.cell("09_hopper/ws-stages"):
        for stages in (2, 3):
            bad, rows = nan_rows(BLOCK_N=64, num_warps=4, num_stages=stages,
                                 WARP_SPECIALIZE=True)
            print(f"warp-specialized, 128x64 tiles, {stages} stages: {bad} of {rows} rows NaN")
else:
    print("On an sm_90 GPU this cell runs the specialized loop with 2 and 3 stages; here it "
          "shows the recording.")
    recorded.show("09_hopper/ws-stages")

# %% [markdown]
# ## Every version against the libraries, and in the counters
#
# On a GPU the next cell times, all in one run, every matmul version at each size of `SIZES` in
# float16 and bfloat16 beside cuBLAS and 05's persistent kernel (versions 2 and 3 on sm_90
# only), then version 5 beside SDPA's FlashAttention-2 and cuDNN backends (FlashAttention-3's
# ideas, NVIDIA's code) on 07's shape, `B 4, H 32, N 4096`, for D = 64 and 128, causal and not.
# On an sm_90 GPU it then profiles one launch of each version with Nsight Compute: the matmuls
# at 4096³ (float8 for version 4), version 5 at D = 128 without and with specialization, all in
# one profiled process, clocks locked, caches flushed before each pass.
#
# Which step pays at which size? 2048² in 128x256 tiles is 128 tiles, fewer than an H100's 132
# SMs. Where does the gap to cuDNN stay, and which of Hopper's tools could not be used?

# %%
GEMM_CONFIG = tile_config(128, 256, 64, 3)  # 05's kernel at its best config in the probe


def time_ladder(n, dtype):
    """{version: Timing} of every version, cuBLAS and 05's kernel on one square problem."""
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    runs = {"cuBLAS": lambda: torch.matmul(a, b, out=c),
            "v1 persistent": lambda: matmul_persistent(a, b, c),
            "05's gemm": lambda: gemm.launch_config(GEMM_CONFIG, a, b, c)}
    if HOPPER:  # descriptors are TMA copies from sm_90 on
        runs["v2 descriptors"] = lambda: matmul_tma(a, b, c)
        runs["v3 specialized"] = lambda: matmul_tma(a, b, c, version="v3")
    return {name: timing.bench(run) for name, run in runs.items()}


LADDER = []
if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("09_hopper/ladder"):
        for dtype in (torch.float16, torch.bfloat16):
            for n in SIZES:
                times = time_ladder(n, dtype)
                base = times["cuBLAS"].median_ms
                for name, t in times.items():
                    LADDER.append({"dtype": str(dtype)[6:], "n": n, "version": name,
                                   "tflops": tflops(n, n, n, t),
                                   "vs cuBLAS": base / t.median_ms})
        for row in LADDER:
            print(f"{row['dtype']:9s} {row['n']:5d}  {row['version']:15s} "
                  f"{row['tflops']:6.0f} TFLOP/s  {row['vs cuBLAS']:.2f}x cuBLAS")
        if not HOPPER:
            print(f"versions 2 and 3 are timed on sm_90 only: {DEVICE.explain('sm_90')}")
else:
    print("On a GPU this cell times versions 1 to 3 and 05's kernel against cuBLAS; the "
          "interpreter cannot time anything.")
    recorded.show("09_hopper/ladder")


def time_attention(d, causal, b=4, h=32, n=4096):
    """{name: TFLOP/s} of version 5 and SDPA's backends on one problem."""
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in "qkv")
    out = torch.empty_like(q)
    runs = {"v5": lambda: attention_tma(q, k, v, out, causal=causal)}
    for name, backend in (("SDPA flash", "FLASH_ATTENTION"), ("SDPA cuDNN", "CUDNN_ATTENTION")):
        run = attention.sdpa(backend)  # it returns a new tensor: no copy is timed with it
        try:
            run(q, k, v, causal)
        except RuntimeError:  # this backend does not run on this GPU or build
            continue
        runs[name] = lambda run=run: run(q, k, v, causal)
    flops = attention.flops(b, h, n, d, causal)
    return {name: timing.bench(run).per_second(flops) / 1e12 for name, run in runs.items()}


if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("09_hopper/attention"):
        for d in (64, 128):
            for causal in (False, True):
                got = time_attention(d, causal)
                vs = (f", v5 {got['v5'] / got['SDPA cuDNN']:.2f}x cuDNN"
                      if "SDPA cuDNN" in got else "")
                print(f"D {d:3d}, {'causal    ' if causal else 'non-causal'}: "
                      + ", ".join(f"{name} {t:4.0f}" for name, t in got.items())
                      + f" TFLOP/s{vs}")
else:
    print("On a GPU this cell times version 5 against SDPA's FlashAttention-2 and cuDNN "
          "backends; the interpreter cannot time anything.")
    recorded.show("09_hopper/attention")


def hopper_problem(version, tiles, n):
    """What profile.each calls in the profiled process: one n^3 product by `version` (1 to 4)
    with `tiles`, one program per SM; float8 inputs for version 4, float16 otherwise."""
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    triton.set_allocator(gemm._allocate)
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    if version == "v4":
        a8, bt8 = (torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn) for _ in "ab")
        one = torch.ones(n, device="cuda")  # the scales of every row of A and of Bᵀ
        return lambda: matmul_fp8_kernel[(programs,)](a8, bt8, c, one, one, n, n, n, n, n, n,
                                                      NUM_SMS=programs, **tiles)
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in "ab")
    if version == "v1":
        return lambda: matmul_persistent_kernel[(programs,)](a, b, c, n, n, n, n, 1, n, 1, n, 1,
                                                             NUM_SMS=programs, **tiles)
    return lambda: matmul_tma_kernel[(programs,)](a, b, c, n, n, n, n, n, n, NUM_SMS=programs,
                                                  **tiles)


def attention_problem(tiles, d, b=4, h=32, n=4096):
    """What profile.each calls: version 5, non-causal, on 07's shape."""
    triton.set_allocator(gemm._allocate)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in "qkv")
    out = torch.empty_like(q)
    return lambda: attention_tma_kernel[(n // tiles["BLOCK_M"], b * h)](
        q, k, v, out, b * h * n, n, LOG2E / math.sqrt(d), HEAD_DIM=d, CAUSAL=False, **tiles)


NOT_PROFILED = (profile.unavailable() or (None if HOPPER else DEVICE.explain("sm_90"))
                or (None if RUN_BENCHMARKS else "RUN_BENCHMARKS is off"))
if NOT_PROFILED is None:
    with recorded.cell("09_hopper/profiles"):
        kernel_of = {"v1 persistent": "matmul_persistent_kernel", "v2 descriptors":
                     "matmul_tma_kernel", "v3 specialized": "matmul_tma_kernel",
                     "v4 float8": "matmul_fp8_kernel"}
        calls = {}
        for label, kernel in kernel_of.items():
            v = label[:2]
            calls[label] = profile.Call(hopper_problem, [kernel],
                                        {"version": v, "tiles": TILES[v], "n": 4096})
        calls["v5 attention D 128"] = profile.Call(  # 07's tiles, not specialized
            attention_problem, ["attention_tma_kernel"], {"tiles": GPU_ATTENTION_TILES[64],
                                                          "d": 128})
        calls["v5 specialized D 128"] = profile.Call(
            attention_problem, ["attention_tma_kernel"],
            {"tiles": attention_tiles(128), "d": 128})
        profile.compare(profile.each(calls), columns=("duration", "l1_read", "dram_read",
                                                      "tensor", "occupancy", "stall"))
else:
    print(f"Not profiled here: {NOT_PROFILED}.")
    recorded.show("09_hopper/profiles")

# %% [markdown]
# ### Reading the counters
#
# What to look for. **v1 → v2**: "L1 load MB" falls to about nothing. It counts the load/store
# unit's global loads, and the TMA copies tiles into shared memory without it. The tensor pipe,
# no longer waiting on address arithmetic, gets busy, and the top stall moves from waiting on
# global loads (`long_scoreboard`) to the barrier where warps wait for a copy. **v2 → v3**:
# occupancy rises by half, 12 warps in place of 8 (the two consumer groups and the producer);
# where the tensor pipe was busy already, little else moves. **v4**: one byte per element, so
# fewer DRAM bytes and a shorter time at a similar tensor-pipe share. **v5**: at D = 128 the
# specialized loop keeps the tensor pipe busier than 07's tiles do. FlashAttention-3 goes further
# by overlapping one warp group's softmax with another's matrix products (Shah et al. 2024), a
# schedule that Triton's specialized loop does not let you write.

# %% [markdown]
# ## Summary
#
# - A **persistent** kernel launches one program per SM and walks the tiles `pid, pid +
#   NUM_SMS, ...` in a snake of grouped bands; alone, with pointer loads, it is far from
#   cuBLAS.
# - **Tensor descriptors** move whole blocks: on sm_90 the TMA copies them, fills zeros past the
#   edges and clips stores. Their shared memory is the pipeline's blocks plus the staged C tile,
#   within 227 KB on an H100.
# - **Warp specialization** is a request the compiler may drop silently; read the compiled
#   kernel's warp count to know. Triton 3.6 and 3.9 honour it for sm_90 with 4 warps and an
#   unflattened loop nest.
# - **float8 e4m3** needs scales (max|x| / 448), here per row of A and column of B; free of
#   k, they multiply the finished float32 sum once. The format's rounding sets the error. On sm_90
#   `tl.dot` sums float8 with fewer bits than float32 unless `max_num_imprecise_acc` says
#   otherwise; its like is `_scaled_mm(..., use_fast_accum=True)`.
# - **Attention on descriptors**: warp specialization pays at D = 128 on sm_90, but Triton
#   specializes one loop only, and a compiler option can make a kernel wrong: check every
#   variant before you time it.
# - Which step pays depends on the shape: measure each against the library in the same run.

# %% [markdown]
# ## Further exercises
#
# 1. Time version 1 with `num_programs=2 * gemm.num_sms()` and with one program per tile (04's
#    grid) at 2048 and 8192. Where does persistence pay, and why not at 2048 with 128x256 tiles?
# 2. Time your float8 kernel with `max_num_imprecise_acc=BLOCK_K` in its `tl.dot`: a float32
#    promotion of the tensor cores' sum every K step. What does it cost in speed, and what does it
#    buy in accuracy against `torch._scaled_mm(..., use_fast_accum=False)`?
# 3. Make version 5 take any N: descriptors of shape `(B·H, N, D)` with blocks of
#    `(1, BLOCK, D)`, reshaped to two dimensions after each load, fill zeros past each head's end
#    and clip the stores. What does the reshape cost on the GPU, and does Triton still
#    warp-specialize the loop?
# 4. Replace the row-wise scales with one scale per 128-wide block of K in each row of A and
#    each column of B (as DeepSeek-V3 does, arXiv:2412.19437). Why can the scales no longer wait
#    for the finished sum, where do they go now, and what does that cost in speed?
