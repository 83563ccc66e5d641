# %% [markdown]
# # 10 · FlashAttention backward
# *Reading time: about 13 minutes.*
#
# 07's kernel computes attention without ever storing the N × N matrix of probabilities. Training
# needs more: the gradients of the loss with respect to Q, K and V, and the textbook backward
# pass reads that very matrix again. Autograd keeps it from the forward pass, so the memory that
# 07 saved comes straight back, and the backward moves N² elements several times over. The
# FlashAttention backward keeps one number per query row from the forward, recomputes the
# probabilities tile by tile, and reaches every gradient with memory linear in N.
#
# **You will learn:** the backward of softmax attention, its shapes and the bytes each naive step
# moves; why storing the log-sum-exp beats storing P; the row statistic
# $\delta = \mathrm{rowsum}(dO \circ O)$; the dK/dV kernel (one program per key block, a loop over
# the query blocks) and the dQ kernel, causal included; a `torch.autograd.Function` checked with
# `gradcheck` and against SDPA; a training run; the speed of your backward against SDPA's.

# %%
from grader.runtime import device

DEVICE = device.setup()

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from flash_forward import LOG2E, _rows, attention_forward  # 07's, released here
from torch.nn.attention import SDPBackend, sdpa_kernel

from grader.runtime import checks, hints, integrity, perf, plots, profile, recorded, results, timing

print(f"Kernels run on {DEVICE.describe()}; tensors live on '{DEVICE.torch_device}'.")

# %% tags=["parameters"]
# You may change these while you work; grading restores this cell as released.
# (batch, heads, sequence length, head dim) of the checks: ragged lengths, B and H above 1.
CHECK_SHAPES = DEVICE.pick(
    gpu=[(2, 3, 1000, 64), (1, 2, 1531, 128), (3, 2, 77, 64), (2, 2, 2048, 128)],
    interpreter=[(2, 2, 40, 16), (1, 2, 45, 32), (1, 1, 36, 64), (2, 1, 33, 16)])
HEAD_DIMS = DEVICE.pick(gpu=[64, 128], interpreter=[16, 32, 64])
LONG_N = DEVICE.pick(gpu=300, interpreter=40)  # the stress cases: several blocks of queries
SPEED_BHN = (4, 16, 4096)  # batch, heads, sequence length of the speed cell (D = 64 and 128)
MEMORY_LENGTHS = [1024, 2048, 4096, 8192]  # sequence lengths of the memory sweep (GPU)
TRAIN_STEPS = DEVICE.pick(gpu=300, interpreter=4)
RUN_BENCHMARKS = True


# %% [markdown]
# ## The backward pass on paper
#
# For one head, with `Q`, `K`, `V` of shape `(N, D)` and $s = 1/\sqrt{D}$, the forward computes
# the scores $S = s\,QK^\top$ and the probabilities $P = \mathrm{softmax}(S)$ row by row, both
# `(N, N)`, then $O = PV$, `(N, D)`. Given $dO$, the gradient of the loss with respect to $O$
# (`(N, D)`), the chain rule gives:
#
# 1. $dV = P^\top dO$, `(N, D)`;
# 2. $dP = dO\,V^\top$, `(N, N)`;
# 3. $dS = P \circ (dP - \delta)$, `(N, N)`, with $\delta_i = \sum_j P_{ij}\,dP_{ij}$ (the
#    softmax's Jacobian, applied row by row);
# 4. $dQ = s\,dS\,K$ and $dK = s\,dS^\top Q$, `(N, D)` each: $S$ is the product scaled by $s$.
#
# Four products of $2N^2D$ FLOPs each, $8N^2D$ per head, twice the forward's $4N^2D$. Two facts
# make a tiled backward possible. $\delta$ needs no $P$:
# $\delta_i = \sum_j P_{ij}\,(dO_i \cdot v_j) = dO_i \cdot \sum_j P_{ij} v_j = dO_i \cdot O_i$,
# the row sum of $dO \circ O$. And one number per row, the log-sum-exp
# $\mathrm{lse}_i = \log \sum_j e^{S_{ij}}$, rebuilds any tile of $P$ from $Q$ and $K$:
# $P_{ij} = e^{S_{ij} - \mathrm{lse}_i}$.

# %%
def attention_backward_reference(q, k, v, do, causal=False):
    """(dq, dk, dv, lse, delta) of softmax(q kᵀ / sqrt(D)) v for the output gradient `do`, in
    eager PyTorch, P kept from the forward as autograd keeps it; lse in base 2, in the kernels'
    units (qk / sqrt(D) * log2(e)). Traffic per head, in elements, beside each line."""
    scale = 1 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-2, -1)) * scale  # reads 2ND, writes N² (the scaling: N² more, twice)
    if causal:
        n = q.shape[-2]
        above = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(above, float("-inf"))
    p = torch.softmax(s, dim=-1)  # reads N², writes N²: kept until the backward
    o = p @ v  # reads N² + ND, writes ND
    dv = p.transpose(-2, -1) @ do  # reads N² + ND, writes ND
    dp = do @ v.transpose(-2, -1)  # reads 2ND, writes N²
    delta = (do * o).sum(-1)  # reads 2ND, writes N
    ds = p * (dp - delta[..., None])  # reads 2N² + N, writes N²
    dq = (ds @ k) * scale  # reads N² + ND, writes ND (and the scaling, 2ND)
    dk = (ds.transpose(-2, -1) @ q) * scale  # reads N² + ND, writes ND (and 2ND)
    return dq, dk, dv, torch.logsumexp(s, dim=-1) * LOG2E, delta


def backward_flops(b, h, n, d, causal=False):
    """Five products of 2*N*N*D FLOPs per head (S recomputed, dV, dP, dQ, dK), the count of the
    FlashAttention papers; causal does half the useful work."""
    return 10 * b * h * n * n * d // (2 if causal else 1)


def eager_attention(q, k, v, causal=False):
    """The forward of attention_backward_reference: what autograd differentiates."""
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), -math.inf)
    return torch.softmax(s, dim=-1) @ v


