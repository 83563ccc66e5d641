# %% [markdown]
# # 07 · FlashAttention
#
# Attention computes `softmax(Q Kᵀ / √d) V`. Written as three PyTorch operations it builds the
# N × N matrix of scores, writes it to memory, reads it back for the softmax, writes the
# probabilities, and reads them again for the product with V. For a sequence of 16 384 tokens
# that matrix has 268 million entries per head: memory grows with the square of the sequence
# length, and the time goes into moving it. FlashAttention (Dao et al. 2022, arXiv:2205.14135)
# never stores it: each program keeps one tile of queries on chip, streams the keys and values
# past it, and combines the blocks with the online softmax of 06. Memory becomes linear in the
# sequence length and, with no N × N traffic, the kernel is limited by arithmetic instead.
#
# **You will learn:** to measure attention's memory against sequence length; the tiled forward
# kernel (a resident Q tile, streamed K/V tiles, scores in registers, the running max and sum,
# rescaling the output accumulator, `exp2` with the scale folded in, the final normalisation);
# causal masking that skips whole blocks and masks only the diagonal; ragged sequence lengths;
# how your kernel compares with eager PyTorch, `torch.compile` and PyTorch's fused attention
# backends, on the roofline.

# %%
from grader.runtime import device

DEVICE = device.setup()

import math

import matplotlib.pyplot as plt
import torch
import triton
import triton.language as tl
from tqdm.auto import tqdm

from grader.runtime import checks, integrity, perf, results, roofline, timing

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
MEMORY_SHAPE = DEVICE.pick(gpu=(1, 8, 16_384, 64), interpreter=(1, 1, 384, 16))
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
# beyond the output for the tiled kernel) and says so in the plot. Run it again after Exercise 1
# to add your kernel's measured curve.

