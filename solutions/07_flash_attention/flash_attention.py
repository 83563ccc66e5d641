# %% [markdown]
# # 07 · FlashAttention
# *Reading time: about 12 minutes.*
#
# Attention computes `softmax(Q Kᵀ / √d) V`. Written as three PyTorch operations it builds the
# N × N matrix of scores, writes it to memory, reads it back for the softmax, writes the
# probabilities, and reads them again for the product with V. For a sequence of 16 384 tokens
# that matrix has 268 million entries per head: memory grows with the square of the sequence
# length, and the time goes into moving it. FlashAttention (Dao et al. 2022, arXiv:2205.14135)
# never stores it: each program keeps a tile of queries on chip, streams the keys and values past
# it, and combines the blocks with 06's online softmax. Memory becomes linear in N and the kernel
# is limited by arithmetic instead.
#
# **You will learn:** to measure attention's memory against sequence length; the tiled forward
# kernel (a resident Q tile, streamed K/V tiles, the running max, sum and accumulator, `exp2`
# with the scale folded in); causal masking that skips whole blocks and masks only the diagonal;
# how your kernel compares with eager PyTorch, `torch.compile` and SDPA's backends, on the
# roofline.

# %%
from grader.runtime import device

DEVICE = device.setup()

import math

import torch
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel
from tqdm.auto import tqdm

from grader.runtime import (
    checks,
    integrity,
    perf,
    plots,
    profile,
    recorded,
    results,
    roofline,
    timing,
)

print(f"Kernels run on {DEVICE.describe()}; tensors live on '{DEVICE.torch_device}'.")

# %% tags=["parameters"]
# You may change these while you work; grading restores this cell as released.
# (batch, heads, sequence length, head dim) for the correctness checks: ragged lengths (not a
# multiple of any block) and B, H > 1. The interpreter gets short sequences and small head dims.
CHECK_SHAPES = DEVICE.pick(
    gpu=[(2, 3, 1000, 64), (1, 2, 1531, 128), (3, 2, 77, 64), (2, 2, 2048, 128)],
    interpreter=[(2, 2, 100, 16), (1, 2, 77, 32), (1, 1, 130, 64), (2, 1, 64, 16)])
HEAD_DIMS = DEVICE.pick(gpu=[64, 128], interpreter=[16, 32, 64])
SPEED_BHN = (4, 16, 4096)  # batch, heads, sequence length of the speed cell (D = 64 and 128)
MEMORY_LENGTHS = DEVICE.pick(gpu=[1024, 2048, 4096, 8192], interpreter=[1024, 2048, 4096, 8192])
RUN_BENCHMARKS = True
RUN_COMPILE = True  # torch.compile of the naive code: tens of seconds of compilation on a GPU


# %% [markdown]
# ## Naive attention and its N × N memory
#
# The reference below is attention as three eager operations, for tensors of shape
# `(B, H, N, D)`. For causal attention (each position attends to itself and earlier positions
# only) the scores above the diagonal are set to `-inf` before the softmax. Its memory traffic,
# counted per head: `Q`, `K`, `V` read and the output written ($4ND$ elements), plus the scores
# written, read by the softmax, the probabilities written and read by the second product: $4N^2$
# elements. Its memory: the scores and the probabilities, $2N^2$ elements per head, alive at once.