def sdpa_backend(backend):
    """A function (q, k, v, causal) -> output that runs SDPA with only `backend` allowed."""
    def run(q, k, v, causal=False):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def backward_of(forward, q, k, v, do, causal=False):
    """A function that runs the backward of `forward` on (q, k, v): the forward runs once, here,
    and its graph is kept for every call."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = forward(*leaves, causal=causal)
    return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)


n, d = 4096, 64
naive = 7 * n * n * 2  # the N² elements the backward's lines read and write: 1 + 1 + 3 + 1 + 1
fused = 8 * n * d * 2 + 2 * n * 4  # Q, K, V, O, dO read, dQ, dK, dV written; lse and delta
print(f"One head, N = {n}, D = {d}, float16: the eager backward reads and writes "
      f"{naive / 2**20:.0f} MiB of N x N tensors; the tensors a fused one needs take "
      f"{fused / 2**20:.1f} MiB.")

# %% [markdown]
# ### Storing P, or recomputing it
#
# Autograd's backward of the eager code above reads `P`, kept since the forward: $2N^2$ bytes
# per head in float16, alive from the forward to the backward, for every attention layer of a
# model. Recomputing it instead costs one more product, $QK^\top$, and an exponential per score:
# $10N^2D$ FLOPs where $8N^2D$ sufficed (2.5 times the forward), plus the log-sum-exp, $N$ floats
# per head, kept instead of $P$.
#
# On a GPU the cell measures both for `B = 1, H = 8, D = 64` in float16: the peak memory of a
# forward and backward beyond the inputs (`torch.cuda.max_memory_allocated`), and the time of the
# backward alone, for eager attention (P stored) and SDPA's FlashAttention-2 backend (P
# recomputed). On the CPU it counts the stored `P` and shows a GPU's measurement.

# %%
def store_or_recompute(lengths, b=1, h=8, d=64):
    """Peak MiB of a forward and backward, and ms of the backward, eager and SDPA flash."""
    ways = {"eager (P stored)": eager_attention,
            "SDPA flash (P recomputed)": sdpa_backend(SDPBackend.FLASH_ATTENTION)}
    memory, times = {w: [] for w in ways}, {w: [] for w in ways}
    for n in lengths:
        q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16)
                       for _ in range(4))
        for way, forward in ways.items():
            backward_of(forward, q, k, v, do)()  # library workspaces, allocated once
            with integrity.peak_memory() as peak:
                backward_of(forward, q, k, v, do)()
            memory[way].append(peak.bytes / 2**20)
            times[way].append(timing.bench(backward_of(forward, q, k, v, do)).median_ms)
    for i, n in enumerate(lengths):
        print(f"N={n:5d}: " + "; ".join(f"{w}: {memory[w][i]:7.1f} MiB, backward "
                                         f"{times[w][i]:6.2f} ms" for w in ways))
    plots.curves(lengths, memory, xlabel="sequence length N", ylabel="MiB beyond the inputs",
                 title=f"Forward and backward, B={b}, H={h}, D={d}, float16, {DEVICE.name}",
                 from_zero=True)


if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("10_flash_backward/store-or-recompute"):
        store_or_recompute(MEMORY_LENGTHS)
else:
    for n in MEMORY_LENGTHS:
        print(f"N={n:5d}: P kept for the backward, 8 heads of float16: "
              f"{8 * n * n * 2 / 2**20:7.1f} MiB (counted, not measured)")
    print("\nMeasured on a GPU:")
    recorded.show("10_flash_backward/store-or-recompute")

# %% [markdown]
# ## The forward stores the log-sum-exp
#
# `flash_forward.py`, released beside this notebook, holds 07's forward kernel (both exercises
# answered, causal and not in one kernel, `CAUSAL`) with one addition: after the loop each query
# row stores $\mathrm{lse} = m + \log_2 \ell$ to a `(B, H, N)` float32 tensor. It is kept in
# base 2 and in the kernel's units, those of `qk * qk_scale` with
# `qk_scale = log2(e) / sqrt(D)`, so that the backward rebuilds a tile of probabilities with one
# multiply-add and one `exp2` per score, exactly as the forward made them:
# `p = exp2(qk * qk_scale - lse)`. No running maximum is needed any more: `lse` is the final one,
# and the sum is already divided out.
#
# `attention_forward(q, k, v, causal)` returns `(out, lse)`. The cell checks `lse` against
# PyTorch's `logsumexp` of the scaled scores.

# %%
q, k, v = (checks.randn((2, 2, 64, 32), gen=checks.generator(0), dtype=torch.float16)
           for _ in range(3))
for causal in (False, True):
    out, lse = attention_forward(q, k, v, causal)
    *_, want, _ = attention_backward_reference(*(t.double() for t in (q, k, v, q)), causal)
    print(f"causal={causal}: lse max abs error {(lse.double() - want).abs().max():.1e} "
          f"(values {want.min():.2f} to {want.max():.2f}, base 2)")

# %% [markdown]
# ## δ, one number per row
#
# The backward is three launches after the forward: δ, then dK and dV, then dQ; the figure shows
# what each reads and writes. δ comes first: $\delta = \mathrm{rowsum}(dO \circ O)$, one float32
# per query row, `(B, H, N)` like `lse`, read from $O$ and $dO$ once. Both gradient kernels need
# it, so a small kernel of its own computes it, one program per block of `BLOCK_M` rows.
#
# ![A grid of tensors against kernels in launch order: what 07's forward, the delta kernel, the
# dK/dV kernel and the dQ kernel each read and write, with shapes; the tiles of P, dP and dS only
# rebuilt on chip](figures/dataflow.svg)
#
# *Memory holds `lse` and δ, N floats per head each; the N × N matrices exist only as tiles.*
#
# ### Exercise 1 · δ per row (2 points)
#
# Write the part of `attn_bwd_delta_kernel` between the pointers and the store. Think about
# what the rows past N must give, and about the precision of the product: `O` and `dO` arrive in
# float16, where a product past 65 504 overflows and a sum of D terms loses digits. Each exercise
# is a kernel alone: the launchers, `attention_delta` here and those of Exercises 2 to 4, are
# given in the Checks cell below, and choose each grid and tile size.

# %% nbgrader={"grade_id": "bwd-delta", "solution": true}
@triton.jit
def attn_bwd_delta_kernel(
    Out, DO,  # the forward's output and its gradient: (B, H, N, HEAD_DIM), rows contiguous
    Delta,  # (B, H, N) float32, contiguous: written
    stride_ob, stride_oh, stride_on,
    stride_dob, stride_doh, stride_don,
    H, N,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,  # rows per program
):
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    o_ptrs = _rows(Out, stride_ob, stride_oh, stride_on, off_bh, H, rows, HEAD_DIM)
    do_ptrs = _rows(DO, stride_dob, stride_doh, stride_don, off_bh, H, rows, HEAD_DIM)
    # -- delta of each row: reads BLOCK_M * D of O and of dO
    ### BEGIN SOLUTION
    o = tl.load(o_ptrs, mask=rows[:, None] < N, other=0.0).to(tl.float32)  # (BLOCK_M, D)
    do = tl.load(do_ptrs, mask=rows[:, None] < N, other=0.0).to(tl.float32)  # (BLOCK_M, D)
    delta = tl.sum(o * do, axis=1)  # (BLOCK_M,)
    ### END SOLUTION
    tl.store(Delta + off_bh * N + rows, delta, mask=rows < N)


# %% [markdown]
# ### Checks
#
# The checks compare with float64 references, `rtol = atol = 2e-3`: four times float16's
# rounding of an output ($2^{-11}$). δ is checked on strided tensors and on positive values near
# 300, whose products overflow float16. Exercises 2 to 4 get `lse` and δ from the reference, so that
# each is checked on its own; their roundings (P and dS to float16, float32 sums) fit the
# tolerance unless an output hangs on a cancellation: where P is near 1,
# $dS = P \circ (dP - \delta)$ keeps all of the float32 error of $dP$, a few
# $2^{-24} \sum_d |dO_{id} V_{jd}|$. The two stress cases avoid that. `drawn` pulls every query to
# key 0, 30 above the other scores, with $dO$ near 2000, so that $dV$ of key 0 passes 65 504 (a
# float32 output), and $V$ near 1e-4, so that $dP$ stays near 1. `rising` gives each key a score
# 12 above the one before, 0 at the middle key (float32 computes $S - \mathrm{lse}$ to a
# fraction of $|S|$), so that the keys a causal row must not see score far above its
# log-sum-exp. The cell prints PyTorch's own errors for comparison.
#
# A failing check names the known mistake your output matches, if any.

# %%
# -- the launchers, given: each picks the grid and tiles and launches your kernels, which
# Python finds by name when it is called
DELTA_BLOCK = DEVICE.pick(gpu=128, interpreter=32)


def attention_delta(o, do, out):
    """out[b, h, i] = sum over d of o[b, h, i, d] * do[b, h, i, d], for (B, H, N, D) tensors and
    a contiguous (B, H, N) float32 `out`."""
    b, h, n, d = o.shape
    assert do.shape == o.shape and out.shape == (b, h, n), "o, do and out must match"
    assert out.is_contiguous() and o.stride(-1) == do.stride(-1) == 1, "contiguous rows"
    attn_bwd_delta_kernel[(triton.cdiv(n, DELTA_BLOCK), b * h)](
        o, do, out, *o.stride()[:3], *do.stride()[:3], h, n,
        HEAD_DIM=d, BLOCK_M=DELTA_BLOCK)
    return out


# Tile sizes (BLOCK_M, BLOCK_N, num_warps, num_stages) on a GPU, per head dim, for the dK/dV
# kernels and the dQ kernel: narrow query blocks streaming past resident key blocks, and the
# converse for dQ; each the fastest of the candidates timed on an H200 at B 4, H 32, N 4096.
# The interpreter gets small tiles with several blocks per row.
GPU_DKDV_CONFIGS = {64: (32, 64, 4, 3), 128: (64, 128, 8, 3)}
GPU_DQ_CONFIGS = {64: (128, 32, 8, 3), 128: (128, 64, 8, 3)}
INTERPRETER_DKDV_CONFIG, INTERPRETER_DQ_CONFIG = (16, 32, 4, 1), (32, 16, 4, 1)


def backward_configs(d):
    """((dK/dV), (dQ)) tile sizes for head dim d on this device."""
    if not DEVICE.is_gpu:
        return INTERPRETER_DKDV_CONFIG, INTERPRETER_DQ_CONFIG
    return GPU_DKDV_CONFIGS.get(d, (16, 64, 4, 2)), GPU_DQ_CONFIGS.get(d, (64, 16, 4, 2))


def attention_dkdv(q, k, v, do, lse, delta, out, causal=False, config=None):
    """out[0] = dK, out[1] = dV of softmax(q kᵀ / sqrt(D)) v for the output gradient `do`, from
    the forward's `lse` and `delta` ((B, H, N) float32, contiguous); with `causal`, query i sees
    the keys j <= i (the causal kernel is Exercise 3's)."""
    b, h, n, d = q.shape
    assert k.shape == v.shape == do.shape == q.shape and out.shape == (2, *q.shape), "shapes"
    assert lse.shape == delta.shape == (b, h, n) and lse.is_contiguous() and delta.is_contiguous()
    block_m, block_n, num_warps, num_stages = config or backward_configs(d)[0]
    assert block_n % block_m == 0, "BLOCK_M must divide BLOCK_N (the causal diagonal)"
    dk, dv = out[0], out[1]
    kernel = attn_bwd_dkdv_causal_kernel if causal else attn_bwd_dkdv_kernel
    kernel[(triton.cdiv(n, block_n), b * h)](
        q, k, v, do, lse, delta, dk, dv,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
        *dk.stride()[:3], *dv.stride()[:3],
        h, n, 1 / math.sqrt(d), LOG2E / math.sqrt(d),
        HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=num_warps, num_stages=num_stages,
    )
    return out


def attention_dq(q, k, v, do, lse, delta, out, causal=False, config=None):
    """out = dQ of softmax(q kᵀ / sqrt(D)) v for the output gradient `do`, from the forward's
    `lse` and `delta`; with `causal`, query i sees the keys j <= i."""
    b, h, n, d = q.shape
    assert k.shape == v.shape == do.shape == out.shape == q.shape, "q, k, v, do, out: one shape"
    assert lse.shape == delta.shape == (b, h, n) and lse.is_contiguous() and delta.is_contiguous()
    block_m, block_n, num_warps, num_stages = config or backward_configs(d)[1]
    assert block_m % block_n == 0, "BLOCK_N must divide BLOCK_M (the causal diagonal)"
    attn_bwd_dq_kernel[(triton.cdiv(n, block_m), b * h)](
        q, k, v, do, lse, delta, out,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3], *out.stride()[:3],
        h, n, 1 / math.sqrt(d), LOG2E / math.sqrt(d),
        HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal,
        num_warps=num_warps, num_stages=num_stages,
    )
    return out