# %%
def peak_extra_bytes(fn):
    """Peak bytes allocated during fn() beyond what was allocated before it (GPU only)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def memory_sweep(lengths, b=1, h=8, d=64):
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
        kernel = globals().get("flash_attention")  # defined by Exercise 1, further down
        try:
            kernel(q, k, v, out)  # compile first: the measurement is of one call
            tiled = peak_extra_bytes(lambda f=kernel, q=q, k=k, v=v, o=out: f(q, k, v, o))
            curves["tiled kernel (yours)"].append(tiled)
        except Exception as exc:  # noqa: BLE001 - not written yet, or wrong: say so and go on
            if n == lengths[0]:
                print(f"your kernel did not run ({type(exc).__name__}); its curve is left out")
            curves["tiled kernel (yours)"].append(float("nan"))
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, values in curves.items():
        ax.plot(lengths, [v / 2**20 for v in values], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("MiB beyond inputs and output")
    how = "measured (max_memory_allocated)" if DEVICE.is_gpu else "counted analytically (CPU)"
    ax.set_title(f"Attention memory, B=1, H=8, D=64, float16: {how}", fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3)
    plt.show()
    for n, naive, tiled in zip(lengths, *curves.values(), strict=True):
        shown = "not written yet" if math.isnan(tiled) else f"{tiled / 2**20:6.2f} MiB"
        print(f"N={n:5d}: naive {naive / 2**20:8.1f} MiB, tiled {shown}")
    return curves


memory = memory_sweep(MEMORY_LENGTHS)

# %% [markdown]
# Each doubling of N multiplies the naive curve by 4: quadratic, as counted. On a GPU the tiled
# kernel's curve is missing until you write it; the sweep runs again after the exercise. The paper's claim is that FlashAttention's extra memory is
# linear in N; the kernel you write below needs no memory at all beyond its output, which is the
# extreme case of that claim (the paper's kernel also keeps the softmax statistics, $N$ numbers
# per head, for the backward pass).
#
# ## The tiled algorithm
#
# One program owns a tile of `BLOCK_M` query rows, loaded once and kept in registers. It walks
# over the keys and values in blocks of `BLOCK_N` rows. For each block:
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
#
# **`exp2` with the scale folded in.** The GPU's exponential instruction computes $2^x$; `exp(x)`
# is compiled as `exp2(x · log2 e)`. The kernel keeps its scores in base 2 from the start: it
# multiplies `S` by `qk_scale = (1/√D) · log2(e)` once, keeps $m$ in those units, and calls
# `tl.math.exp2`. One multiply-add per score does the scaling, the change of base and the
# subtraction of the maximum. Forgetting the `log2(e)` gives the softmax of `S/(√D · ln 2)`: wrong.
#
# **Causal attention.** Query $i$ sees keys $j \le i$. For the query tile starting at row
# `start_m * BLOCK_M`, every key block that ends before that row is entirely visible: no mask
# needed. Key blocks that start after the tile's last row are entirely hidden: the loop never
# reaches them, so the causal kernel does about half the work. Only the blocks on the diagonal
# need the mask `i >= j`. The kernel therefore runs its loop twice: over the unmasked blocks,
# then over the diagonal ones with masking (the picture shows this for `BLOCK_M = 2 · BLOCK_N`).
# Masked scores must become `-inf` (so that $e^{-\infty} = 0$), not 0, which is a perfectly
# ordinary score.
#
# **Ragged lengths.** When N is not a multiple of the block, the last key block reads past the
# end: its keys and values are loaded with a mask (`other=0`), and their scores set to `-inf`.
# Query rows past N are computed on zeros and not stored.
#
# **Batch and heads.** The grid is `(cdiv(N, BLOCK_M), B · H)`; each program finds its batch and
# head from the second index and offsets its pointers with the strides, in int64.

# %%
def draw_causal_blocks(n_blocks_m=4, ratio=2):
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    for qm in range(n_blocks_m):
        for kn in range(n_blocks_m * ratio):
            if kn < qm * ratio:
                color, label = "C0", "unmasked"
            elif kn < (qm + 1) * ratio:
                color, label = "C1", "diagonal: masked"
            else:
                color, label = "whitesmoke", "skipped"
            ax.add_patch(plt.Rectangle((kn, n_blocks_m - 1 - qm), 0.95, 0.95, color=color,
                                       label=label))
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), loc="upper right", fontsize=8)
    ax.set_xlim(0, n_blocks_m * ratio)
    ax.set_ylim(0, n_blocks_m + 1.2)
    ax.set_xlabel("key block (BLOCK_N)")
    ax.set_ylabel("query tile (BLOCK_M), first at the top")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title("Causal attention: which blocks each program computes", fontsize=9)
    plt.show()


draw_causal_blocks()

# %% [markdown]
# ### Exercise 1: the forward kernel
#
# The cell holds three pieces. `_attn_fwd_blocks` is the inner loop: it takes the state
# `(acc, m_i, l_i)`, walks the key/value blocks from `lo` to `hi`, and returns the new state;
# `MASK_CAUSAL` and `MASK_N` (compile-time flags) say whether this stretch needs the causal mask
# and the mask for keys past N. `attn_fwd_kernel` sets up one query tile and calls the loop: for
# causal attention once over the unmasked blocks `[0, start_m * BLOCK_M)` and once over the
# diagonal `[start_m * BLOCK_M, min((start_m + 1) * BLOCK_M, N))`; otherwise once over the full
# blocks and once over the ragged tail; then it normalises and stores. `flash_attention` (given)
# chooses the tile sizes and launches it.
#
# Write the loop body and the kernel's second half. Hints: `tl.dot(q, tl.trans(k))` for the
# scores; `tl.dot(p.to(v.dtype), v, acc)` adds `P V` to `acc` in float32; `tl.math.exp2`;
# the state is float32 throughout, the inputs and output float16.

# %% nbgrader={"grade_id": "flash-attention-kernel", "solution": true}
LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E)


@triton.jit
def _attn_fwd_blocks(
    acc, m_i, l_i,  # the state: (BLOCK_M, HEAD_DIM) float32, (BLOCK_M,) float32 twice
    q,  # the query tile, (BLOCK_M, HEAD_DIM)
    k_ptrs, v_ptrs,  # (BLOCK_N, HEAD_DIM) pointers to key/value block 0 of this head
    stride_kn, stride_vn,  # row strides of K and V
    offs_m, offs_n,  # (BLOCK_M,) query rows of this tile, (BLOCK_N,) 0..BLOCK_N-1
    lo, hi,  # the key rows this call covers: [lo, hi), lo a multiple of BLOCK_N
    N,  # sequence length
    qk_scale,  # (1 / sqrt(D)) * log2(e)
    BLOCK_N: tl.constexpr,
    MASK_CAUSAL: tl.constexpr,  # apply i >= j (and j < N)
    MASK_N: tl.constexpr,  # apply j < N
):
    ### BEGIN SOLUTION
    k_ptrs += lo * stride_kn
    v_ptrs += lo * stride_vn
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n  # (BLOCK_N,) key rows of this block
        # -- scores, in registers: reads BLOCK_N * D of K
        if MASK_N or MASK_CAUSAL:
            k = tl.load(k_ptrs, mask=cols[:, None] < N, other=0.0)  # (BLOCK_N, D)
        else:
            k = tl.load(k_ptrs)  # (BLOCK_N, D)
        qk = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N) float32
        if MASK_CAUSAL:
            visible = (offs_m[:, None] >= cols[None, :]) & (cols[None, :] < N)
            qk = tl.where(visible, qk, float("-inf"))
        elif MASK_N:
            qk = tl.where(cols[None, :] < N, qk, float("-inf"))
        # -- online softmax, base 2, scale folded in
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)  # (BLOCK_M,)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.math.exp2(m_i - m_ij)  # (BLOCK_M,), 0 on the first block
        l_i = l_i * alpha + tl.sum(p, 1)
        # -- rescale the accumulator, add P V: reads BLOCK_N * D of V
        acc = acc * alpha[:, None]
        if MASK_N or MASK_CAUSAL:
            v = tl.load(v_ptrs, mask=cols[:, None] < N, other=0.0)  # (BLOCK_N, D)
        else:
            v = tl.load(v_ptrs)  # (BLOCK_N, D)
        acc = tl.dot(p.to(v.dtype), v, acc)  # (BLOCK_M, D) float32
        m_i = m_ij
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    ### END SOLUTION
    return acc, m_i, l_i


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
    CAUSAL: tl.constexpr,
):
    # -- which query tile, batch and head: causal programs start with the longest rows
    if CAUSAL:
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = (off_bh // H).to(tl.int64)  # int64: batch * stride can pass 2**31
    off_h = (off_bh % H).to(tl.int64)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    offs_d = tl.arange(0, HEAD_DIM)  # (HEAD_DIM,)
    q_ptrs = Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qn + offs_d[None, :]
    k_ptrs = K + off_b * stride_kb + off_h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]
    v_ptrs = V + off_b * stride_vb + off_h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]
    # -- the resident query tile and the state: reads BLOCK_M * D of Q, once
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N, other=0.0)  # (BLOCK_M, HEAD_DIM)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running max, base-2 units
    l_i = tl.zeros((BLOCK_M,), tl.float32)  # running sum
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)  # running output, unnormalised
    ### BEGIN SOLUTION
    if CAUSAL:
        # -- key blocks entirely before this tile: no mask; those after it: never visited
        diagonal = start_m * BLOCK_M
        acc, m_i, l_i = _attn_fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                         offs_m, offs_n, 0, diagonal, N, qk_scale,
                                         BLOCK_N, False, False)
        # -- the diagonal blocks: causal mask (and the mask for keys past N)
        acc, m_i, l_i = _attn_fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                         offs_m, offs_n, diagonal,
                                         tl.minimum(diagonal + BLOCK_M, N), N, qk_scale,
                                         BLOCK_N, True, False)
    else:
        # -- full key blocks without a mask, then the ragged tail (if any) with one
        full = (N // BLOCK_N) * BLOCK_N
        acc, m_i, l_i = _attn_fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                         offs_m, offs_n, 0, full, N, qk_scale,
                                         BLOCK_N, False, False)
        acc, m_i, l_i = _attn_fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                         offs_m, offs_n, full, N, N, qk_scale,
                                         BLOCK_N, False, True)
    # -- normalise and store the rows that exist: writes BLOCK_M * D of Out
    out = acc / l_i[:, None]  # (BLOCK_M, HEAD_DIM)
    o_ptrs = Out + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_on + offs_d[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=offs_m[:, None] < N)
    ### END SOLUTION


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
    """out = softmax(q kᵀ / sqrt(D)) v for (B, H, N, D) tensors, by attn_fwd_kernel."""
    b, h, n, d = q.shape
    assert k.shape == v.shape == out.shape == q.shape, "q, k, v and out must have one shape"
    assert all(t.stride(-1) == 1 for t in (q, k, v, out)), "the head dim must be contiguous"
    block_m, block_n, num_warps, num_stages = config or attention_config(n, d, causal)
    assert block_m % block_n == 0, "BLOCK_N must divide BLOCK_M (the causal diagonal)"
    grid = (triton.cdiv(n, block_m), b * h)
    attn_fwd_kernel[grid](
        q, k, v, out,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        h, n, LOG2E / math.sqrt(d),
        HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal,
        num_warps=num_warps, num_stages=num_stages,
    )
    return out


# %% [markdown]
# ### Checks
#
# Inputs are float16 `(B, H, N, D)` tensors; the reference is the eager code above in float64.
# Tolerance: `rtol = 1e-3`, `atol = 1e-3`. Storing a float16 output rounds it by up to
# $2^{-11} \approx 4.9 \times 10^{-4}$ of its value, and the probabilities are rounded to float16
# before the second product (as FlashAttention does), which the absolute term covers; the cell
# prints PyTorch's own fused attention's error on the same inputs for comparison. During the call
# torch's matmul, softmax and `scaled_dot_product_attention` are refused, and `attn_fwd_kernel`
# must be launched on `q`, `k` and `v` and write every element of `out`: the work must be yours.

# %%
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


def without_torch_attention(fn):
    """fn, refusing calls to torch's matmul, softmax and fused attention while it runs."""
    def run(*args, **kwargs):
        with integrity.forbid(why="attention must be computed by your kernel"):
            return fn(*args, **kwargs)
    run.__name__ = getattr(fn, "__name__", "your function")
    return run