# %%
def attention_reference(q, k, v, causal=False):
    """softmax(q kᵀ / sqrt(D)) v in eager PyTorch: writes and reads N x N scores per head."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, N, N)
    if causal:
        n = q.shape[-2]
        above = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(above, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, N, D)


def attention_flops(b, h, n, d, causal=False):
    """Two matmuls of 2*N*N*D FLOPs per head; causal does half the useful work."""
    return 4 * b * h * n * n * d // (2 if causal else 1)


# %% [markdown]
# ### Memory against sequence length
#
# On a GPU the cell measures the peak of `torch.cuda.max_memory_allocated` during one call of
# the naive code and of your tiled kernel (once it is written, below) for `B = 1, H = 8, D = 64`
# in float16, beyond the inputs and the output. On the CPU nothing is measured: the cell counts
# the bytes analytically ($2N^2$ elements of float16 per head for naive attention, and nothing
# beyond the output for the tiled kernel) and says so in the plot. The sweep runs again after
# Exercise 1, with your kernel's curve.

# %%
def peak_extra_bytes(fn):
    """Peak bytes allocated during fn() beyond what was allocated before it (GPU only)."""
    with integrity.peak_memory() as peak:
        fn()
    return peak.bytes


def memory_sweep(lengths, b=1, h=8, d=64):
    """Bytes beyond inputs and output per sequence length, naive and tiled, plotted."""
    curves = {"naive (eager)": [], "tiled kernel (yours)": []}
    for n in tqdm(lengths, desc="sequence lengths"):
        if not DEVICE.is_gpu:  # counted, not measured
            curves["naive (eager)"].append(2 * b * h * n * n * 2)
            curves["tiled kernel (yours)"].append(0)
            continue
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
        out = torch.empty_like(q)
        attention_reference(q, k, v)  # first call: library workspaces are allocated once
        naive = peak_extra_bytes(lambda q=q, k=k, v=v: attention_reference(q, k, v))
        curves["naive (eager)"].append(naive)
        kernel = globals().get("flash_attention")  # given after Exercise 1, further down
        try:
            kernel(q, k, v, out)  # compile first: the measurement is of one call
            tiled = peak_extra_bytes(lambda f=kernel, q=q, k=k, v=v, o=out: f(q, k, v, o))
            curves["tiled kernel (yours)"].append(tiled)
        except Exception as exc:  # noqa: BLE001 - not written yet, or wrong: say so and go on
            if n == lengths[0]:
                print(f"your kernel did not run ({type(exc).__name__}); its curve is left out")
            curves["tiled kernel (yours)"].append(float("nan"))
    how = "measured (max_memory_allocated)" if DEVICE.is_gpu else "counted analytically (CPU)"
    plots.curves(lengths, {name: [v / 2**20 for v in values] for name, values in curves.items()},
                 xlabel="sequence length N", ylabel="MiB beyond inputs and output",
                 title=f"Attention memory, B={b}, H={h}, D={d}, float16: {how}", from_zero=True)
    for n, naive, tiled in zip(lengths, *curves.values(), strict=True):
        shown = "not run" if math.isnan(tiled) else f"{tiled / 2**20:6.2f} MiB"
        print(f"N={n:5d}: naive {naive / 2**20:8.1f} MiB, tiled {shown}")
    return curves


if DEVICE.is_gpu and RUN_BENCHMARKS:
    with recorded.cell("07_flash_attention/memory"):
        memory = memory_sweep(MEMORY_LENGTHS)
else:  # counted on a laptop; then the sweep as a GPU measured it
    if not DEVICE.is_gpu:
        memory = memory_sweep(MEMORY_LENGTHS)
    print("\nMeasured on a GPU:")
    recorded.show("07_flash_attention/memory")

# %% [markdown]
# Each doubling of N multiplies the naive curve by 4: quadratic, as counted. FlashAttention's
# extra memory is linear in N (the paper's kernel keeps $N$ softmax statistics per head for the
# backward pass); the kernel you write below needs none beyond its output.
#
# ## The tiled algorithm
#
# One program owns a tile of `BLOCK_M` query rows, loaded once and kept on chip. It walks over
# the keys and values in blocks of `BLOCK_N` rows. For each block:
#
# 1. `S = Q_tile Kᵀ_block` on the tensor cores: a `(BLOCK_M, BLOCK_N)` tile of scores that lives
#    in registers only;
# 2. the online softmax of 06, one state per query row: $m' = \max(m, \text{rowmax}(S))$,
#    $P = e^{S - m'}$, $\alpha = e^{m - m'}$, $\ell' = \alpha\,\ell + \text{rowsum}(P)$;
# 3. the output accumulator, also a state: `acc` holds $\sum_j e^{s_j - m} v_j$ relative to the
#    current maximum, so it is rescaled like $\ell$: `acc = α · acc + P V_block`.
#
# At the end `acc / ℓ` is the output row. Nothing of size N × N is ever stored; per program, the
# memory is a `BLOCK_M × D` accumulator and two vectors.

# %% [markdown]
# ![One program's loop: the Q tile stays on chip while the K and V blocks stream past; each
# block's scores S stay in registers and update the running max m, sum l and accumulator
# acc](figures/tiled_loop.svg)
#
# **`exp2` with the scale folded in.** The GPU's exponential instruction computes $2^x$; `exp(x)`
# is compiled as `exp2(x · log2 e)`. The kernel keeps its scores in base 2 from the start: it
# multiplies `S` by `qk_scale = (1/√D) · log2(e)` once, keeps $m$ in those units, and calls
# `tl.math.exp2`. One multiply-add per score does the scaling, the change of base and the
# subtraction of the maximum. Forgetting the `log2(e)` gives the softmax of `S/(√D · ln 2)`:
# wrong.

# %% [markdown]
# ### The given code
#
# `attn_fwd_kernel` runs on a grid of `(cdiv(N, BLOCK_M), B · H)` programs. Each finds its query
# tile from the first index and its batch and head from the second, and offsets its pointers with
# the strides, in int64 (batch times stride can pass $2^{31}$). It loads its Q tile and sets the
# state: `m_i = -inf`, `l_i = 0`, `acc = 0`. Then it calls the loop `_attn_fwd_blocks` twice:
# over the whole key blocks without a mask, then over the ragged tail. When N is not a multiple
# of `BLOCK_N`, the last block reads past the end: its keys and values are loaded with a mask
# (`other=0`) and the scores of keys past N become `-inf` (a row sees key `j` only if
# `j < key_limit[row]`, here N). Query rows past N are computed on zeros and not stored. At the
# end it divides `acc` by `l_i` and stores. The launcher, `flash_attention`, is given in the
# Checks cell after the exercise: it picks the tile sizes and launches your kernels.

# %% [markdown]
# ### Exercise 1 · The tiled loop (7 points)
#
# Write the state update inside the loop, in the two places marked: once the scores `qk` of a
# block are known, and once its values `v` are loaded. Work it out from 06's update and the
# picture above:
#
# - the new running max: in which units is it kept, when `qk` is not yet scaled?
# - the probabilities, and the factor that brings the old `l_i` and `acc` to the new max;
# - why the first block, with `m_i = -inf`, needs no special case.
#
# `tl.dot(a, b, acc)` adds `a @ b` to `acc` in float32, and wants `a` and `b` in float16; the
# state is float32 throughout. The tests of this exercise are non-causal; Exercise 2 adds the
# causal kernel.

# %% nbgrader={"grade_id": "flash-attention-kernel", "solution": true}
@triton.jit
def _attn_fwd_blocks(
    acc, m_i, l_i,  # the state: (BLOCK_M, HEAD_DIM) float32, (BLOCK_M,) float32 twice
    q,  # the query tile, (BLOCK_M, HEAD_DIM)
    k_ptrs, v_ptrs,  # (BLOCK_N, HEAD_DIM) pointers to key/value block 0 of this head
    stride_kn, stride_vn,  # row strides of K and V
    offs_n,  # (BLOCK_N,) 0..BLOCK_N-1
    lo, hi,  # the key rows this call covers: [lo, hi), lo a multiple of BLOCK_N
    N,  # sequence length: keys past it are not loaded
    key_limit,  # (BLOCK_M,) with MASKED, query row r sees the keys j < key_limit[r]
    qk_scale,  # (1 / sqrt(D)) * log2(e)
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,  # False: every row sees every key of [lo, hi), no mask
):
    k_ptrs += lo * stride_kn
    v_ptrs += lo * stride_vn
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n  # (BLOCK_N,) key rows of this block
        # -- scores, in registers: reads BLOCK_N * D of K
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[:, None] < N, other=0.0)  # (BLOCK_N, D)
            qk = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N) float32
            qk = tl.where(cols[None, :] < key_limit[:, None], qk, float("-inf"))
        else:
            k = tl.load(k_ptrs)  # (BLOCK_N, D)
            qk = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N) float32
        # -- online softmax, base 2: new running max m_ij, probabilities p, factor alpha, sum l_i
        ### BEGIN SOLUTION
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)  # (BLOCK_M,)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.math.exp2(m_i - m_ij)  # (BLOCK_M,), 0 on the first block
        l_i = l_i * alpha + tl.sum(p, 1)
        ### END SOLUTION
        # -- values: reads BLOCK_N * D of V
        if MASKED:
            v = tl.load(v_ptrs, mask=cols[:, None] < N, other=0.0)  # (BLOCK_N, D)
        else:
            v = tl.load(v_ptrs)  # (BLOCK_N, D)
        # -- the accumulator, brought to the new max, plus P V; the max moves on
        ### BEGIN SOLUTION
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)  # (BLOCK_M, D) float32
        m_i = m_ij
        ### END SOLUTION
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return acc, m_i, l_i


@triton.jit
def _rows(Base, stride_b, stride_h, stride_n, off_bh, H, rows, HEAD_DIM: tl.constexpr):
    """(len(rows), HEAD_DIM) pointers to `rows` of batch off_bh // H, head off_bh % H."""
    off_b = (off_bh // H).to(tl.int64)  # int64: batch * stride can pass 2**31
    off_h = (off_bh % H).to(tl.int64)
    base = Base + off_b * stride_b + off_h * stride_h
    return base + rows[:, None] * stride_n + tl.arange(0, HEAD_DIM)[None, :]


@triton.jit
def attn_fwd_kernel(
    # pointers: (B, H, N, HEAD_DIM), the last dimension contiguous
    Q, K, V, Out,
    # strides of batch, head and row
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_on,
    # sizes
    H, N,
    qk_scale,  # (1 / sqrt(HEAD_DIM)) * log2(e)
    # compile-time constants
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,  # query rows per program
    BLOCK_N: tl.constexpr,  # key rows per loop iteration; divides BLOCK_M
):
    # -- which query tile, batch and head
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    k_ptrs = _rows(K, stride_kb, stride_kh, stride_kn, off_bh, H, offs_n, HEAD_DIM)
    v_ptrs = _rows(V, stride_vb, stride_vh, stride_vn, off_bh, H, offs_n, HEAD_DIM)
    # -- the resident query tile and the state: reads BLOCK_M * D of Q, once
    q_ptrs = _rows(Q, stride_qb, stride_qh, stride_qn, off_bh, H, offs_m, HEAD_DIM)
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N, other=0.0)  # (BLOCK_M, HEAD_DIM)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running max, base-2 units
    l_i = tl.zeros((BLOCK_M,), tl.float32)  # running sum
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)  # running output, unnormalised
    # -- whole key blocks without a mask, then the ragged tail (if any) with one
    full = (N // BLOCK_N) * BLOCK_N
    every_key = tl.zeros((BLOCK_M,), tl.int32) + N  # each row sees the keys j < N
    acc, m_i, l_i = _attn_fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                     offs_n, 0, full, N, every_key, qk_scale, BLOCK_N, False)
    acc, m_i, l_i = _attn_fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                     offs_n, full, N, N, every_key, qk_scale, BLOCK_N, True)
    # -- normalise and store the rows that exist: writes BLOCK_M * D of Out
    o_ptrs = _rows(Out, stride_ob, stride_oh, stride_on, off_bh, H, offs_m, HEAD_DIM)
    tl.store(o_ptrs, (acc / l_i[:, None]).to(Out.dtype.element_ty), mask=offs_m[:, None] < N)