GRAD_TOLERANCE = dict(rtol=2e-3, atol=2e-3)
# what a non-finite output most likely means, for each stress case
OVERFLOWS = {
    "large": "a product O * dO near 90 000 overflows float16: convert O and dO to float32 "
             "before multiplying them",
    "drawn": "dV of key 0 sums dO over every query, past float16's 65 504: keep dK, dV and the "
             "accumulator tl.dot adds into in float32",
    "rising": "exp2 of a hidden key's score, far above its row's log-sum-exp, is inf, and "
              "inf * 0 is NaN: hide a key by setting its score to -inf before the exponent, not "
              "by multiplying P by the mask afterwards",
}


def placed(t, layout):
    """t, a (B, H, N, D) tensor, as float16; with layout 'bnhd', a transposed view of a
    (B, N, H, D) tensor (strided heads and rows)."""
    if layout == "bnhd":
        return t.transpose(1, 2).contiguous().half().transpose(1, 2)
    return t.half()


def gradient_inputs(b, h, n, d, layout="bhnd", kind="plain"):
    """make_inputs(gen) -> (q, k, v, do), float16, placed by `layout`. kind: 'plain', 'drawn' or
    'rising' (see the Checks above)."""
    def make(gen):
        q, k, v, do = (checks.randn((b, h, n, d), gen=gen) for _ in range(4))
        u = checks.randn((d,), gen=gen)
        u = u / u.norm() * math.sqrt(d)  # a direction of length sqrt(D)
        if kind == "drawn":  # score of key 0 about 30, the others about 1; V near 1e-4,
            q, v, do = u + 0.1 * q, 1e-4 * v, do + 2000.0  # so that dP stays near 1
            k[:, :, 0] = 30 / math.sqrt(d) * u
        elif kind == "rising":  # score of key j about 12 (j - N // 2)
            q = u + 0.1 * q
            j = torch.arange(n, device=u.device)[:, None] - n // 2
            k = 12 / math.sqrt(d) * j * u + 0.1 * k
        return tuple(placed(t, layout) for t in (q, k, v, do))
    return make


def statistics(q, k, v, do, causal):
    """(lse, delta) of the float64 reference, as the forward and Exercise 1 give them: (B, H, N)
    float32. Made inside each graded call, from its inputs: the interpreter's TF32 emulation
    rounds a check's float32 inputs as if tl.dot read them, and these are read by no product."""
    *_, lse, delta = attention_backward_reference(*(t.double() for t in (q, k, v, do)), causal)
    return lse.float(), delta.float()


def gradients(q, k, v, do, lse, delta, visible, sizes=False):
    """(dq, dk, dv) in float64 from the given lse and delta, the kernels' formula; `visible`,
    an (N, N) bool tensor, says which key each query sees. With `sizes`, the same products of
    the absolute values: how large their terms add up to."""
    scale = 1 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-2, -1)) * scale
    p = torch.exp(s.masked_fill(~visible, -math.inf) - lse[..., None] / LOG2E)
    ds = p * (do @ v.transpose(-2, -1) - delta[..., None])
    if sizes:  # P is never negative
        ds, q, k, do = ds.abs(), q.abs(), k.abs(), do.abs()
    return (ds @ k) * scale, (ds.transpose(-2, -1) @ q) * scale, p.transpose(-2, -1) @ do


def visibility(n, causal, shift=0, device="cpu"):
    """(N, N) bool: query i sees key j when j <= i + shift (causal) or always."""
    i = torch.arange(n, device=device)
    return i[None, :] <= i[:, None] + shift if causal else torch.ones(n, n, dtype=torch.bool,
                                                                     device=device)


def mistakes(what, args, causal):
    """(the right output, [(what a known mistake gives, the hint's pattern, the output it makes,
    its cause)]) for the exercise `what` ('delta', 'dkdv' or 'dq') on float64 `args`."""
    if what == "delta":
        o, do = args
        return (o * do).sum(-1), [
            ("rowsum(dO) * rowsum(O)", "wrong-formula", do.sum(-1) * o.sum(-1),
             "delta sums the products dO[i, d] * O[i, d] over d, not the product of two sums")]
    q, k, v, do = args
    n, scale = q.shape[-2], 1 / math.sqrt(q.shape[-1])
    lse, delta = (t.double() for t in statistics(q, k, v, do, causal))
    seen = visibility(n, causal, device=q.device)
    pick = (lambda g: g[0]) if what == "dq" else (lambda g: torch.stack(g[1:]))
    dq, dk, dv = gradients(q, k, v, do, lse, delta, seen)
    found = [
        (f"the right {'dQ' if what == 'dq' else 'dK'} without sm_scale", "wrong-scale",
         pick((dq / scale, dk / scale, dv)),
         "S = sm_scale * Q Kᵀ, so dQ = sm_scale * dS K and dK = sm_scale * dSᵀ Q: multiply by "
         "sm_scale once, at the store"),
        ("the gradients with P rebuilt without its row's log-sum-exp",
         "row-normalisation" if what == "dq" else "wrong-formula",
         pick(gradients(q, k, v, do, torch.zeros_like(lse), delta, seen)),
         "P = exp2(qk * qk_scale - lse): subtract each row's lse inside the exponent"),
        ("the gradients with dS = P * dP, without delta", "wrong-formula",
         pick(gradients(q, k, v, do, lse, torch.zeros_like(delta), seen)),
         "dS = P * (dP - delta): subtract each row's delta from dP")]
    if causal:
        for shift, said, pattern in ((-1, "a mask that hides each query's own key",
                                      "causal-off-by-one"),
                                     (n, "every query seeing every key", "wrong-formula")):
            found.append((f"the gradients with {said}", pattern,
                          pick(gradients(q, k, v, do, lse, delta,
                                         visibility(n, True, shift, q.device))),
                          "query i sees the keys j <= i, its own key included"))
    return pick((dq, dk, dv)), found


def named_mistake(graded, make, what, causal):
    """The hint naming the known mistake whose output the graded call's matches, on fresh inputs
    of `make`, or None; none where the right output is as close (a right kernel's rounding)."""
    args = make(checks.generator(checks.new_seed()))
    right, want = mistakes(what, tuple(t.double() for t in args), causal)
    out = torch.full(right.shape, math.nan, device=args[0].device, dtype=torch.float32)
    try:
        graded(*args, out=out)
    except Exception:  # noqa: BLE001 - the check's own message says what went wrong
        return None
    return hints.known_mistake(out, right, want)


def check_backward(what, graded, reference, make, kernels, causal=False, kind="plain",
                   out_dtype=None):
    """checks.check of one exercise, its failure named where a known mistake explains it."""
    try:
        checks.check(graded, reference, make, kernels=kernels, out_dtype=out_dtype,
                     **GRAD_TOLERANCE)
    except checks.KernelCheckError as failure:
        hint = named_mistake(graded, make, what, causal)
        if hint is None and [h.pattern for h in failure.hints] == ["non-finite"]:
            if kind in OVERFLOWS:
                hint = hints.Hint("non-finite", failure.hints[0].evidence, OVERFLOWS[kind])
        if hint is None:
            raise
        raise checks.KernelCheckError(failure.detail, [hint]) from None


def check_delta(b, h, n, d, layout="bhnd", kind="plain"):
    def make(gen):
        o, do = (checks.randn((b, h, n, d), gen=gen) for _ in range(2))
        if kind == "large":  # products near 90 000, of one sign: a sum that cancels to a few
            o, do = 300 * o.abs(), 300 * do.abs()  # units would lose float32's digits to them
        return placed(o, layout), placed(do, layout)
    check_backward("delta", attention_delta,
                   lambda o, do: (o * do).sum(-1), make, ["attn_bwd_delta_kernel"], kind=kind,
                   out_dtype=torch.float32)