def check_attention(b, h, n, d, causal, **kind):
    graded = without_torch_attention(flash_attention)
    checks.check(lambda q, k, v, out: graded(q, k, v, out, causal=causal),
                 lambda q, k, v: attention_reference(q, k, v, causal),
                 attention_inputs(b, h, n, d, **kind), kernels=["attn_fwd_kernel"],
                 **ATTENTION_TOLERANCE)


q, k, v = attention_inputs(2, 2, 100, 32)(checks.generator(0))
want = attention_reference(*(t.double() for t in (q, k, v)), causal=True)
theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
print("torch's scaled_dot_product_attention on float16, causal: max abs error "
      f"{(theirs.double() - want).abs().max():.1e}, largest |output| {want.abs().max():.2f}")

# %% nbgrader={"grade": true, "grade_id": "test-flash-attention-visible", "points": 2}
b, h, n, d = CHECK_SHAPES[0]
for causal in (False, True):
    check_attention(b, h, n, d, causal)
print(f"visible test passed: (B, H, N, D) = {CHECK_SHAPES[0]}, causal and not")

# %% [markdown]
# The hidden tests run every shape of the parameters cell and every head dim of the device
# (16, 32 and 64 in the interpreter; 64 and 128 on a GPU), causal and not: ragged lengths,
# sequences shorter than one block and of exactly one block, B and H above 1, inputs that are
# strided views, and values with a large common offset, where an accumulator kept in float16
# overflows.