# %% [markdown]
# ### Checks
#
# Inputs are float16 `(B, H, N, D)` tensors; the reference is the eager code above in float64.
# Tolerance: `rtol = 1e-3`, `atol = 1e-3`. Storing a float16 output rounds it by up to
# $2^{-11} \approx 4.9 \times 10^{-4}$ of its value, and the probabilities are rounded to float16
# before the second product (as FlashAttention does), which the absolute term covers; the cell
# prints PyTorch's own fused attention's error on the same inputs for comparison. Your kernel
# (`attn_fwd_kernel`, or `attn_fwd_causal_kernel` for causal attention) must be launched on `q`,
# `k` and `v` and write every element of `out`: the work must be yours.

# %%
# -- the launcher, given: it picks the grid and tiles and launches your kernels, which Python
# finds by name when it is called
LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E)

# Tile sizes (BLOCK_M, BLOCK_N, num_warps, num_stages) per head dim, for a GPU: the fastest of the
# candidates the course's benchmark timed on an H100 (its run of 2026-11-21). The interpreter gets
# one small configuration with several blocks per row.
GPU_CONFIGS = {64: (128, 64, 8, 3), 128: (128, 64, 8, 3)}
INTERPRETER_CONFIG = (64, 32, 4, 1)


def attention_config(n, d, causal):
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for this shape on this device."""
    if not DEVICE.is_gpu:
        return INTERPRETER_CONFIG
    return GPU_CONFIGS.get(d, (64, 64, 4, 2))  # other head dims: smaller tiles


def flash_attention(q, k, v, out, causal=False, config=None):
    """out = softmax(q kᵀ / sqrt(D)) v for (B, H, N, D) tensors; with `causal`, query i sees
    the keys j <= i only (the causal kernel is Exercise 2's)."""
    b, h, n, d = q.shape
    assert k.shape == v.shape == out.shape == q.shape, "q, k, v and out must have one shape"
    assert all(t.stride(-1) == 1 for t in (q, k, v, out)), "the head dim must be contiguous"
    block_m, block_n, num_warps, num_stages = config or attention_config(n, d, causal)
    assert block_m % block_n == 0, "BLOCK_N must divide BLOCK_M (the causal diagonal)"
    kernel = attn_fwd_causal_kernel if causal else attn_fwd_kernel
    kernel[(triton.cdiv(n, block_m), b * h)](
        q, k, v, out,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        h, n, LOG2E / math.sqrt(d),
        HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=num_warps, num_stages=num_stages,
    )
    return out


ATTENTION_TOLERANCE = dict(rtol=1e-3, atol=1e-3)


def attention_inputs(b, h, n, d, layout="bhnd", v_offset=0.0, scale=1.0):
    """q, k, v of float16. layout 'bnhd' makes them transposed views of (B, N, H, D) tensors
    (strided heads and rows); v_offset shifts every value (sums then grow with N)."""
    def make(gen):
        shape = (b, h, n, d) if layout == "bhnd" else (b, n, h, d)
        q, k, v = (checks.randn(shape, gen=gen, scale=s) for s in (scale, scale, 1.0))
        q, k, v = (t.half() for t in (q, k, v + v_offset))
        if layout == "bnhd":
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        return q, k, v
    return make


def check_attention(b, h, n, d, causal, **kind):
    checks.check(lambda q, k, v, out: flash_attention(q, k, v, out, causal=causal),
                 lambda q, k, v: attention_reference(q, k, v, causal),
                 attention_inputs(b, h, n, d, **kind),
                 kernels=["attn_fwd_causal_kernel" if causal else "attn_fwd_kernel"],
                 **ATTENTION_TOLERANCE)


q, k, v = attention_inputs(2, 2, 100, 32)(checks.generator(0))
want = attention_reference(*(t.double() for t in (q, k, v)), causal=True)
theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
print("torch's scaled_dot_product_attention on float16, causal: max abs error "
      f"{(theirs.double() - want).abs().max():.1e}, largest |output| {want.abs().max():.2f}")

# %% nbgrader={"grade": true, "grade_id": "test-flash-attention-visible", "points": 1}
check_attention(*CHECK_SHAPES[0], causal=False)
check_attention(1, 2, 40, HEAD_DIMS[0], causal=False, layout="bnhd")  # strided views
check_attention(1, 1, 96, HEAD_DIMS[0], False, v_offset=1000.0, scale=0.05)  # sums near 1e5
print(f"visible test passed: (B, H, N, D) = {CHECK_SHAPES[0]}, non-causal; strided views, large "
      "values")

# %% [markdown]
# The hidden tests run every shape of the parameters cell and every head dim of the device
# (16, 32 and 64 in the interpreter; 64 and 128 on a GPU), non-causal: ragged lengths, sequences
# shorter than one block and of exactly one block, B and H above 1, inputs that are strided
# views, and values with a large common offset, where an accumulator kept in float16 overflows.

# %% nbgrader={"grade": true, "grade_id": "test-flash-attention-hidden", "points": 4}
check_attention(1, 2, 50, 16 if not DEVICE.is_gpu else 64, causal=False)
### BEGIN HIDDEN TESTS
for shape in CHECK_SHAPES[1:]:
    check_attention(*shape, causal=False)
for d in HEAD_DIMS:
    for n in DEVICE.pick(gpu=[1, 127, 128, 129], interpreter=[1, 33]):
        check_attention(2, 2, n, d, causal=False)
check_attention(1, 3, 90, HEAD_DIMS[-1], causal=False, layout="bnhd")  # strided views
check_attention(1, 1, 100, HEAD_DIMS[0], False, v_offset=1000.0, scale=0.05)  # sums near 1e5
print("hidden tests passed: ragged lengths, head dims, strided inputs, large values")
### END HIDDEN TESTS

# %% [markdown]
# With the kernel written, the memory sweep again: on a GPU the tiled kernel's curve now appears,
# flat at zero beyond its output while the naive one grows fourfold per doubling.
#
# Memory held is one cost of the scores; memory traffic is the other. The cell then profiles one
# call of the naive code (all its kernels) and of your kernel at every other length (Nsight
# Compute, in a process apart from the notebook's, caches flushed before each kernel) and plots the DRAM
# bytes read. On the log scale a slope of 2 is quadratic, 1 linear: the naive code writes the
# scores and reads them back; yours reads `Q`, `K` and `V` from memory, the rest from on-chip
# memory and L2.

# %%
def attention_problem(n, config, naive, b=1, h=8, d=64):
    """What profile.each calls in the profiled process: one attention call on float16 inputs."""
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    out = torch.empty_like(q)
    if naive:
        return lambda: attention_reference(q, k, v)
    return lambda: flash_attention(q, k, v, out, config=config)


memory = memory_sweep(MEMORY_LENGTHS)
TRAFFIC_LENGTHS = MEMORY_LENGTHS[::2]  # every other length: each profile replays its kernels
NOT_PROFILED = profile.unavailable() or (None if RUN_BENCHMARKS else "RUN_BENCHMARKS is off")
if NOT_PROFILED is None:
    with recorded.cell("07_flash_attention/dram-traffic"):
        traffic = profile.each({f"{kind}, N={n}": profile.Call(
            attention_problem, [] if kind == "naive" else ["attn_fwd_kernel"],
            {"n": n, "config": attention_config(n, 64, False), "naive": kind == "naive"})
            for n in TRAFFIC_LENGTHS for kind in ("naive", "tiled")})
        profile.compare(traffic, columns=("duration", "dram_read", "dram_written"))
        plots.curves(TRAFFIC_LENGTHS, {kind: [profile.total(traffic[f"{kind}, N={n}"],
                                                            "dram_bytes_read") / 1e6
                                              for n in TRAFFIC_LENGTHS]
                                      for kind in ("naive", "tiled")},
                     log_y=True, xlabel="sequence length N", ylabel="MB read from DRAM (one call)",
                     title=f"Attention's DRAM reads, B=1, H=8, D=64, float16, {DEVICE.name}")
else:
    print(f"Not profiled here: {NOT_PROFILED}.")
    recorded.show("07_flash_attention/dram-traffic")

# %% [markdown]
# ### Speed (2 points, graded on a GPU)
#
# At `(B, H, N) = (4, 16, 4096)` in float16, non-causal, your kernel must be at least 1.1x as fast
# as SDPA's flash backend at D = 64 and 128, and 5x as fast as naive eager code at D = 64, all
# timed in the same run; full points only if every comparison passes. Your output must match
# SDPA's, but not bit for bit (your loop adds in another order: equal bits mean SDPA did the
# work); only your kernels may run in the timed calls. On an H100 and an H200 the reference
# measured 1.34x to 1.42x SDPA flash; one walking K and V twice, 0.92x to 1.02x.
#
# Why naive eager only at D = 64: naive attention is limited by memory bandwidth (its N × N
# traffic), your kernel by arithmetic, so their ratio follows each GPU's balance of bandwidth to
# FLOP/s, more so at D = 128. The reference measured 8.2x to 9.4x at D = 64 on both GPUs, but
# 4.9x to 5.3x at D = 128 on the H100 and 4.7x on the H200, whose memory is faster; the cell shows
# that ratio without grading it. SDPA's flash backend is limited by arithmetic like your kernel.

# %%
SPEED_NEEDS = {"SDPA flash": 1.1, "naive eager": 5.0}  # speedup needed against each baseline
NAIVE_GRADED_AT = (64,)  # head dims graded against naive eager; at the others it is shown only


def sdpa_backend(backend):
    """A function (q, k, v, causal) -> output that runs SDPA with only `backend` allowed."""
    def run(q, k, v, causal=False):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def speed_case(d, causal):
    """Your kernel at SPEED_BHN and head dim d against SDPA's flash backend and, non-causal,
    naive eager attention (graded at the head dims of NAIVE_GRADED_AT, shown at the others)."""
    b, h, n = SPEED_BHN
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    out = torch.empty_like(q)
    flash = sdpa_backend(SDPBackend.FLASH_ATTENTION)

    def verify():  # against the inputs as they are now: they change before every timed call
        checks.compare(out, flash(q, k, v, causal), rtol=2e-3, atol=2e-3, name="out")

    baselines = [perf.Baseline("SDPA flash", lambda: flash(q, k, v, causal),
                               at_least=SPEED_NEEDS["SDPA flash"], distinct=True)]
    if not causal:
        naive = SPEED_NEEDS["naive eager"] if d in NAIVE_GRADED_AT else None
        baselines.append(perf.Baseline("naive eager", lambda: attention_reference(q, k, v),
                                       at_least=naive))
    return perf.Case(lambda: flash_attention(q, k, v, out, causal=causal),
                     kernels=["attn_fwd_causal_kernel" if causal else "attn_fwd_kernel"],
                     inputs=(q, k, v), out=out, verify=verify, baselines=baselines,
                     name=f"D={d}, {'causal' if causal else 'non-causal'}",
                     flops=attention_flops(b, h, n, d, causal), dtype=torch.float16)


def speed_cases(points, causal):
    """Score of a speed cell: `points` if every graded comparison at D = 64 and 128 passes."""
    if not DEVICE.grades_speed:
        return perf.not_graded_here(points)
    return perf.grade(*(speed_case(d, causal) for d in (64, 128)), points=points)


# %% nbgrader={"grade": true, "grade_id": "speed-flash-attention", "points": 2}
speed_cases(points=2, causal=False)

# %% [markdown]
# ## Causal attention
#
# Query $i$ sees keys $j \le i$. For the query tile whose first row is `start_m * BLOCK_M`, every
# key block that ends before that row is entirely visible: no mask needed. Key blocks that start
# after the tile's last row are entirely hidden: the loop never reaches them, so causal attention
# does about half the work. Only the blocks on the diagonal need a mask, one limit per query row.
# The picture below shows this for `BLOCK_M = 2 · BLOCK_N`. Masked scores must become `-inf` (so
# that $e^{-\infty} = 0$), not 0, which is a perfectly ordinary score; the loop of Exercise 1
# already does that for the keys at or past `key_limit`.
#
# ![Four query tiles of BLOCK_M = 2 · BLOCK_N rows: each visits the key blocks before its tile
# without a mask and its two diagonal blocks with the causal mask, and skips the blocks after
# it](figures/causal_blocks.svg)

# %% [markdown]
# ### Exercise 2 · The causal mask (3 points)
#
# `attn_fwd_causal_kernel` below is set up like `attn_fwd_kernel`, with the same state and the
# same loop, and `flash_attention(..., causal=True)` launches it. Its programs take the query
# tiles in reverse order, so that the longest rows start first. Write the part between the setup
# and the store: the calls of `_attn_fwd_blocks` that cover exactly the keys each row of the tile
# may see. Decide which key rows need no mask, which need one and with what `key_limit` per query
# row, and where the loop stops. Check your answer against the first tile (no block before the
# diagonal), a row's own key, and the last tile when N is not a multiple of `BLOCK_M`.
#
# If you change Exercise 1's cell, run this one again: on a GPU a kernel keeps the code it
# compiled, and this one compiled the loop as it was.

# %% nbgrader={"grade_id": "flash-attention-causal", "solution": true}
@triton.jit
def attn_fwd_causal_kernel(
    Q, K, V, Out,
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_on,
    H, N,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # -- which query tile (the last first: it has the most key blocks), batch and head
    start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    off_bh = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    k_ptrs = _rows(K, stride_kb, stride_kh, stride_kn, off_bh, H, offs_n, HEAD_DIM)
    v_ptrs = _rows(V, stride_vb, stride_vh, stride_vn, off_bh, H, offs_n, HEAD_DIM)
    q_ptrs = _rows(Q, stride_qb, stride_qh, stride_qn, off_bh, H, offs_m, HEAD_DIM)
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N, other=0.0)  # (BLOCK_M, HEAD_DIM)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    ### BEGIN SOLUTION
    diagonal = start_m * BLOCK_M  # the tile's first query row
    own_key = offs_m + 1  # row i sees the keys j < i + 1
    # -- key blocks entirely before the tile: every row sees them, no mask
    acc, m_i, l_i = _attn_fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                     offs_n, 0, diagonal, N, own_key, qk_scale, BLOCK_N, False)
    # -- the diagonal blocks, masked per row; the blocks after the tile are never visited
    acc, m_i, l_i = _attn_fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                     offs_n, diagonal, tl.minimum(diagonal + BLOCK_M, N), N,
                                     own_key, qk_scale, BLOCK_N, True)
    ### END SOLUTION
    o_ptrs = _rows(Out, stride_ob, stride_oh, stride_on, off_bh, H, offs_m, HEAD_DIM)
    tl.store(o_ptrs, (acc / l_i[:, None]).to(Out.dtype.element_ty), mask=offs_m[:, None] < N)