def check_gradients(what, launcher, kernel, b, h, n, d, causal, layout, kind):
    """Exercise 2's, 3's or 4's launcher (`what`: 'dkdv' or 'dq') on gradient_inputs."""
    visible = visibility(n, causal, device=DEVICE.torch_device)
    pick = (lambda g: torch.stack(g[1:])) if what == "dkdv" else (lambda g: g[0])
    check_backward(
        what,
        lambda q, k, v, do, out: launcher(q, k, v, do, *statistics(q, k, v, do, causal), out,
                                          causal=causal),
        lambda q, k, v, do: pick(gradients(q, k, v, do, *statistics(q, k, v, do, causal),
                                           visible)),
        gradient_inputs(b, h, n, d, layout, kind), [kernel], causal, kind,
        out_dtype=torch.float32 if kind == "drawn" else None)


def check_dkdv(b, h, n, d, causal=False, layout="bhnd", kind="plain"):
    kernel = "attn_bwd_dkdv_causal_kernel" if causal else "attn_bwd_dkdv_kernel"
    check_gradients("dkdv", attention_dkdv, kernel, b, h, n, d, causal, layout, kind)


def check_dq(b, h, n, d, causal=False, layout="bhnd", kind="plain"):
    check_gradients("dq", attention_dq, "attn_bwd_dq_kernel", b, h, n, d, causal, layout, kind)


q, k, v, do = (checks.randn((2, 2, 100, 32), gen=checks.generator(1), dtype=torch.float16)
               for _ in range(4))
dq, dk, dv, *_ = attention_backward_reference(*(t.double() for t in (q, k, v, do)), True)
leaves = [t.clone().requires_grad_() for t in (q, k, v)]
F.scaled_dot_product_attention(*leaves, is_causal=True).backward(do)
print("torch's scaled_dot_product_attention on float16, causal, max abs error of its gradients: "
      + ", ".join(f"{name} {(t.grad.double() - want).abs().max():.1e}"
                  for name, t, want in zip(("dQ", "dK", "dV"), leaves, (dq, dk, dv), strict=True)))

# %% nbgrader={"grade": true, "grade_id": "test-bwd-delta-visible", "points": 1}
check_delta(*CHECK_SHAPES[0])
check_delta(1, 2, 40, HEAD_DIMS[0], layout="bnhd")  # strided views
check_delta(1, 1, 40, HEAD_DIMS[0], kind="large")  # products near 90 000
print(f"visible test passed: (B, H, N, D) = {CHECK_SHAPES[0]}; strided views; products past "
      "float16's range")

# %% nbgrader={"grade": true, "grade_id": "test-bwd-delta-hidden", "points": 1}
check_delta(1, 3, 45, HEAD_DIMS[-1])  # the hidden tests follow
### BEGIN HIDDEN TESTS
for shape in CHECK_SHAPES[1:]:
    check_delta(*shape)
for n in DEVICE.pick(gpu=[1, 127, 128, 129], interpreter=[1, 32]):
    check_delta(2, 2, n, HEAD_DIMS[-1])
check_delta(2, 3, 45, HEAD_DIMS[-1], layout="bnhd", kind="large")
print("hidden tests passed: ragged lengths, head dims, strided inputs, large values")
### END HIDDEN TESTS

# %% [markdown]
# ## dK and dV: one program per key block
#
# Key $j$ collects $dV_j = \sum_i P_{ij}\,dO_i$ and $dK_j = s \sum_i dS_{ij}\,Q_i$: sums over
# the queries. So one program owns a block of `BLOCK_N` keys, keeps its `K` and `V` tiles and two
# float32 accumulators on chip, and walks the queries in blocks of `BLOCK_M`, the loop of 07
# turned around. Per query block it rebuilds the transposed tile
# $P^\top$ `(BLOCK_N, BLOCK_M)` from `k`, `q` and `lse`, adds $P^\top dO$ to `dv`, forms
# $dP^\top = V\,dO^\top$ and $dS^\top = P^\top \circ (dP^\top - \delta)$ (δ broadcast along the
# query axis, now the columns), and adds $dS^\top Q$ to `dk`. At the end it multiplies `dk` by
# $s$ once and stores both: each program writes its own rows, so no two programs touch the same
# memory.
#
# `attn_bwd_dkdv_kernel` does this for non-causal attention: the whole query blocks without a
# mask, then the ragged tail, whose rows past N load zeros and `lse = +inf`, so that their
# probabilities are 0. The launcher `attention_dkdv(..., out)`, given above, writes dK to
# `out[0]` and dV to `out[1]`.

# %% [markdown]
# ### Exercise 2 · The dK/dV loop (3 points)
#
# In `_attn_bwd_dkdv_blocks`, write the update once a query block's scores `qkT` (already masked
# where `MASKED`), `q`, `do`, `lse` and `delta` are loaded. Work out in which units `qkT` must be
# for `exp2` against `lse`, which operands `tl.dot` wants in float16 and which stays float32, and
# where δ broadcasts. The tests of this exercise are non-causal; Exercise 3 adds the causal
# kernel. If you change this cell, run Exercise 3's again. Add into an accumulator with
# `dv += tl.dot(a, b)`: gradcheck runs these kernels in float64, which Triton 3.6 refuses in
# `tl.dot(a, b, dv)`; on a GPU, Triton folds the `+=` into the product.

# %% nbgrader={"grade_id": "bwd-dkdv", "solution": true}
@triton.jit
def _attn_bwd_dkdv_blocks(
    dk, dv,  # the accumulators, (BLOCK_N, HEAD_DIM) of ACC each
    k, v,  # this program's key and value tiles, (BLOCK_N, HEAD_DIM)
    q_ptrs, do_ptrs,  # (BLOCK_M, HEAD_DIM) pointers to query/dO block 0 of this head
    lse_ptrs, delta_ptrs,  # lse and delta of query row 0 of this head
    stride_qn, stride_don,
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
    for start_m in range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        rows = start_m + offs_m  # (BLOCK_M,) query rows of this block
        # -- the block's scores, transposed, in registers: reads BLOCK_M * D of Q and of dO
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
        ### BEGIN SOLUTION
        pT = tl.math.exp2(qkT * qk_scale - lse[None, :])  # (BLOCK_N, BLOCK_M)
        # `+=`, not tl.dot's third argument: Triton 3.6 adds a float64 product (gradcheck's) only so
        dv += tl.dot(pT.to(do.dtype), do)  # (BLOCK_N, D)
        dpT = tl.dot(v, tl.trans(do))  # (BLOCK_N, BLOCK_M)
        dsT = pT * (dpT - delta[None, :])  # (BLOCK_N, BLOCK_M)
        dk += tl.dot(dsT.to(q.dtype), q)  # (BLOCK_N, D)
        ### END SOLUTION
        q_ptrs += BLOCK_M * stride_qn
        do_ptrs += BLOCK_M * stride_don
    return dk, dv


@triton.jit
def attn_bwd_dkdv_kernel(
    # pointers: (B, H, N, HEAD_DIM), the last dimension contiguous; Lse, Delta (B, H, N) float32
    Q, K, V, DO, Lse, Delta, DK, DV,
    # strides of batch, head and row
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_don,
    stride_dkb, stride_dkh, stride_dkn,
    stride_dvb, stride_dvh, stride_dvn,
    # sizes and scales
    H, N,
    sm_scale,  # 1 / sqrt(HEAD_DIM)
    qk_scale,  # sm_scale * log2(e)
    # compile-time constants
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,  # query rows per loop step; divides BLOCK_N
    BLOCK_N: tl.constexpr,  # key rows per program
):
    # -- which key block, batch and head; its K and V tiles, resident: reads BLOCK_N * D of each
    start_n = tl.program_id(0) * BLOCK_N
    off_bh = tl.program_id(1)
    cols = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key rows of this program
    offs_m = tl.arange(0, BLOCK_M)
    k_ptrs = _rows(K, stride_kb, stride_kh, stride_kn, off_bh, H, cols, HEAD_DIM)
    v_ptrs = _rows(V, stride_vb, stride_vh, stride_vn, off_bh, H, cols, HEAD_DIM)
    k = tl.load(k_ptrs, mask=cols[:, None] < N, other=0.0)  # (BLOCK_N, HEAD_DIM)
    v = tl.load(v_ptrs, mask=cols[:, None] < N, other=0.0)  # (BLOCK_N, HEAD_DIM)
    q_ptrs = _rows(Q, stride_qb, stride_qh, stride_qn, off_bh, H, offs_m, HEAD_DIM)
    do_ptrs = _rows(DO, stride_dob, stride_doh, stride_don, off_bh, H, offs_m, HEAD_DIM)
    lse_ptrs = Lse + off_bh * N
    delta_ptrs = Delta + off_bh * N
    ACC = tl.float64 if Q.dtype.element_ty == tl.float64 else tl.float32  # gradcheck's: float64
    dk = tl.zeros((BLOCK_N, HEAD_DIM), ACC)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), ACC)
    # -- whole query blocks without a mask, then the ragged tail with one
    full = (N // BLOCK_M) * BLOCK_M
    every_query = tl.zeros((BLOCK_N,), tl.int32)  # each key is seen by the queries i >= 0
    dk, dv = _attn_bwd_dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs,
                                   stride_qn, stride_don, offs_m, 0, full, N, every_query,
                                   qk_scale, BLOCK_M, False)
    dk, dv = _attn_bwd_dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs,
                                   stride_qn, stride_don, offs_m, full, N, N, every_query,
                                   qk_scale, BLOCK_M, True)
    # -- dS is the gradient of S = sm_scale * Q Kᵀ: dK carries sm_scale; writes BLOCK_N * D twice
    dk_ptrs = _rows(DK, stride_dkb, stride_dkh, stride_dkn, off_bh, H, cols, HEAD_DIM)
    dv_ptrs = _rows(DV, stride_dvb, stride_dvh, stride_dvn, off_bh, H, cols, HEAD_DIM)
    tl.store(dk_ptrs, (dk * sm_scale).to(DK.dtype.element_ty), mask=cols[:, None] < N)
    tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=cols[:, None] < N)