# %% nbgrader={"grade": true, "grade_id": "test-flash-attention-hidden", "points": 3}
check_attention(1, 2, 50, 16 if not DEVICE.is_gpu else 64, causal=True)
### BEGIN HIDDEN TESTS
for shape in CHECK_SHAPES[1:]:
    for causal in (False, True):
        check_attention(*shape, causal)
for d in HEAD_DIMS:
    for n in DEVICE.pick(gpu=[1, 127, 128, 129], interpreter=[1, 33]):
        check_attention(2, 2, n, d, causal=True)
check_attention(1, 3, 90, HEAD_DIMS[-1], causal=False, layout="bnhd")  # strided views
for causal in (False, True):  # sums near 1e5: beyond float16's range
    check_attention(1, 1, 100, HEAD_DIMS[0], causal, v_offset=1000.0, scale=0.05)
print("hidden tests passed: ragged lengths, head dims, strided inputs, large values")
### END HIDDEN TESTS

# %% [markdown]
# ## No N × N allocation
#
# The next test runs your kernel at `(B, H, N, D)` from `MEMORY_SHAPE` (on a GPU: 8 heads of
# 16 384 tokens, where one head's N × N float16 scores alone take 512 MiB) and requires that the
# call allocate at most 8 times the bytes of `q`, a bound that grows linearly with N. How it is
# measured depends on the device, and both are real measurements:
#
# - on a GPU, the peak of `torch.cuda.max_memory_allocated` during the call, beyond what was
#   allocated before it;
# - on the CPU, the bytes of every tensor that a torch function creates during the call
#   (`grader.runtime.integrity.allocations`, which watches torch's functions through `torch.overrides`).
#   A kernel cannot allocate memory itself, so an N × N buffer has to be made by torch.