# %% nbgrader={"grade": true, "grade_id": "test-flash-attention-causal-visible", "points": 1}
check_attention(*CHECK_SHAPES[0], causal=True)
check_attention(1, 2, 40, HEAD_DIMS[0], causal=True, layout="bnhd")  # strided views
check_attention(1, 1, 96, HEAD_DIMS[0], True, v_offset=1000.0, scale=0.05)  # sums near 1e5
print(f"visible test passed: (B, H, N, D) = {CHECK_SHAPES[0]}, causal; strided views, large "
      "values")

# %% [markdown]
# The hidden tests run the same cases as Exercise 1's, causal: every shape of the parameters
# cell, every head dim, sequences shorter than one block and of exactly one block, strided views
# and large values.

# %% nbgrader={"grade": true, "grade_id": "test-flash-attention-causal-hidden", "points": 1}
check_attention(1, 2, 50, 16 if not DEVICE.is_gpu else 64, causal=True)
### BEGIN HIDDEN TESTS
for shape in CHECK_SHAPES[1:]:
    check_attention(*shape, causal=True)
for d in HEAD_DIMS:
    for n in DEVICE.pick(gpu=[1, 127, 128, 129], interpreter=[1, 33]):
        check_attention(2, 2, n, d, causal=True)
check_attention(1, 3, 90, HEAD_DIMS[-1], causal=True, layout="bnhd")  # strided views
check_attention(1, 1, 100, HEAD_DIMS[0], True, v_offset=1000.0, scale=0.05)  # sums near 1e5
print("hidden tests passed: ragged lengths, head dims, strided inputs, large values")
### END HIDDEN TESTS