# %% nbgrader={"grade": true, "grade_id": "test-bwd-dkdv-visible", "points": 1}
check_dkdv(*CHECK_SHAPES[0])
check_dkdv(1, 2, 40, HEAD_DIMS[0], layout="bnhd")  # strided views
check_dkdv(1, 1, LONG_N, HEAD_DIMS[0], kind="drawn")  # dV of key 0 past 65 504
print(f"visible test passed: (B, H, N, D) = {CHECK_SHAPES[0]}, non-causal; strided views; a "
      "dV past float16's range")

# %% nbgrader={"grade": true, "grade_id": "test-bwd-dkdv-hidden", "points": 2}
check_dkdv(1, 2, 40, HEAD_DIMS[-1])  # the hidden tests follow
### BEGIN HIDDEN TESTS
for shape in CHECK_SHAPES[1:]:
    check_dkdv(*shape)
for n, d in DEVICE.pick(gpu=[(1, 64), (127, 128), (128, 64), (129, 128)],
                        interpreter=[(1, 16), (32, 32), (17, 64)]):
    check_dkdv(2, 2, n, d)
check_dkdv(1, 3, 40, HEAD_DIMS[-1], layout="bnhd")
check_dkdv(1, 2, LONG_N, HEAD_DIMS[-1], kind="drawn")
print("hidden tests passed: ragged lengths, head dims, strided inputs, large gradients")
### END HIDDEN TESTS

# %% [markdown]
# ## Causal attention, backward
#
# Query $i$ sees the keys $j \le i$, so key $j$ is seen by the queries $i \ge j$. The program
# that owns the keys `[start_n, start_n + BLOCK_N)` skips the query blocks that end before
# `start_n`, visits those that start at `start_n + BLOCK_N` or later without a mask, and masks
# per (key, query) pair only those on the diagonal. It is 07's picture transposed: a key block
# walks the queries from the diagonal on.
#
# ![The causal score matrix in blocks: each key block's program skips the query blocks above
# the diagonal, masks the diagonal ones and visits the rest without a mask; program 1 outlined,
# its loop walking down](figures/dkdv_loop.svg)
#
# *Each program keeps one key block's K and V on chip; the query blocks stream past.*
#
# ### Exercise 3 · The causal mask, backward (2 points)
#
# `attn_bwd_dkdv_causal_kernel` is set up like `attn_bwd_dkdv_kernel`, and
# `attention_dkdv(..., causal=True)` launches it. Write the calls of `_attn_bwd_dkdv_blocks` that
# cover exactly the queries that see each key of the block: where the loop starts, which blocks
# need the mask and with what `first_query` per key, and what happens to the ragged tail. Check
# your answer against the first and the last key block, a key's own query, and a key block near
# the end when N is not a multiple of `BLOCK_N`.

# %% nbgrader={"grade_id": "bwd-dkdv-causal", "solution": true}
@triton.jit
def attn_bwd_dkdv_causal_kernel(
    Q, K, V, DO, Lse, Delta, DK, DV,
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_don,
    stride_dkb, stride_dkh, stride_dkn,
    stride_dvb, stride_dvh, stride_dvn,
    H, N,
    sm_scale,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    start_n = tl.program_id(0) * BLOCK_N
    off_bh = tl.program_id(1)
    cols = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    offs_m = tl.arange(0, BLOCK_M)
    k_ptrs = _rows(K, stride_kb, stride_kh, stride_kn, off_bh, H, cols, HEAD_DIM)
    v_ptrs = _rows(V, stride_vb, stride_vh, stride_vn, off_bh, H, cols, HEAD_DIM)
    k = tl.load(k_ptrs, mask=cols[:, None] < N, other=0.0)  # (BLOCK_N, HEAD_DIM)
    v = tl.load(v_ptrs, mask=cols[:, None] < N, other=0.0)  # (BLOCK_N, HEAD_DIM)
    q_ptrs = _rows(Q, stride_qb, stride_qh, stride_qn, off_bh, H, offs_m, HEAD_DIM)
    do_ptrs = _rows(DO, stride_dob, stride_doh, stride_don, off_bh, H, offs_m, HEAD_DIM)
    lse_ptrs = Lse + off_bh * N
    delta_ptrs = Delta + off_bh * N
    ACC = tl.float64 if Q.dtype.element_ty == tl.float64 else tl.float32  # gradcheck's: float64
    dk = tl.zeros((BLOCK_N, HEAD_DIM), ACC)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), ACC)
    ### BEGIN SOLUTION
    first_query = cols  # key j is seen by the queries i >= j
    # -- the diagonal: the query blocks that overlap the key block, masked per pair
    dk, dv = _attn_bwd_dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs,
                                   stride_qn, stride_don, offs_m, start_n,
                                   tl.minimum(start_n + BLOCK_N, N), N, first_query, qk_scale,
                                   BLOCK_M, True)
    # -- the later queries see the whole key block: whole query blocks, then the ragged tail
    after = start_n + BLOCK_N
    full = tl.maximum((N // BLOCK_M) * BLOCK_M, after)
    dk, dv = _attn_bwd_dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs,
                                   stride_qn, stride_don, offs_m, after, full, N, first_query,
                                   qk_scale, BLOCK_M, False)
    dk, dv = _attn_bwd_dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs,
                                   stride_qn, stride_don, offs_m, full, N, N, first_query,
                                   qk_scale, BLOCK_M, True)
    ### END SOLUTION
    dk_ptrs = _rows(DK, stride_dkb, stride_dkh, stride_dkn, off_bh, H, cols, HEAD_DIM)
    dv_ptrs = _rows(DV, stride_dvb, stride_dvh, stride_dvn, off_bh, H, cols, HEAD_DIM)
    tl.store(dk_ptrs, (dk * sm_scale).to(DK.dtype.element_ty), mask=cols[:, None] < N)
    tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=cols[:, None] < N)


# %% nbgrader={"grade": true, "grade_id": "test-bwd-dkdv-causal-visible", "points": 1}
check_dkdv(*CHECK_SHAPES[0], causal=True)
check_dkdv(1, 2, 40, HEAD_DIMS[0], causal=True, layout="bnhd")  # strided views
check_dkdv(1, 1, LONG_N, HEAD_DIMS[0], causal=True, kind="rising")  # hidden keys score far above
print(f"visible test passed: (B, H, N, D) = {CHECK_SHAPES[0]}, causal; strided views; hidden "
      "keys that score far above their rows")

# %% nbgrader={"grade": true, "grade_id": "test-bwd-dkdv-causal-hidden", "points": 1}
check_dkdv(1, 2, 40, HEAD_DIMS[-1], causal=True)  # the hidden tests follow
### BEGIN HIDDEN TESTS
for shape in CHECK_SHAPES[1:]:
    check_dkdv(*shape, causal=True)
for n, d in DEVICE.pick(gpu=[(1, 64), (127, 128), (128, 64), (129, 128)],
                        interpreter=[(1, 16), (32, 32), (17, 64)]):
    check_dkdv(2, 2, n, d, causal=True)
check_dkdv(1, 3, 40, HEAD_DIMS[-1], causal=True, layout="bnhd")
check_dkdv(1, 2, LONG_N, HEAD_DIMS[-1], causal=True, kind="rising")
print("hidden tests passed: ragged lengths, head dims, strided inputs, large scores")
### END HIDDEN TESTS