# %% nbgrader={"grade": true, "grade_id": "test-flash-attention-memory", "points": 2}
b, h, n, d = MEMORY_SHAPE
q_mem, k_mem, v_mem = (torch.randn(b, h, n, d, device=DEVICE.torch_device, dtype=torch.float16)
                       for _ in range(3))
out_mem = torch.empty_like(q_mem)
graded = without_torch_attention(flash_attention)
checks.call_graded(graded, q_mem, k_mem, v_mem, out_mem, causal=False)  # compiles, if it can
if DEVICE.is_gpu:
    extra = peak_extra_bytes(lambda: graded(q_mem, k_mem, v_mem, out_mem))
    how = "peak of torch.cuda.max_memory_allocated"
else:
    with integrity.allocations() as made:
        graded(q_mem, k_mem, v_mem, out_mem)
    extra, how = made.bytes, "bytes of tensors torch created"
bound = 8 * q_mem.nbytes
scores = b * h * n * n * 2
print(f"(B, H, N, D) = {MEMORY_SHAPE}: your call allocated {extra / 2**20:.2f} MiB ({how}); "
      f"bound {bound / 2**20:.2f} MiB; the float16 scores would be {scores / 2**20:.2f} MiB")
assert extra <= bound, (
    f"the call allocated {extra} bytes, more than 8 x q's {q_mem.nbytes}: is an N x N (or "
    "B x H x N x N) buffer made somewhere? FlashAttention keeps the scores in registers.")

# %% [markdown]
# With the kernel written, the memory sweep again: on a GPU the tiled kernel's curve now appears,
# flat at zero beyond its output while the naive one grows fourfold per doubling.

# %%
memory = memory_sweep(MEMORY_LENGTHS)

# %% [markdown]
# ## How it compares
#
# Four other ways to compute the same attention, timed on a GPU at `(B, H, N) = SPEED_BHN`,
# float16, for D = 64 and 128, causal and not:
#
# - **naive eager**: the three operations above;
# - **`torch.compile` of the naive code**: TorchInductor traces the function, fuses what it can
#   (scaling, masking and softmax become one generated Triton kernel, the matmuls go to cuBLAS or
#   to generated templates) and caches the result. Whether the N × N scores disappear depends on
#   what Inductor decides; the measured time and memory say what it did here;
# - **SDPA's flash backend**, `torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)`:
#   FlashAttention-2, written in CUDA;
# - **SDPA's cuDNN backend**, `SDPBackend.CUDNN_ATTENTION`: NVIDIA's fused attention.
#
# A backend that cannot run here (an older GPU, a build without it) is reported and left out.
# FLOPs are counted as $4BHN^2D$ (two matmuls of $2N^2D$ per head), half that for causal.
# On the roofline, each is placed at its arithmetic intensity: for the fused kernels the bytes of
# Q, K, V and the output ($8BHND$ for float16), for the eager and compiled code also the $4N^2$
# elements of score traffic per head. The FlashAttention-3 paper (Shah et al. 2024) reports
# FlashAttention-2 at about 35% of the H100's fp16 peak and its own Hopper kernel at up to 75%;
# the same paper notes that the H100's exponential units are about 250 times slower than its
# matrix units (3.9 against 989 TFLOP/s), so a softmax inside a matmul-bound loop is not free.