# %% [markdown]
# ### Causal speed (1 point, graded on a GPU)
#
# The same size, causal: at least 1.1 times as fast as SDPA's flash backend at D = 64 and at
# D = 128, in the same run. A kernel that visits the hidden blocks does twice the work and falls
# short here (0.70x to 0.77x; the reference 1.37x to 1.42x).

# %% nbgrader={"grade": true, "grade_id": "speed-flash-attention-causal", "points": 1}
speed_cases(points=1, causal=True)

# %% [markdown]
# ## How it compares
#
# Four other ways to compute the same attention, timed on a GPU at `(B, H, N) = SPEED_BHN`,
# float16, for D = 64 and 128, causal and not:
#
# - **naive eager**: the three operations above;
# - **`torch.compile` of the naive code**: TorchInductor fuses what it can (scaling, masking and
#   softmax into one generated Triton kernel; the matmuls go to cuBLAS or generated templates).
#   Whether the N × N scores disappear is Inductor's decision; the measured time says what it did;
# - **SDPA's flash backend**, `sdpa_kernel(SDPBackend.FLASH_ATTENTION)`: FlashAttention-2 in CUDA;
# - **SDPA's cuDNN backend**, `SDPBackend.CUDNN_ATTENTION`: NVIDIA's fused attention.
#
# A backend that cannot run here is reported and left out. FLOPs are $4BHN^2D$, half for causal.
# On the roofline, the fused kernels move Q, K, V and the output ($8BHND$ bytes in float16); the
# eager and compiled code also $4N^2$ elements of scores per head.