# %% [markdown]
# ## dQ: a second kernel, or atomics
#
# $dQ_i = s \sum_j dS_{ij} K_j$ sums over the keys, but each program of the dK/dV kernel holds one
# key block. For dQ, each program would add its share into the same rows: atomic float32
# additions (`tl.atomic_add`), as FlashAttention-2's CUDA backward does (Dao 2023,
# arXiv:2307.08691). The sum's order, and so its last bits, then vary from run to run.
#
# The course uses a second kernel: one program per query block walks the key blocks like 07's
# forward, causal skipping included, and keeps dQ on chip. It recomputes $QK^\top$ and
# $dO\,V^\top$, seven products instead of five; its bits never vary. Fewer products still lost
# on an H200 (float16, N 4096, D 128, Triton 3.6, 2026-11-30): one kernel with atomics took
# 8.1 ms, these two 7.8 ms.
#
# ![The causal score matrix in blocks: each query block's program visits the key blocks before
# it without a mask and its diagonal ones with the mask, and skips the rest; one query block
# outlined, its loop walking across](figures/dq_loop.svg)
#
# *The dK/dV loop turned around: key blocks stream past a resident query tile.*
#
# ### Exercise 4 · The dQ kernel (5 points)
#
# In `_attn_bwd_dq_blocks`, write what follows the loads of a key block: its scores and $dP$, the
# mask where `MASKED` (query row `r` sees the keys `j < key_limit[r]`), $P$, $dS$, and the
# addition to `dq`. `attn_bwd_dq_kernel` (given) calls it as 07's forward calls its loop, causal
# or not, and multiplies `dq` by `sm_scale` at the store.

# %% nbgrader={"grade_id": "bwd-dq", "solution": true}
@triton.jit
def _attn_bwd_dq_blocks(
    dq,  # the accumulator, (BLOCK_M, HEAD_DIM) of ACC
    q, do,  # this program's query and dO tiles, (BLOCK_M, HEAD_DIM)
    lse, delta,  # (BLOCK_M,) their rows' statistics
    k_ptrs, v_ptrs,  # (BLOCK_N, HEAD_DIM) pointers to key/value block 0 of this head
    stride_kn, stride_vn,
    offs_n,  # (BLOCK_N,) 0..BLOCK_N-1
    lo, hi,  # the key rows this call covers: [lo, hi), lo a multiple of BLOCK_N
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
        cols = start_n + offs_n  # (BLOCK_N,) key rows of this block
        # -- reads BLOCK_N * D of K and of V
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[:, None] < N, other=0.0)  # (BLOCK_N, D)
            v = tl.load(v_ptrs, mask=cols[:, None] < N, other=0.0)  # (BLOCK_N, D)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        # -- scores and dP, the mask, P rebuilt, dS = P (dP - delta), dQ += dS K
        ### BEGIN SOLUTION
        qk = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N)
        dp = tl.dot(do, tl.trans(v))  # (BLOCK_M, BLOCK_N)
        if MASKED:
            qk = tl.where(cols[None, :] < key_limit[:, None], qk, float("-inf"))
        p = tl.math.exp2(qk * qk_scale - lse[:, None])  # (BLOCK_M, BLOCK_N)
        ds = p * (dp - delta[:, None])  # (BLOCK_M, BLOCK_N)
        dq += tl.dot(ds.to(k.dtype), k)  # (BLOCK_M, D), `+=` as in dK/dV
        ### END SOLUTION
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return dq