# %%
from torch.nn.attention import SDPBackend, sdpa_kernel


def sdpa_backend(backend):
    """A function (q, k, v, causal) -> output that runs SDPA with only `backend` allowed."""
    def run(q, k, v, causal=False):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


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
    roofline.plot(ceilings, points, title=f"Attention, (B, H, N) = {SPEED_BHN}, non-causal")
    plt.show()
else:
    print("On a GPU this cell times naive, compiled, SDPA flash and cuDNN attention and your "
          "kernel, and places them on the measured roofline.")

# %% [markdown]
# ### Speed (graded on a GPU)
#
# At `(B, H, N) = (4, 16, 4096)` in float16, for D = 64 and 128, causal and not, your kernel must
# be at least 5 times as fast as the naive eager code (timed non-causal) and at least 0.8 times as
# fast as SDPA's flash backend (all four cases), each timed in the same run. Full points only if
# every comparison passes: a kernel that does not skip the hidden causal blocks, for instance,
# falls short on the causal cases. After timing, your output is checked against SDPA's.

# %%
SPEED_NEEDS = {"SDPA flash": 0.8, "naive eager": 5.0}  # speedup needed against each baseline


def speed_case(d, causal):
    """The comparisons of one case: a list of (what, measured speedup, speedup needed), and
    the reasons (perf.compare's flags) why any of them cannot be trusted."""
    b, h, n = SPEED_BHN
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    out = torch.empty_like(q)
    flash = sdpa_backend(SDPBackend.FLASH_ATTENTION)
    graded = without_torch_attention(flash_attention)
    expected = flash(q, k, v, causal)

    def ours():
        return graded(q, k, v, out, causal=causal)

    def verify():
        checks.compare(out, expected, rtol=2e-3, atol=2e-3, name="out")

    checks.call_graded(ours, what="`flash_attention`")
    baselines = {"SDPA flash": lambda: flash(q, k, v, causal)}
    if not causal:
        baselines["naive eager"] = lambda: attention_reference(q, k, v)
    measured, flags = [], []
    for name, baseline in baselines.items():
        result = perf.compare(ours, baseline, names=("yours", name), verify=verify)
        what = f"D={d}, {'causal' if causal else 'non-causal'} vs {name}"
        flags += [f"{what}: {why}" for why in result.flags]
        if result.candidate.rounds:
            measured.append((what, result.speedup, SPEED_NEEDS[name]))
    return measured, flags


def speed_cases(points):
    """Score of the speed cell: `points` if every comparison passes, else 0."""
    if not DEVICE.grades_speed:
        return perf.not_graded_here(points)
    failed, flags = [], []
    for d in (64, 128):
        for causal in (False, True):
            measured, case_flags = speed_case(d, causal)
            flags += case_flags
            for what, speedup, need in measured:  # published with the case's flags, if any
                verdict = perf.Verdict(what, speedup, need, flags=tuple(case_flags))
                mark = "ok" if speedup >= need else "TOO SLOW"
                perf.publish_verdict(verdict, f"{what:34s}: {speedup:6.2f}x (needs {need:g}x) {mark}")
                if speedup < need:
                    failed.append(what)
    if flags:
        return perf.flagged(flags, points)
    if failed:
        print(f"NOT YET: {len(failed)} comparison(s) short: {', '.join(failed)}: 0 of {points:g}")
        return 0.0
    print(f"PASS every comparison: {points:g} of {points:g} points")
    return float(points)


# %% nbgrader={"grade": true, "grade_id": "speed-flash-attention", "points": 3}
speed_cases(points=3)

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
# - The kernel is compute bound: compare it with PyTorch's fused backends in TFLOP/s, not GB/s.
#
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