# %%
def bound_problem(n, d, config):
    """What profile.each calls: one call of your kernel on (1, 32, n, d) float16 inputs, or with
    n = 0 a copy of 2**28 float16 elements."""
    if n == 0:  # x * 2, a kernel: x.clone() would be a copy engine's memcpy, not a kernel
        x = torch.randn(1 << 28, device="cuda", dtype=torch.float16)
        return lambda: x * 2
    q, k, v = (torch.randn(1, 32, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    out = torch.empty_like(q)
    return lambda: flash_attention(q, k, v, out, config=config)


def available(fn, q, k, v):
    """None if fn runs on these inputs (compiling it if need be), else the reason it cannot."""
    try:
        fn(q, k, v)
        return None
    except Exception as exc:  # noqa: BLE001 - any backend failure means "not available here"
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"


def compare_attention(b, h, n, d):
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    out = torch.empty_like(q)
    candidates = {"naive eager": attention_reference,
                  "SDPA flash": sdpa_backend(SDPBackend.FLASH_ATTENTION),
                  "SDPA cuDNN": sdpa_backend(SDPBackend.CUDNN_ATTENTION),
                  "yours": lambda q, k, v, causal=False: flash_attention(q, k, v, out, causal)}
    if RUN_COMPILE and d == 64:  # one compilation (each new shape or branch would recompile)
        candidates["torch.compile (naive)"] = torch.compile(attention_reference)
    rows = []
    for name, fn in candidates.items():
        problem = available(fn, q, k, v)
        if problem:
            print(f"{name} is not available here: {problem}")
            continue
        for causal in (False,) if name.startswith("torch.compile") else (False, True):
            t = timing.bench(lambda fn=fn, causal=causal: fn(q, k, v, causal=causal))
            flops = attention_flops(b, h, n, d, causal)
            moved = 8 * b * h * n * d + (0 if name.startswith(("SDPA", "yours")) else
                                         4 * b * h * n * n * 2)
            rows.append((name, causal, t.median_ms * 1e-3, flops, moved))
    return rows


if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("07_flash_attention/attention-roofline"):
        b, h, n = SPEED_BHN
        ceilings = roofline.measure_ceilings(precisions=("fp16",))
        points, table = [], []
        for d in tqdm((64, 128), desc="head dims"):
            for name, causal, seconds, flops, moved in compare_attention(b, h, n, d):
                label = f"{name}, D={d}{', causal' if causal else ''}"
                table.append((label, flops / seconds / 1e12, seconds * 1e3))
                if not causal:
                    points.append(roofline.Point(f"{name} D={d}", flops, moved, seconds))
                if name == "yours":
                    results.record("07_flash_attention", f"flash attention D={d} causal={causal}",
                                   flops=flops, bytes_moved=moved, seconds=seconds,
                                   precision="fp16")
        for label, tflops, ms in table:
            print(f"{label:42s} {ms:8.3f} ms  {tflops:6.1f} TFLOP/s")
        roofline.show(ceilings, points, title=f"Attention, (B, H, N) = {SPEED_BHN}, non-causal")
        if NOT_PROFILED is None:  # three launches for Exercise 3, the third profiled above
            both = profile.each({
                "a copy": profile.Call(bound_problem, [], {"n": 0, "d": 0, "config": None}),
                f"yours, N={n}, D=128, 32 heads": profile.Call(
                    bound_problem, ["attn_fwd_kernel"],
                    {"n": n, "d": 128, "config": attention_config(n, 128, False)})})
            small = TRAFFIC_LENGTHS[0]
            profile.compare({**both, f"yours, N={small}, D=64, 8 heads": traffic[f"tiled, N={small}"]},
                            columns=("duration", "memory", "compute", "tensor", "occupancy"))
        else:
            print(f"Not profiled here: {NOT_PROFILED}.")
else:
    print("On a GPU this cell times naive, compiled, SDPA flash and cuDNN attention and your "
          "kernel, places them on the measured roofline, and profiles three launches.")
    recorded.show("07_flash_attention/attention-roofline")

# %% [markdown]
# For scale: the FlashAttention-3 paper (Shah et al. 2024) reports FlashAttention-2 at about 35%
# of the H100's fp16 peak and its own Hopper kernel at up to 75%; the H100's exponential units are
# about 250 times slower than its matrix units (3.9 against 989 TFLOP/s), so a softmax inside a
# matmul-bound loop is not free.
#
# ### Exercise 3 · what binds a kernel? (2 points)
#
# Nsight Compute's *Speed of Light* gives two figures per launch, each a percentage of its peak:
# **memory** throughput (the busiest of DRAM, L2, L1 and shared memory) and **compute** (SM)
# throughput. A kernel is memory-bound when memory is near its peak, compute-bound when the SMs
# are, **latency**-bound when neither is: too little work in flight. The last table above holds a
# copy and your kernel at two sizes (recorded on a GPU). Where does your kernel fall, and what
# does its occupancy say?
#
# Write `bound(k)` for a `profile.KernelProfile`: `"memory"`, `"compute"` or `"latency"`. Where
# "near its peak" begins is yours; the tests use only clear figures (each at most 40% or at least
# 70%, and 10 points apart when both are high).

# %% nbgrader={"grade_id": "attention-bound", "solution": true}
def bound(k: profile.KernelProfile) -> str:
    """'memory', 'compute' or 'latency': what limits the launch `k`."""
    ### BEGIN SOLUTION
    memory, compute = k.memory_throughput_pct, k.compute_throughput_pct
    if max(memory, compute) < 60:
        return "latency"
    return "memory" if memory >= compute else "compute"
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-attention-bound-visible", "points": 1}
def a_launch(memory, compute):
    """A launch with these Speed of Light figures (percent of peak), the rest made up."""
    return profile.KernelProfile(
        kernel="made_up", launch=0, grid=(1, 1, 1), block=(128, 1, 1), duration_ns=1e5,
        dram_bytes_read=1e8, dram_bytes_written=1e8, l1_sectors_per_load=16,
        l1_sectors_per_store=16, l2_sectors_per_load=4, l2_sectors_per_store=4,
        l2_hit_rate_pct=50.0, achieved_occupancy_pct=50.0, tensor_pipe_pct=0.0,
        memory_throughput_pct=memory, compute_throughput_pct=compute)


def clear_bound(k):
    """What binds `k` where its figures are far from any sensible threshold, else None."""
    high = {"memory": k.memory_throughput_pct >= 70, "compute": k.compute_throughput_pct >= 70}
    low = {"memory": k.memory_throughput_pct <= 40, "compute": k.compute_throughput_pct <= 40}
    if all(low.values()):
        return "latency"
    if all(high.values()) and abs(k.memory_throughput_pct - k.compute_throughput_pct) >= 10:
        return max(high, key=lambda u: getattr(k, f"{u}_throughput_pct"))
    one = [u for u in high if high[u] and low["compute" if u == "memory" else "memory"]]
    return one[0] if one else None


def expect_bound(k, what):
    __tracebackhide__ = True
    want = clear_bound(k)
    got = checks.call_graded(bound, k)
    if got == want:
        return
    figures = (f"memory {k.memory_throughput_pct:.0f}%, compute {k.compute_throughput_pct:.0f}% "
               "of peak")
    if got not in ("memory", "compute", "latency"):
        raise AssertionError(f"{what}: return 'memory', 'compute' or 'latency', got {got!r}")
    why = ("nothing is near its peak: too little work in flight" if want == "latency" else
           f"the {want} figure is near its peak" + (", and above the other" if got != "latency"
                                                     else ": is your threshold above 70%?"))
    raise AssertionError(f"{what} ({figures}): expected {want!r}, got {got!r}: {why}")


for memory, compute in [(92, 18), (20, 85), (12, 6)]:
    expect_bound(a_launch(memory, compute), "a made-up launch")
print("visible test passed: three made-up launches")

# %% nbgrader={"grade": true, "grade_id": "test-attention-bound-hidden", "points": 1}
expect_bound(a_launch(memory=3, compute=95), "a made-up launch")  # the hidden tests follow
### BEGIN HIDDEN TESTS
_recorded = profile.recorded_profiles("07_flash_attention/attention-roofline")
_clear = {label: p.kernels[0] for label, p in _recorded.items() if clear_bound(p.kernels[0])}
assert len(_clear) >= 2, f"of the recorded launches only {list(_clear)} are clear (course defect)"
for _label, _k in _clear.items():
    expect_bound(_k, f"the recorded {_label}")
for _memory, _compute in [(30, 88), (80, 35), (38, 39), (95, 76), (77, 99), (0.5, 0.2)]:
    expect_bound(a_launch(_memory, _compute), "a made-up launch")
print(f"hidden tests passed: {len(_clear)} recorded launches and six made-up ones")
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
#
# - Naive attention stores N × N scores per head: memory and traffic quadratic in N, measured
#   above. The tiled kernel keeps a query tile resident, streams key/value tiles, and keeps the
#   scores in registers: memory linear in N (here, nothing beyond the output).
# - The online softmax of 06 carries across key blocks: a running max and sum per query row, and
#   an output accumulator rescaled by the same factor $\alpha$ whenever the max grows; one
#   division at the end.
# - `exp2` with `(1/√D) · log2 e` folded into one multiply keeps the softmax to one multiply-add
#   and one exponential per score.
# - Causal attention visits only the blocks at or below the diagonal, masking only the diagonal
#   ones; masked scores are `-inf`. Ragged lengths mask the last key block and the stores.
# - The kernel is compute bound: compare it with PyTorch's fused backends in TFLOP/s, not GB/s,
#   and grade its speed against a baseline that is compute bound too.

# %% [markdown]
# ## Further exercises
#
# 1. Store the log-sum-exp of each row, `m_i + log2(l_i)` (in base 2), to a `(B, H, N)` float32
#    tensor: it is what the backward pass needs. How much memory does it add at N = 16 384?
# 2. On a GPU, time `flash_attention(..., config=(BLOCK_M, BLOCK_N, num_warps, num_stages))` for
#    several tile configurations per shape against SDPA's flash and cuDNN backends. Which
#    configuration wins for D = 64, and for D = 128? Does causal change the answer?
# 3. With `B · H` small and N large (one head of 64k tokens), the grid has few programs per SM.
#    Split the key range of each query tile between two programs and merge their states with
#    06's merge. What does each program need to store for the merge?
# 4. Support grouped-query attention, where several query heads share one key/value head: which
#    lines of the kernel change?