@triton.jit
def attn_bwd_dq_kernel(
    Q, K, V, DO, Lse, Delta, DQ,  # as attn_bwd_dkdv_kernel's; DQ (B, H, N, HEAD_DIM) written
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_don,
    stride_dqb, stride_dqh, stride_dqn,
    H, N,
    sm_scale,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,  # query rows per program
    BLOCK_N: tl.constexpr,  # key rows per loop step; divides BLOCK_M
    CAUSAL: tl.constexpr,
):
    # -- which query tile (causal: the last first), batch and head; its resident tiles and
    # statistics: reads BLOCK_M * D of Q and of dO, BLOCK_M of lse and of delta
    start_m = tl.program_id(0)
    if CAUSAL:
        start_m = tl.num_programs(0) - 1 - start_m
    off_bh = tl.program_id(1)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(_rows(Q, stride_qb, stride_qh, stride_qn, off_bh, H, rows, HEAD_DIM),
                mask=rows[:, None] < N, other=0.0)  # (BLOCK_M, HEAD_DIM)
    do = tl.load(_rows(DO, stride_dob, stride_doh, stride_don, off_bh, H, rows, HEAD_DIM),
                 mask=rows[:, None] < N, other=0.0)  # (BLOCK_M, HEAD_DIM)
    lse = tl.load(Lse + off_bh * N + rows, mask=rows < N, other=float("inf"))  # P = 0 past N
    delta = tl.load(Delta + off_bh * N + rows, mask=rows < N, other=0.0)
    k_ptrs = _rows(K, stride_kb, stride_kh, stride_kn, off_bh, H, offs_n, HEAD_DIM)
    v_ptrs = _rows(V, stride_vb, stride_vh, stride_vn, off_bh, H, offs_n, HEAD_DIM)
    ACC = tl.float64 if Q.dtype.element_ty == tl.float64 else tl.float32  # gradcheck's: float64
    dq = tl.zeros((BLOCK_M, HEAD_DIM), ACC)
    if CAUSAL:  # the key blocks before the tile, then the diagonal ones, masked; none after
        first_row = start_m * BLOCK_M
        seen = rows + 1  # row i sees the keys j < i + 1
        dq = _attn_bwd_dq_blocks(dq, q, do, lse, delta, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                 offs_n, 0, first_row, N, seen, qk_scale, BLOCK_N, False)
        dq = _attn_bwd_dq_blocks(dq, q, do, lse, delta, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                 offs_n, first_row, tl.minimum(first_row + BLOCK_M, N), N, seen,
                                 qk_scale, BLOCK_N, True)
    else:  # whole key blocks, then the ragged tail
        full = (N // BLOCK_N) * BLOCK_N
        every_key = tl.zeros((BLOCK_M,), tl.int32) + N
        dq = _attn_bwd_dq_blocks(dq, q, do, lse, delta, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                 offs_n, 0, full, N, every_key, qk_scale, BLOCK_N, False)
        dq = _attn_bwd_dq_blocks(dq, q, do, lse, delta, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                 offs_n, full, N, N, every_key, qk_scale, BLOCK_N, True)
    # -- dQ carries sm_scale, as dK does: writes BLOCK_M * D
    dq_ptrs = _rows(DQ, stride_dqb, stride_dqh, stride_dqn, off_bh, H, rows, HEAD_DIM)
    tl.store(dq_ptrs, (dq * sm_scale).to(DQ.dtype.element_ty), mask=rows[:, None] < N)


# %% nbgrader={"grade": true, "grade_id": "test-bwd-dq-visible", "points": 1}
check_dq(*CHECK_SHAPES[0])
check_dq(*CHECK_SHAPES[0], causal=True)
check_dq(1, 2, 40, HEAD_DIMS[0], causal=True, layout="bnhd")  # strided views
check_dq(1, 1, LONG_N, HEAD_DIMS[0], causal=True, kind="rising")  # hidden keys score far above
print(f"visible test passed: (B, H, N, D) = {CHECK_SHAPES[0]}, causal and not; strided views; "
      "hidden keys that score far above their rows")

# %% nbgrader={"grade": true, "grade_id": "test-bwd-dq-hidden", "points": 2}
check_dq(1, 2, 40, HEAD_DIMS[-1], causal=True)  # the hidden tests follow
### BEGIN HIDDEN TESTS
for shape in CHECK_SHAPES[1:]:
    for causal in (False, True):
        check_dq(*shape, causal=causal)
for n, d in DEVICE.pick(gpu=[(1, 64), (127, 128), (128, 64), (129, 128)],
                        interpreter=[(1, 16), (32, 32), (17, 64)]):
    for causal in (False, True):
        check_dq(2, 2, n, d, causal=causal)
check_dq(1, 3, 40, HEAD_DIMS[-1], layout="bnhd")
check_dq(1, 2, LONG_N, HEAD_DIMS[-1], causal=True, kind="rising")
print("hidden tests passed: ragged lengths, head dims, strided inputs, large scores")
### END HIDDEN TESTS

# %% [markdown]
# ## One `torch.autograd.Function`
#
# With the three kernels, attention becomes a differentiable PyTorch operation: `forward` runs
# 07's kernel and keeps `Q`, `K`, `V`, `O` and `lse` (not `P`), `backward` runs δ, dK/dV and dQ.
# The next cell checks it twice. `torch.autograd.gradcheck` compares its backward with finite
# differences of its forward in float64, which the interpreter computes as NumPy does (the
# kernels accumulate in float64 there, through `ACC`); it checks the Jacobian along random
# directions (`fast_mode`), which a wrong gradient fails all but surely. Then, in float16, its
# gradients and those of SDPA against float64 autograd of eager attention.

# %%
def attention_gradients(q, k, v, o, do, lse, out, causal=False, delta=None):
    """out[0], out[1], out[2] = dQ, dK, dV: delta, then your dK/dV and dQ kernels; `delta`, a
    (B, H, N) float32 scratch tensor, is made if not given."""
    if delta is None:
        delta = torch.empty(lse.shape, device=q.device, dtype=torch.float32)
    attention_delta(o, do, delta)
    attention_dkdv(q, k, v, do, lse, delta, out[1:], causal)
    attention_dq(q, k, v, do, lse, delta, out[0], causal)
    return out


class FlashAttention(torch.autograd.Function):
    """softmax(q kᵀ / sqrt(D)) v: 07's forward kernel, your backward kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal):
        out, lse = attention_forward(q, k, v, causal)
        ctx.save_for_backward(q, k, v, out, lse)  # N numbers per head kept, not N x N
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        do = do if do.stride(-1) == 1 else do.contiguous()
        grads = torch.empty((3, *q.shape), device=q.device, dtype=q.dtype)
        attention_gradients(q, k, v, out, do, lse, grads, ctx.causal)
        return grads[0], grads[1], grads[2], None


def flash_attention(q, k, v, causal=False):
    return FlashAttention.apply(q, k, v, causal)


# %%
if not DEVICE.is_gpu:  # float64 throughout, as the interpreter computes it
    for causal in (False, True):
        leaves = tuple(torch.randn(1, 2, 20, 16, dtype=torch.float64, requires_grad=True)
                       for _ in range(3))
        torch.autograd.gradcheck(lambda q, k, v, c=causal: flash_attention(q, k, v, c), leaves,
                                 fast_mode=True)
        print(f"gradcheck in float64, causal={causal}: passed")
q, k, v, do = (checks.randn((2, 3, DEVICE.pick(gpu=1000, interpreter=64), HEAD_DIMS[1]),
                            gen=checks.generator(2), dtype=torch.float16) for _ in range(4))
for causal in (False, True):
    want = attention_backward_reference(*(t.double() for t in (q, k, v, do)), causal)[:3]
    for name, fn in (("yours", flash_attention),
                     ("SDPA", lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v,
                                                                                 is_causal=c))):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        fn(*leaves, causal).backward(do)
        print(f"causal={causal}, {name:5s} in float16, max abs error: " + ", ".join(
            f"{g} {(t.grad.double() - w).abs().max():.1e}"
            for g, t, w in zip(("dQ", "dK", "dV"), leaves, want, strict=True)))

# %% [markdown]
# ## A training run
#
# The real test of a backward pass is training. The model below has one causal attention layer:
# token and position embeddings, a projection to `Q`, `K`, `V` of `H` heads, attention, and a
# linear readout. Its task, to name the previous token, attention solves by looking one position
# back. Copies start from the same weights and see the same batches: one attends with
# `flash_attention`, one with SDPA, and a third, the control, with SDPA in float32. Attention
# runs in float16 (the control rounds only its output) and the rest in float32, with Adam. On a
# GPU they take `TRAIN_STEPS` = 300 steps, in the interpreter 4.
#
# Will the curves lie on top of each other? Only at first. Each run rounds differently, and
# training amplifies any difference: where the loss falls steeply or spikes, a step a little
# different sends the weights elsewhere. So a gap alone proves nothing either way. The yardstick
# is the gap between two correct runs, SDPA and its float32 control: a backward no further from
# SDPA than that differs in rounding, not in a bug. (The gradient checks above are the proof;
# this run shows that the kernels train.)

# %%
class OneLayer(torch.nn.Module):
    """Embeddings, one causal attention layer of `heads` heads of `dim`, a linear readout."""

    def __init__(self, vocab, n, heads, dim, attention):
        super().__init__()
        self.heads, self.dim, self.attention = heads, dim, attention
        self.embed = torch.nn.Embedding(vocab, heads * dim)
        self.position = torch.nn.Parameter(0.1 * torch.randn(n, heads * dim))
        self.qkv = torch.nn.Linear(heads * dim, 3 * heads * dim)
        self.readout = torch.nn.Linear(heads * dim, vocab)

    def forward(self, tokens):
        b, n = tokens.shape
        x = self.embed(tokens) + self.position[:n]
        qkv = self.qkv(x).view(b, n, 3, self.heads, self.dim).permute(2, 0, 3, 1, 4).half()
        y = self.attention(qkv[0], qkv[1], qkv[2]).float()  # (B, H, N, D)
        return self.readout(y.transpose(1, 2).reshape(b, n, -1))


def train(attention, steps, b, n, heads, dim, vocab=32):
    """The losses of `steps` Adam steps of OneLayer with `attention`, from fixed weights and
    batches."""
    torch.manual_seed(0)
    model = OneLayer(vocab, n, heads, dim, attention).to(DEVICE.torch_device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    batches = torch.Generator(DEVICE.torch_device).manual_seed(1)
    losses = []
    for _ in range(steps):
        tokens = torch.randint(0, vocab, (b, n), generator=batches, device=DEVICE.torch_device)
        logits = model(tokens)[:, 1:]  # position i names token i - 1
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, :-1].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def sdpa_float32(q, k, v):
    """The control: SDPA on float32 copies, its output rounded to float16."""
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True).half()


def largest_gap(a, b):
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def compare_training(steps, b, n, heads, dim):
    curves = {
        "yours": train(lambda q, k, v: flash_attention(q, k, v, causal=True),
                       steps, b, n, heads, dim),
        "SDPA": train(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                      steps, b, n, heads, dim),
        "SDPA in float32 (control)": train(sdpa_float32, steps, b, n, heads, dim)}
    yours, sdpa, control = curves.values()
    print(f"{steps} steps, B={b}, N={n}, H={heads}, D={dim}: loss {yours[0]:.3f} -> "
          f"{yours[-1]:.3f} (yours), {sdpa[-1]:.3f} (SDPA), {control[-1]:.3f} (control)")
    print(f"largest difference between curves: yours and SDPA {largest_gap(yours, sdpa):.1e}; "
          f"SDPA and its control {largest_gap(sdpa, control):.1e}")
    plots.curves(list(range(1, steps + 1)), curves, xlabel="step", ylabel="cross-entropy",
                 title=f"One attention layer, previous-token task, {DEVICE.name}")


if DEVICE.is_gpu and RUN_BENCHMARKS:
    with recorded.cell("10_flash_backward/training"):
        compare_training(TRAIN_STEPS, b=16, n=256, heads=4, dim=64)
else:
    compare_training(TRAIN_STEPS, b=2, n=16, heads=2, dim=16)
    if not DEVICE.is_gpu:
        print("\nA few hundred steps on a GPU:")
        recorded.show("10_flash_backward/training")

# %% [markdown]
# ### Speed (2 points, graded on a GPU)
#
# At `(B, H, N) = (4, 16, 4096)` in float16, your backward (δ, dK/dV and dQ: three launches) must
# be at least as fast as SDPA's FlashAttention-2 backward at D = 64 and 128, causal and not,
# timed in the same run; full points only if all four comparisons pass. SDPA's backward is timed
# through `torch.autograd.grad` on the graph of one forward. Yours starts from `O` and `lse` of
# 07's forward. Before every timed call `Q`, `K`, `V` and `dO` are drawn afresh, so `O` and `lse`
# then belong to other inputs; that changes nothing in the work, and the output is checked
# against the same formula in float32, a few heads at a time, each element given the room that
# rounding P and dS to float16 may take. Only your three kernels may run in
# the timed calls. FLOPs are counted as $10BHN^2D$ (half for causal), although your two kernels
# compute 14: the work the gradients need, not the work a design chooses to do.

# %%
SPEED_NEEDS = 1.0  # times the speed of SDPA flash's backward, in every case


def backward_formula(q, k, v, o, do, lse, causal):
    """(3, B, H, N, D) float32 twice: dQ, dK, dV as the kernels compute them from these o and
    lse, and what rounding each P and dS to float16 before its product may move them by (one
    rounding, 2^-11, of every term), a few heads at a time."""
    b, h, n, d = q.shape
    out, slack = (torch.empty((3, b * h, n, d), device=q.device) for _ in "os")
    flat = [t.reshape(b * h, *t.shape[2:]) for t in (q, k, v, o, do, lse)]
    visible = visibility(n, causal, device=q.device)
    chunk = max(1, (1 << 26) // (n * n))  # 256 MiB of float32 scores at a time
    for i in range(0, b * h, chunk):
        qc, kc, vc, oc, doc, lsec = (t[i:i + chunk].float() for t in flat)
        delta = (doc * oc).sum(-1)
        out[:, i:i + chunk] = torch.stack(gradients(qc, kc, vc, doc, lsec, delta, visible))
        terms = gradients(qc, kc, vc, doc, lsec, delta, visible, sizes=True)
        slack[:, i:i + chunk] = torch.stack(terms) * 2.0**-11
    return out.view(3, b, h, n, d), slack.view(3, b, h, n, d)


def within_rounding(got, want, slack, name, **context):
    """checks.compare of got with want, each element taken as right within its `slack` (what
    rounding P and dS to float16 may move it): kernels that round them and kernels that do not
    both pass, a result for other inputs does not."""
    nearest = want + (got.float() - want).clamp(-slack, slack)
    checks.compare(got, nearest, name=name, **GRAD_TOLERANCE, **context)


def matches_formula(grads, q, k, v, o, do, lse, causal, **context):
    """within_rounding of dQ, dK and dV, `grads`, and backward_formula's."""
    within_rounding(grads, *backward_formula(q, k, v, o, do, lse, causal), "dQ, dK, dV",
                    **context)


def speed_case(d, causal):
    """Your backward at SPEED_BHN and head dim d against SDPA flash's backward."""
    b, h, n = SPEED_BHN
    q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(4))
    o, lse = attention_forward(q, k, v, causal)
    delta = torch.empty_like(lse)
    grads = torch.empty((3, b, h, n, d), device="cuda", dtype=torch.float16)

    def verify():  # against the inputs as they are now: they change before every timed call
        matches_formula(grads, q, k, v, o, do, lse, causal)

    flash = backward_of(sdpa_backend(SDPBackend.FLASH_ATTENTION), q, k, v, do, causal)
    dkdv = "attn_bwd_dkdv_causal_kernel" if causal else "attn_bwd_dkdv_kernel"
    return perf.Case(lambda: attention_gradients(q, k, v, o, do, lse, grads, causal, delta=delta),
                     kernels=["attn_bwd_delta_kernel", dkdv, "attn_bwd_dq_kernel"],
                     inputs=(q, k, v, do), out=grads, verify=verify,
                     baselines=[perf.Baseline("SDPA flash backward", flash, at_least=SPEED_NEEDS)],
                     name=f"D={d}, {'causal' if causal else 'non-causal'}",
                     flops=backward_flops(b, h, n, d, causal), dtype=torch.float16)


def speed_cases(points):
    """Score of the speed cell: `points` if every comparison passes."""
    if not DEVICE.grades_speed:
        return perf.not_graded_here(points)
    return perf.grade(*(speed_case(d, causal) for d in (64, 128) for causal in (False, True)),
                      points=points)


# %% nbgrader={"grade": true, "grade_id": "speed-flash-backward", "points": 2}
speed_cases(points=2)

# %% [markdown]
# ## How it compares
#
# On a GPU the cell times four backward passes at `(B, H, N) = SPEED_BHN`, float16, D = 64 and
# 128, causal and not: eager attention's (P stored), SDPA's FlashAttention-2 and cuDNN backends,
# and yours (δ, dK/dV and dQ), and gives each in TFLOP/s of the $10BHN^2D$ (half for causal)
# FLOPs the gradients need. A backend that cannot run here is reported and left out.
#
# Then it profiles one backward of eager attention and one of yours at `B = 1, H = 8, N = 2048,
# D = 64` (Nsight Compute, in a process apart, caches flushed before each kernel): the DRAM bytes
# each kernel reads and writes, to set against the 7 N² elements per head counted at the top of
# the notebook, and its memory and compute throughput as shares of their peaks (for memory, the
# busiest of DRAM, L2 and shared memory). An elementwise step of the eager backward streams
# N × N tensors through DRAM near the peak: it is memory bound. Your kernels read each input
# once from DRAM; their memory share is traffic on chip, tiles moving through shared memory.
# Outputs still in L2 when a kernel ends count as no DRAM writes.

# %%
def compare_backward(b, h, n, d, causal):
    """(name, seconds) of each backward at one shape."""
    q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(4))
    o, lse = attention_forward(q, k, v, causal)
    grads = torch.empty((3, b, h, n, d), device="cuda", dtype=torch.float16)
    ways = {"yours": lambda: attention_gradients(q, k, v, o, do, lse, grads, causal)}
    for name, backend in (("SDPA flash", SDPBackend.FLASH_ATTENTION),
                          ("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION)):
        try:
            ways[name] = backward_of(sdpa_backend(backend), q, k, v, do, causal)
        except RuntimeError as exc:  # a backend that cannot run this shape or device
            print(f"{name} is not available here: {str(exc).splitlines()[0][:120]}")
    ways["eager (P stored)"] = backward_of(eager_attention, q, k, v, do, causal)
    return [(name, timing.bench(fn).median_ms * 1e-3) for name, fn in ways.items()]


if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("10_flash_backward/compare"):
        b, h, n = SPEED_BHN
        for d in (64, 128):
            for causal in (False, True):
                flops = backward_flops(b, h, n, d, causal)
                for name, seconds in compare_backward(b, h, n, d, causal):
                    label = f"{name}, D={d}{', causal' if causal else ''}"
                    print(f"{label:36s} {seconds * 1e3:8.3f} ms  {flops / seconds / 1e12:6.1f} "
                          "TFLOP/s")
                    if name == "yours":
                        results.record("10_flash_backward", f"backward D={d} causal={causal}",
                                       flops=flops, bytes_moved=(7 * n * d * 2 + 8 * n) * b * h,
                                       seconds=seconds, precision="fp16")
else:
    print("On a GPU this cell times eager, SDPA flash, SDPA cuDNN and your backward passes.")
    recorded.show("10_flash_backward/compare")


def backward_problem(way, n=2048, d=64):
    """What profile.each calls in the profiled process: one backward at (1, 8, n, d), float16,
    eager's (`way` "eager") or yours."""
    q, k, v, do = (torch.randn(1, 8, n, d, device="cuda", dtype=torch.float16) for _ in range(4))
    if way == "eager":
        return backward_of(eager_attention, q, k, v, do)
    o, lse = attention_forward(q, k, v, False)
    grads = torch.empty((3, 1, 8, n, d), device="cuda", dtype=torch.float16)
    return lambda: attention_gradients(q, k, v, o, do, lse, grads, False)


NOT_PROFILED = profile.unavailable() or (None if RUN_BENCHMARKS else "RUN_BENCHMARKS is off")
if NOT_PROFILED is None:
    with recorded.cell("10_flash_backward/profile"):
        ours = ["attn_bwd_delta_kernel", "attn_bwd_dkdv_kernel", "attn_bwd_dq_kernel"]
        profile.compare(profile.each({
            "eager (P stored)": profile.Call(backward_problem, [], {"way": "eager"}),
            "yours": profile.Call(backward_problem, ours, {"way": "yours"})}),
            columns=("duration", "dram_read", "dram_written", "memory", "compute"))
        print(f"7 N² elements per head, 8 heads, float16: {8 * 7 * 2048**2 * 2 / 1e6:.0f} MB")
else:
    print(f"Not profiled here: {NOT_PROFILED}. Profiled on a GPU:")
    recorded.show("10_flash_backward/profile")

# %% [markdown]
# ## Summary
#
# - The backward of attention is four products and one elementwise step: $dV = P^\top dO$,
#   $dP = dO\,V^\top$, $dS = P \circ (dP - \delta)$, $dQ = s\,dS\,K$, $dK = s\,dS^\top Q$.
#   Written eagerly it keeps `P` from the forward, N × N per head, and reads and writes N × N
#   tensors several times.
# - The forward stores one log-sum-exp per row instead, which rebuilds any tile of `P` with one
#   `exp2`; $\delta = \mathrm{rowsum}(dO \circ O)$ needs no `P` at all.
# - dK and dV come from one program per key block walking the query blocks; dQ from a second
#   kernel, one program per query block walking the key blocks. Two kernels recompute some
#   products and need no atomics; one kernel with atomic dQ additions does less work and loses
#   determinism.
# - Causal attention skips the query blocks before a key block (and the key blocks after a query
#   tile) and masks the scores on the diagonal, to `-inf`, before the exponent.
# - Wrapped in a `torch.autograd.Function`, the kernels pass `gradcheck` and train a model as
#   SDPA does.

# %% [markdown]
# ## Further exercises
#
# 1. Write the one-kernel form: each program of the dK/dV kernel adds its share of dQ with
#    `tl.atomic_add` into a float32 buffer. Time it against the two kernels; run it twice and
#    compare the bits of dQ.
# 2. Fuse δ into the dQ kernel: each query tile can compute its own rows of δ before its loop.
#    What does the dK/dV kernel then lack?
# 3. On a GPU, time `attention_dkdv` and `attention_dq` with other `config`s (tile sizes, warps,
#    stages) at D = 64 and 128. Which tiles win for each kernel, and why are they shaped so
#    differently?
# 4. Add dropout to the forward and the backward: what must the backward know to rebuild the same
#    mask without storing it?
# 5. On a Hopper GPU, write the dK/dV loop as `tl.range(lo, hi, BLOCK_M, warp_specialize=True)`
#    and time it. Then profile cuDNN's backward beside yours in Nsight Compute (threads a program,
#    registers a thread, programs per SM). What would your kernel have to become to work as
#    cuDNN's does?
