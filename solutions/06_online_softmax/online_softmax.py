# %% [markdown]
# # 06 · Online softmax
#
# *Reading time: about 9 minutes.*
#
# A safe softmax subtracts the row's maximum before exponentiating, then divides by the sum: three
# trips through the row. In 03 the row fitted in one program's registers and the trips were free.
# Here it does not (tens of thousands of columns, or in attention a row of scores never stored), and
# every trip reads memory. The *online* softmax keeps a running maximum and sum, corrected as the
# maximum grows, so one trip gives both. Its merge rule is associative, which lets FlashAttention
# (07) work block by block and lets programs share a row.
#
# **You will learn:** why safe softmax needs the maximum before the sum; the running pair (m, d) and
# its rescaling; the merge of two partial states and why it is associative; `-inf` and huge values
# without NaN; a long-row Triton softmax that streams columns; and how many bytes each formulation
# moves, against the copy bandwidth.

# %%
from grader.runtime import device

DEVICE = device.setup()

import math

import torch
import triton
import triton.language as tl
from IPython.display import display
from tqdm.auto import tqdm

from grader.runtime import checks, hints, integrity, perf, plots, profile, recorded, results, timing
from grader.runtime.widgets import online_softmax as walk

print(f"Kernels run on {DEVICE.describe()}; tensors live on '{DEVICE.torch_device}'.")

# %% tags=["parameters"]
# You may change these while you work; grading restores this cell as released.
# Row lengths for the kernel's checks: tens of thousands of columns on a GPU, a few hundred in the
# interpreter (where every program runs as Python) with a small block, so the same loop runs.
ROW_LENGTHS = DEVICE.pick(gpu=[32_768, 65_536, 131_072], interpreter=[257, 1000, 2049])
ROWS = DEVICE.pick(gpu=64, interpreter=3)  # rows per correctness check
BLOCK = DEVICE.pick(gpu=4096, interpreter=128)  # columns per iteration of the kernels' loops
NUM_WARPS = 8
CHUNK = 128  # columns per chunk in the PyTorch exercise
SPEED_SHAPE = (1024, 65_536)  # rows, columns: 256 MiB of float32
BENCH_BYTES = 1 << 28  # each row length in the sweep gets 256 MiB of float32 rows
RUN_BENCHMARKS = True

# %% [markdown]
# ## Why the maximum comes first
#
# $\mathrm{softmax}(x)_i = e^{x_i} / \sum_j e^{x_j}$ overflows as soon as one $x_j$ passes
# $\ln(\text{largest float})$. Since $e^{x_i} / \sum_j e^{x_j} = e^{x_i - m} / \sum_j e^{x_j - m}$
# for any $m$, taking $m = \max_j x_j$ makes every exponent at most 0 and the largest term exactly
# 1, so the sum is at least 1. But the maximum must be known before the first exponential. The cell
# prints the overflow thresholds and what each formulation makes of a row near $10^4$, a magnitude
# unscaled attention scores can reach.

# %%
for dtype in (torch.float32, torch.float16):
    print(f"{str(dtype)[6:]:8s}: largest value {torch.finfo(dtype).max:.5g}, so exp overflows "
          f"above x = {math.log(torch.finfo(dtype).max):.2f}")

x_big = torch.tensor([1.0e4, 1.0e4 - 1.0, 9.0e3, -1.0e4])
naive = torch.exp(x_big) / torch.exp(x_big).sum()
safe = torch.exp(x_big - x_big.max()) / torch.exp(x_big - x_big.max()).sum()
print("row:            ", x_big.tolist())
print("naive softmax:  ", naive.tolist())
print("safe softmax:   ", safe.tolist())
print("torch.softmax:  ", torch.softmax(x_big, 0).tolist())

# %% [markdown]
# ## The three-pass reference and what it costs
#
# Streaming over a row it cannot hold, a softmax reads it for the maximum, again for the sum of
# exponentials, and once more to normalise and write: for `n` elements of `b` bytes, $3nb$ read and
# $nb$ written, 4 times the row. The least is once in and once out, $2nb$, reached only when the
# row fits on chip (03). The PyTorch reference below makes the three passes chunk by chunk, to show
# them.

# %%
def softmax_three_pass(x, chunk=CHUNK):
    """Row softmax of a 2-D tensor in three streaming passes: reads 3 x.numel(), writes 1."""
    rows, n = x.shape
    m = torch.full((rows, 1), -math.inf, dtype=torch.float64)
    for s in range(0, n, chunk):  # pass 1: the maximum
        m = torch.maximum(m, x[:, s:s + chunk].double().amax(dim=1, keepdim=True))
    d = torch.zeros((rows, 1), dtype=torch.float64)
    for s in range(0, n, chunk):  # pass 2: the sum of exponentials
        d += torch.exp(x[:, s:s + chunk].double() - m).sum(dim=1, keepdim=True)
    out = torch.empty(x.shape, dtype=torch.float64)
    for s in range(0, n, chunk):  # pass 3: normalise
        out[:, s:s + chunk] = torch.exp(x[:, s:s + chunk].double() - m) / d
    return out


x_demo = torch.randn(4, 1000)
print("three passes vs torch.softmax, max abs difference:",
      f"{(softmax_three_pass(x_demo) - torch.softmax(x_demo.double(), 1)).abs().max():.2e}")

# %% [markdown]
# ## One pass for both statistics: the running pair (m, d)
#
# Read the row in chunks, keeping the largest value so far, $m$, and the sum of $e^{x_j - m}$ so
# far, $d$ (FlashAttention calls it $\ell$). When chunk $C$'s maximum passes $m$, the terms in $d$
# must move to the new maximum:
#
# $$m' = \max(m, \max_{j \in C} x_j), \qquad d' = d \cdot e^{m - m'} + \sum_{j \in C} e^{x_j - m'}.$$
#
# The factor $\alpha = e^{m - m'}$ is 1 when the maximum stays, below 1 when it grows. One read
# gives both statistics; a second pass normalises. This is the *online normaliser* of Milakov and
# Gimelshein (2018, arXiv:1805.02867).
#
# **Merging two states.** A part $A$ of a row has the state $(m_A, d_A)$, $m_A = \max A$,
# $d_A = \sum_{x \in A} e^{x - m_A}$. Disjoint parts combine into their union's state:
#
# $$\mathrm{merge} = \big(m,\; d_A e^{m_A - m} + d_B e^{m_B - m}\big), \quad m = \max(m_A, m_B).$$
#
# It holds because $\sum_{A \cup B} e^{x - m} = e^{m_A - m}\sum_A e^{x - m_A} + e^{m_B - m}\sum_B e^{x - m_B}$.
# Since merging gives the union's state and union is associative and commutative, so is the merge
# (in exact arithmetic), with the empty part's $(-\infty, 0)$ as identity. Any grouping works:
# chunk after chunk, one state per lane merged at the end, or one per program.
#
# ![two states rescaled by exp(m_i - m) and added](figures/merge.svg)
#
# *Merging two states: move each $d$ to the common maximum, then add.*

# %% [markdown]
# **The trap at $-\infty$.** A chunk of nothing but $-\infty$ (masked positions, padding past a
# row's end) has $m = -\infty$. Merging two such states computes $e^{-\infty - (-\infty)}$, NaN in
# floating point, and the NaN spreads to everything after it. The empty side contributes nothing,
# so its factor must be 0.
#
# ### Exercise 1 · merge two states (3 points)
#
# Write `merge(m1, d1, m2, d2)` for tensors of states (elementwise, any shape, float32 or float64),
# returning `(m, d)` of the union. No NaN when one or both maxima are $-\infty$: relative to what
# can you take the exponents so the empty side's factor comes out 0? No overflow when the maxima
# are far apart (say $10^4$ and $-10^4$). `torch.where` and `torch.maximum` work elementwise.

# %% nbgrader={"grade_id": "merge", "solution": true}
def merge(m1, d1, m2, d2):
    """The state (m, d) of the union of two parts with states (m1, d1) and (m2, d2)."""
    ### BEGIN SOLUTION
    m = torch.maximum(m1, m2)
    m_safe = torch.where(m == -math.inf, torch.zeros_like(m), m)  # empty union: no NaN
    d = d1 * torch.exp(m1 - m_safe) + d2 * torch.exp(m2 - m_safe)
    return m, d
    ### END SOLUTION


# %% [markdown]
# The checks build real chunks of numbers, compute each chunk's state in float64, call your `merge`
# on the two states (in float32 unless said otherwise), and compare with the state of both chunks
# computed from scratch. The hidden tests add the adversarial cases: maxima of $-\infty$ on one
# side and on both, equal maxima, and maxima $2 \times 10^4$ apart.

# %%
def state_of(x):
    """(m, d) of each row of x, in float64; an all -inf row has the empty state (-inf, 0)."""
    x = x.double()
    m = x.amax(dim=-1)
    m_safe = torch.where(m == -math.inf, torch.zeros_like(m), m)
    return m, torch.exp(x - m_safe[..., None]).sum(dim=-1)


def check_merge(a, b, dtype=torch.float32):
    """merge(S(a), S(b)) must equal S(a and b together), row by row."""
    m1, d1 = state_of(a)
    m2, d2 = state_of(b)
    args = [t.to(dtype) for t in (m1, d1, m2, d2)]
    saved = [t.clone() for t in args]
    m, d = checks.call_graded(merge, *args, what="`merge`")
    assert all(torch.equal(s.nan_to_num(), t.nan_to_num()) for s, t in zip(saved, args, strict=True)), \
        "merge must not modify its inputs"
    want_m, want_d = state_of(torch.cat([a, b], dim=-1))
    context = f"{len(a)} pairs of chunks, {str(dtype)[6:]}"
    checks.compare(m, want_m, name="m", context=context)
    checks.compare(d, want_d, name="d", context=context,
                   hint=hints.unrescaled_merge(d, m, [(m1, d1), (m2, d2)]))


def chunks(gen, rows, width, scale=1.0, shift=0.0):
    """Random chunks drawn from `gen` (a CPU generator), whose values float32 holds exactly, so
    states convert without rounding m."""
    x = torch.randn(rows, width, generator=gen, dtype=torch.float64)
    return (x * scale + shift).float().double()


# %% nbgrader={"grade": true, "grade_id": "test-merge-visible", "points": 1}
gen = checks.generator(checks.new_seed(), where="cpu")
check_merge(chunks(gen, 1000, 16), chunks(gen, 1000, 16))
check_merge(chunks(gen, 1000, 16, scale=5), chunks(gen, 1000, 40, shift=3), dtype=torch.float64)
empty = torch.full((10, 4), -math.inf, dtype=torch.float64)
check_merge(empty, empty)  # two empty parts: the empty state (-inf, 0)
check_merge(chunks(gen, 100, 4, shift=5e3), chunks(gen, 100, 4, shift=-5e3))  # maxima 1e4 apart
print("visible test passed: 2000 random pairs of chunks, float32 and float64; empty parts; "
      "maxima far apart")

# %% nbgrader={"grade": true, "grade_id": "test-merge-hidden", "points": 2}
gen = checks.generator(checks.new_seed(), where="cpu")
check_merge(chunks(gen, 8, 4), chunks(gen, 8, 4, shift=-2))
### BEGIN HIDDEN TESTS
minus_inf = torch.full((64, 8), -math.inf, dtype=torch.float64)
check_merge(minus_inf, chunks(gen, 64, 8))  # the left part is empty
check_merge(chunks(gen, 64, 8), minus_inf)  # the right part is empty
check_merge(minus_inf, minus_inf)  # both: (-inf, 0), not NaN
check_merge(minus_inf, minus_inf, dtype=torch.float64)
partly = chunks(gen, 64, 8)
partly[:, ::2] = -math.inf  # some -inf inside a chunk
check_merge(partly, minus_inf)
left = chunks(gen, 256, 8)
right = chunks(gen, 256, 8)
right[:, 3] = left.amax(dim=1)  # equal maxima
right = torch.minimum(right, left.amax(dim=1, keepdim=True))
check_merge(left, right)
far = 1e4  # maxima 2e4 apart
check_merge(chunks(gen, 256, 8, scale=3, shift=far), chunks(gen, 256, 8, scale=3, shift=-far))
check_merge(chunks(gen, 256, 8, scale=3, shift=-far), chunks(gen, 256, 8, scale=3, shift=far))
# beyond exp's float32 range
check_merge(chunks(gen, 256, 8, shift=100), chunks(gen, 256, 8, shift=-5))
check_merge(chunks(gen, 256, 8, scale=1e4), chunks(gen, 256, 8, scale=1e4))
print("hidden tests passed: empty states, equal maxima, maxima 2e4 apart")
### END HIDDEN TESTS

# %% [markdown]
# ### Associativity, checked numerically
#
# In floating point each grouping rounds differently, so the two results differ by a few units in
# the last place. The cell merges 100 000 random triples of states both ways, prints the largest
# relative difference in float32 and float64, and checks that merging with the empty state changes
# nothing.

# %%
gen = checks.generator(checks.new_seed(), where="cpu")
for dtype in (torch.float32, torch.float64):
    a, b, c = (state_of(chunks(gen, 100_000, 8, scale=4, shift=s)) for s in (-3.0, 0.0, 5.0))
    a, b, c = ([t.to(dtype) for t in s] for s in (a, b, c))
    left_m, left_d = merge(*merge(*a, *b), *c)
    right_m, right_d = merge(*a, *merge(*b, *c))
    swap_m, swap_d = merge(*b, *a)
    ab_m, ab_d = merge(*a, *b)
    assert torch.equal(left_m, right_m) and torch.equal(swap_m, ab_m)
    gap = ((left_d - right_d).abs() / right_d).max().item()
    print(f"{str(dtype)[6:]:8s} (A+B)+C vs A+(B+C): max relative difference {gap:.1e} "
          f"(unit roundoff {torch.finfo(dtype).eps / 2:.1e}); A+B vs B+A: "
          f"{((ab_d - swap_d).abs() / ab_d).max().item():.1e}")
empty = (torch.tensor([-math.inf]), torch.tensor([0.0]))
some = (torch.tensor([2.5]), torch.tensor([3.0]))
print("merge with the empty state:", [t.item() for t in merge(*empty, *some)],
      [t.item() for t in merge(*some, *empty)], [t.item() for t in merge(*empty, *empty)])

# %% [markdown]
# ## Watching the state evolve
#
# The explorer steps through a row of 48 values, 8 at a time, showing the running maximum, the
# factor $\alpha$ applied to the old $d$, the new $d$, and the *partial output*, the prefix's
# softmax $e^{x_j - m}/d$. Each time the maximum grows, all earlier outputs shrink by $\alpha$ at
# once: the rescaling FlashAttention applies to its accumulator. Move the slider (the picture below
# it is the first step; the second figure shows all steps).

# %%
gen = torch.Generator().manual_seed(6)
row = torch.randn(48, generator=gen, dtype=torch.float64) * 1.5
row[20] += 3.0  # a jump in the maximum in the middle of the row
display(walk.explore(row.numpy(), chunk=8))

states = walk.steps(row.numpy(), chunk=8)
for s in states:
    print(walk.describe(s))
walk.show_all(states)

# %% [markdown]
# ### Exercise 2 · a chunked online softmax in PyTorch (3 points)
#
# Write `chunked_softmax(x, out, chunk)` for a 2-D `x` (rows of any length, float32 or float16),
# streaming over the columns in chunks of `chunk`. A first pass keeps each row's state (m, d),
# updated chunk by chunk (your `merge` helps); a second pass writes each chunk of `out`: what is a
# chunk's softmax in terms of the final m and d? Float16 cannot hold a sum above 65504: in which
# precision do the statistics live, and where does the output's dtype come in? `torch.softmax` and
# `logsumexp` are off limits; the checks refuse them.

# %% nbgrader={"grade_id": "chunked-softmax", "solution": true}
def chunked_softmax(x, out, chunk=CHUNK):
    """Row softmax of x into out, reading x in column chunks: two passes, statistics in fp32."""
    ### BEGIN SOLUTION
    rows, n = x.shape
    m = torch.full((rows, 1), -math.inf, dtype=torch.float32, device=x.device)
    d = torch.zeros((rows, 1), dtype=torch.float32, device=x.device)
    for s in range(0, n, chunk):  # pass 1: the running state; reads the row once
        part = x[:, s:s + chunk].float()
        m_part = part.amax(dim=1, keepdim=True)
        m_safe = torch.where(m_part == -math.inf, torch.zeros_like(m_part), m_part)
        d_part = torch.exp(part - m_safe).sum(dim=1, keepdim=True)
        m, d = merge(m, d, m_part, d_part)
    for s in range(0, n, chunk):  # pass 2: normalise; reads once more and writes
        out[:, s:s + chunk] = (torch.exp(x[:, s:s + chunk].float() - m) / d).to(out.dtype)
    return out
    ### END SOLUTION


# %% [markdown]
# The checks compare with a float64 softmax. A long row's outputs are small (about $1/n$), so a
# fixed absolute tolerance would accept zeros; the tolerances are relative, with an absolute floor
# only at the smallest float16 step ($2^{-24}$). Float32's relative tolerance is $10^{-5}$: the
# next cell measures `torch.softmax`'s own float32 error, which a long sum makes larger than one
# rounding.

# %%
TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=1e-12),
             torch.float16: dict(rtol=1e-3, atol=2.0**-24)}


def row_inputs(rows, cols, dtype=torch.float32, scale=1.0, kind="normal", pad=0):
    """Rows of `cols` values; kind 'one-finite' leaves one finite value per row, the rest -inf;
    kind 'equal' makes every value 0. pad > 0 makes the rows a slice of wider rows (strided)."""
    def make(gen):
        x = checks.randn((rows, cols + pad), gen=gen, scale=scale)
        if kind == "one-finite":
            keep = torch.randint(cols, (rows,), generator=gen, device=gen.device)
            x_inf = torch.full_like(x, -math.inf)
            x_inf[torch.arange(rows), keep] = x[torch.arange(rows), keep]
            x = x_inf
        elif kind == "equal":
            x = torch.zeros_like(x)
        return (x.to(dtype)[:, :cols],)
    return make


def softmax_reference(x):
    return torch.softmax(x, dim=-1)


def without_softmax(fn):
    """fn, refusing calls to torch's softmax and logsumexp while it runs."""
    def run(*args, **kwargs):
        with integrity.forbid(integrity.SOFTMAX_OPS, why="compute it from the running state"):
            return fn(*args, **kwargs)
    run.__name__ = getattr(fn, "__name__", "your function")
    return run


def check_softmax(fn, rows, cols, dtype=torch.float32, kernels=(), **kind):
    """checks.check of fn against the float64 softmax; `kernels`: the Triton kernels that must
    do the work (see 00), for the exercises written as kernels."""
    checks.check(without_softmax(fn), softmax_reference, row_inputs(rows, cols, dtype, **kind),
                 kernels=kernels, **TOLERANCE[dtype])


def check_long_softmax(rows, cols, dtype=torch.float32, launcher=None, **kind):
    """check_softmax of long_softmax (or `launcher`), whose work softmax_online_kernel must do."""
    check_softmax(launcher or long_softmax, rows, cols, dtype, kernels=["softmax_online_kernel"],
                  **kind)


x_err = torch.randn(8, max(ROW_LENGTHS) * 8, generator=torch.Generator().manual_seed(3))
err = ((torch.softmax(x_err, 1).double() - torch.softmax(x_err.double(), 1)).abs()
       / torch.softmax(x_err.double(), 1)).max()
print(f"torch.softmax in float32 on rows of {x_err.shape[1]}: max relative error {err:.1e}")

# %% nbgrader={"grade": true, "grade_id": "test-chunked-softmax-visible", "points": 1}
check_softmax(chunked_softmax, 4, 1000)
check_softmax(chunked_softmax, 2, 300, scale=1e4)  # magnitudes around 1e4
check_softmax(chunked_softmax, 2, 300, kind="one-finite")  # whole chunks of -inf
check_softmax(chunked_softmax, 2, 1000, dtype=torch.float16)
check_softmax(chunked_softmax, 1, 66_000, dtype=torch.float16, kind="equal")  # d = 66000
print(f"visible test passed: 4 rows of 1000, float32, chunks of {CHUNK}; scores near 1e4, "
      "rows of -inf but one value, float16, a float16 row whose sum passes 65504")

# %% nbgrader={"grade": true, "grade_id": "test-chunked-softmax-hidden", "points": 2}
check_softmax(lambda x, out: chunked_softmax(x, out, chunk=7), 2, 50)
### BEGIN HIDDEN TESTS
for chunk in (1, 100, 1000, 5000):
    check_softmax(lambda x, out, c=chunk: chunked_softmax(x, out, chunk=c), 3, 1000)
check_softmax(chunked_softmax, 5, 3001, scale=1e4)  # magnitudes around 1e4
check_softmax(chunked_softmax, 5, 3001, kind="one-finite")  # all -inf but one
check_softmax(chunked_softmax, 5, 3001, dtype=torch.float16)
check_softmax(chunked_softmax, 5, 3001, dtype=torch.float16, scale=1e3)
check_softmax(chunked_softmax, 2, 70_000, dtype=torch.float16, kind="equal")  # d > 65504
check_softmax(chunked_softmax, 3, 1000, pad=24)  # rows of a wider tensor
print("hidden tests passed: chunk sizes, 1e4 magnitudes, -inf rows, float16, d beyond 65504")
### END HIDDEN TESTS

# %% [markdown]
# ## Long rows in Triton
#
# A row of 128k float32 values (512 KiB) is more than a whole SM's registers (65 536 32-bit
# registers, 256 KiB, at compute capability 9.0 per the CUDA C++ Programming Guide's table of
# compute capabilities), so the kernel loops over the row in blocks of `BLOCK` columns, one program
# per row. The reference below is the three-pass softmax as a kernel: loops for the maximum, the
# sum and the normalisation; three reads, one write.
#
# Inside a loop, the kernel keeps a *vector* of statistics, one per lane, and combines the lanes
# once after the loop (`tl.max`, `tl.sum`). A reduction across the block makes lanes exchange
# values through shared memory with a barrier; doing it once per row keeps the loop to loads and
# elementwise arithmetic.

# %%
@triton.jit
def softmax_three_pass_kernel(
    # pointers
    x_ptr,  # input, (rows, n_cols), row stride stride_x
    out_ptr,  # output, (rows, n_cols), row stride stride_out
    # sizes and strides
    n_cols,
    stride_x,
    stride_out,
    # compile-time constants
    BLOCK: tl.constexpr,  # columns per loop iteration
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2**31
    x_row = x_ptr + row * stride_x
    out_row = out_ptr + row * stride_out
    cols = tl.arange(0, BLOCK)  # (BLOCK,)
    # -- pass 1: the maximum, one per lane; reads the row
    m = tl.full((BLOCK,), float("-inf"), tl.float32)  # (BLOCK,)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < n_cols, other=float("-inf"))
        m = tl.maximum(m, x.to(tl.float32))
    m_row = tl.max(m, axis=0)  # scalar
    # -- pass 2: the sum of exponentials; reads the row again
    d = tl.zeros((BLOCK,), tl.float32)  # (BLOCK,)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < n_cols, other=float("-inf"))
        d += tl.exp(x.to(tl.float32) - m_row)
    inv_d = 1.0 / tl.sum(d, axis=0)  # scalar
    # -- pass 3: normalise; reads the row a third time and writes it
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=float("-inf"))
        y = tl.exp(x.to(tl.float32) - m_row) * inv_d
        tl.store(out_row + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def launch_rows(kernel, x, out, block=BLOCK, num_warps=NUM_WARPS):
    """One program per row of the 2-D tensor x; rows may be strided, columns contiguous."""
    assert x.ndim == 2 and out.shape == x.shape, "x must be 2-D and out of its shape"
    assert x.stride(1) == 1 and out.stride(1) == 1, "columns must be contiguous"
    kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), out.stride(0),
                          BLOCK=block, num_warps=num_warps)
    return out


def softmax_three_pass_triton(x, out):  # reads 3 rows' bytes, writes 1
    return launch_rows(softmax_three_pass_kernel, x, out)


check_softmax(softmax_three_pass_triton, ROWS, ROW_LENGTHS[0])
print("three-pass kernel agrees with torch.softmax")

# %% [markdown]
# ### Exercise 3 · the online long-row kernel (5 points)
#
# Fuse the first two passes: one loop keeps a running maximum `m` and denominator `d` per lane,
# then the lanes are merged, then a second loop normalises. The kernel reads the row twice and
# writes it once: `bytes_moved = 3 x` the row's bytes, against 4 for three passes and the ideal 2.
# Three details decide whether it is right:
#
# - **the last block**: columns past `n_cols` are masked; which value must they load so that they
#   add nothing to `d`? (What is `exp(other - m)`?)
# - **lanes with nothing yet**: a lane that has seen only `-inf` has `m = -inf`; the trap of
#   `merge` is here again;
# - **precision**: rows may be float16. In which precision must the statistics live, and in which
#   dtype is the output stored?
#
# The hidden tests run every row length of the parameters cell in float32 and float16, rows one
# column longer than a block, magnitudes near $10^4$, rows of `-inf` but one value, slices of wider
# rows, and a second block size.

# %% nbgrader={"grade_id": "long-softmax-kernel", "solution": true}
@triton.jit
def softmax_online_kernel(
    # pointers
    x_ptr,  # input, (rows, n_cols), row stride stride_x
    out_ptr,  # output, (rows, n_cols), row stride stride_out
    # sizes and strides
    n_cols,
    stride_x,
    stride_out,
    # compile-time constants
    BLOCK: tl.constexpr,  # columns per loop iteration
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2**31
    x_row = x_ptr + row * stride_x
    out_row = out_ptr + row * stride_out
    cols = tl.arange(0, BLOCK)  # (BLOCK,)
    ### BEGIN SOLUTION
    # -- pass 1: running maximum and denominator per lane; reads the row once
    m = tl.full((BLOCK,), float("-inf"), tl.float32)  # (BLOCK,)
    d = tl.zeros((BLOCK,), tl.float32)  # (BLOCK,)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < n_cols, other=float("-inf"))
        m_new = tl.maximum(m, x.to(tl.float32))  # (BLOCK,)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # lanes with only -inf so far
        d = d * tl.exp(m - m_safe) + tl.exp(x.to(tl.float32) - m_safe)
        m = m_new
    # -- merge the lanes' states: the associative merge, over the block
    m_row = tl.max(m, axis=0)  # scalar
    d_row = tl.sum(d * tl.exp(m - m_row), axis=0)  # lanes that saw only -inf add 0
    inv_d = 1.0 / d_row
    # -- pass 2: normalise; reads the row again and writes it
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=float("-inf"))
        y = tl.exp(x.to(tl.float32) - m_row) * inv_d  # (BLOCK,)
        tl.store(out_row + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


# %%
def long_softmax(x, out, block=BLOCK):  # reads 2 rows' bytes, writes 1
    """Row softmax of a 2-D tensor by softmax_online_kernel, one program per row."""
    return launch_rows(softmax_online_kernel, x, out, block=block)


# %% nbgrader={"grade": true, "grade_id": "test-long-softmax-visible", "points": 1}
check_long_softmax(ROWS, ROW_LENGTHS[1] - 5)  # not a multiple of BLOCK: a ragged last block
check_long_softmax(ROWS, ROW_LENGTHS[0], torch.float16)
check_long_softmax(ROWS, ROW_LENGTHS[0], kind="one-finite")  # lanes that see only -inf
check_long_softmax(ROWS, ROW_LENGTHS[0], scale=1e4)
check_long_softmax(ROWS, ROW_LENGTHS[0], pad=9)  # rows of a wider tensor
print(f"visible test passed: {ROWS} rows of {ROW_LENGTHS[1] - 5}, float32, BLOCK={BLOCK}; float16, "
      "rows of -inf but one value, scores near 1e4, strided rows")

# %% nbgrader={"grade": true, "grade_id": "test-long-softmax-hidden", "points": 2}
check_long_softmax(2, BLOCK + 1)
### BEGIN HIDDEN TESTS
for n in ROW_LENGTHS:
    for dtype in (torch.float32, torch.float16):
        check_long_softmax(ROWS, n, dtype)
n = ROW_LENGTHS[-1]
check_long_softmax(ROWS, n, scale=1e4)
check_long_softmax(ROWS, n, torch.float16, scale=1e3)
check_long_softmax(ROWS, n, kind="one-finite")
check_long_softmax(ROWS, n, torch.float16, kind="one-finite")
check_long_softmax(ROWS, n, pad=40)
check_long_softmax(1, 7)  # shorter than one block
check_long_softmax(ROWS, n, launcher=lambda x, out: long_softmax(x, out, block=BLOCK // 2))
if DEVICE.is_gpu:
    check_long_softmax(2, 70_000, torch.float16, kind="equal")  # d beyond 65504
print(f"hidden tests passed: lengths {ROW_LENGTHS}, float32 and float16, extreme values")
### END HIDDEN TESTS

# %% [markdown]
# ## Numerics at the edges
#
# Three cases through your kernel, against a float64 softmax:
#
# - **huge magnitudes**: a row scaled to about $10^4$; nearly all the mass sits on the few values
#   within some tens of the maximum, and nothing may overflow;
# - **float16 input, float32 statistics**: float16's largest value is 65504, so a row of 70 000
#   equal values, $d = 70000$, would store `inf`; and above 2048 float16 integers are 2 apart, so
#   2048 + 1 rounds back to 2048;
# - **rows of `-inf` but one**: the softmax is one-hot, and every lane but one sees only `-inf` in
#   the first pass.

# %%
print("float16: 70000 ->", torch.tensor(70_000.0).half().item(),
      "; 2048 + 1 ->", (torch.tensor(2048.0).half() + torch.tensor(1.0).half()).item())
cases = {
    "magnitudes ~1e4, float32": row_inputs(2, ROW_LENGTHS[0], scale=1e4),
    "normal values, float16": row_inputs(2, ROW_LENGTHS[0], torch.float16),
    "-inf but one, float32": row_inputs(2, ROW_LENGTHS[0], kind="one-finite"),
}
for what, make in cases.items():
    (x,) = make(checks.generator(0))
    y = long_softmax(x, torch.empty_like(x))
    want = torch.softmax(x.double(), 1)
    big = want > 1e-20  # relative error where it means something
    rel = ((y.double() - want).abs()[big] / want[big]).max().item()
    sums = ", ".join(f"{v:.6f}" for v in y.double().sum(1).tolist())
    print(f"{what:26s}: NaN {bool(y.isnan().any())}, row sums {sums}, largest output "
          f"{y.max().item():.4g}, max relative error (outputs above 1e-20) {rel:.1e}")

# %% [markdown]
# ## How fast, measured
#
# On a GPU the cell times `torch.softmax`, the three-pass kernel and your online kernel on 256 MiB
# of float32 rows at each long row length, with two bandwidths each: *actual* (the bytes it moves,
# 4, 3, and for `torch.softmax` an unknown number, shown as 2, over its time) and *useful* (the
# ideal $2nb$ over its time, the same footing for all). For short enough rows, L2 (50 MB on an
# H100, per its datasheet) serves part of a second read, and the actual bandwidth can pass the
# copy's. Whether a second read reached DRAM, the GPU's counters say: the cell then profiles the
# three at the longest rows (Nsight Compute, in a process apart from the notebook's, caches flushed
# before each kernel) and shows DRAM bytes read against one read of the matrix.

# %%
def long_rows_problem(n, total_bytes, block, num_warps, which):
    """What profile.each calls in the profiled process: one softmax of float32 rows of n."""
    x = torch.randn(total_bytes // (4 * n), n, device="cuda")
    out = torch.empty_like(x)
    if which == "torch.softmax":
        return lambda: torch.softmax(x, 1)
    kernel = softmax_three_pass_kernel if which == "three-pass kernel" else softmax_online_kernel
    return lambda: kernel[(x.shape[0],)](x, out, n, x.stride(0), out.stride(0), BLOCK=block,
                                         num_warps=num_warps)


NOT_PROFILED = profile.unavailable() or (None if RUN_BENCHMARKS else "RUN_BENCHMARKS is off")
if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("06_online_softmax/long-rows"):
        copy = perf.copy_baseline(2 * BENCH_BYTES)
        copy_gbs = timing.bench(copy).per_second(2 * BENCH_BYTES) / 1e9
        kernels = {"torch.softmax": (lambda x, out: torch.softmax(x, 1), 2),
                   "three-pass kernel": (softmax_three_pass_triton, 4),
                   "online kernel (yours)": (long_softmax, 3)}
        useful = {name: [] for name in kernels}
        for n in tqdm(ROW_LENGTHS, desc="row lengths"):
            x = torch.randn(BENCH_BYTES // (4 * n), n, device="cuda")
            out = torch.empty_like(x)
            for name, (fn, passes) in kernels.items():
                t = timing.bench(lambda fn=fn, x=x, out=out: fn(x, out))
                useful[name].append(t.per_second(2 * x.nbytes) / 1e9)
                print(f"n={n:6d} {name:22s} {t.median_ms * 1e3:7.1f} us  moves {passes}x row bytes:"
                      f" {t.per_second(passes * x.nbytes) / 1e9:5.0f} GB/s actual, "
                      f"{useful[name][-1]:5.0f} GB/s useful")
            if n == ROW_LENGTHS[-1]:
                t = timing.bench(lambda x=x, out=out: long_softmax(x, out))
                # for 08's roofline, counting 10 FLOPs per element (max, 3 subtractions,
                # 3 exponentials, 2 multiplications, 1 addition)
                results.record("06_online_softmax", "long-row softmax", flops=10 * x.numel(),
                               bytes_moved=3 * x.nbytes, seconds=t.median_ms * 1e-3)
        plots.curves(ROW_LENGTHS, useful, references={f"copy {copy_gbs:.0f} GB/s": copy_gbs},
                     xlabel="row length (float32 columns)", ylabel="useful GB/s (2 x row bytes / time)",
                     title=f"Long-row softmax on {DEVICE.name}")
        if NOT_PROFILED is None:
            named = {"torch.softmax": [], "three-pass kernel": ["softmax_three_pass_kernel"],
                     "online kernel (yours)": ["softmax_online_kernel"]}
            shape = {"n": ROW_LENGTHS[-1], "total_bytes": BENCH_BYTES, "block": BLOCK,
                     "num_warps": NUM_WARPS}
            counted = profile.each({name: profile.Call(long_rows_problem, kernels,
                                                       {**shape, "which": name})
                                    for name, kernels in named.items()})
            profile.compare(counted, columns=("duration", "dram_read", "l2_hit"),
                            minimum_read=dict.fromkeys(counted, BENCH_BYTES))
        else:
            print(f"Not profiled here: {NOT_PROFILED}.")
else:
    print("On a GPU this cell times torch.softmax, the three-pass kernel and your online kernel "
          "on long rows and plots their bandwidth against the copy bandwidth.")
    recorded.show("06_online_softmax/long-rows")

# %% [markdown]
# ### Speed (graded on a GPU)
#
# Your kernel runs on 1024 rows of 65 536 float32 values (256 MiB), credited with `3 x 256 MiB`
# moved (two reads, one write), and must move them at 70% of the rate of a device copy of as many
# bytes, timed in the same run. The input is drawn afresh before every timed call and the output
# is checked; a bandwidth above the copy's is flagged and scores 0.

# %% nbgrader={"grade": true, "grade_id": "speed-long-softmax-bandwidth", "points": 2}
x_speed = torch.randn(DEVICE.pick(gpu=SPEED_SHAPE, interpreter=(2, 256)), device=DEVICE.torch_device)
out_speed = torch.empty_like(x_speed)
perf.grade(perf.Case(lambda: long_softmax(x_speed, out_speed), kernels=["softmax_online_kernel"],
                     inputs=(x_speed,), out=out_speed,
                     verify=lambda: checks.compare(out_speed, softmax_reference(x_speed.double()),
                                                   **TOLERANCE[torch.float32]),
                     baselines=[perf.copy_bandwidth(3 * x_speed.nbytes, at_least=0.7)]),
           points=2)

# %% [markdown]
# ## Summary
#
# - Safe softmax subtracts the row's maximum; written plainly, that needs the maximum before the
#   sum: three passes over a row that does not fit on chip.
# - The running state $(m, d)$, with $d$ rescaled by $e^{m - m'}$ whenever the maximum grows, gives
#   both statistics in one pass; a second pass normalises.
# - Two states merge into the state of the union; the merge is associative and commutative with
#   identity $(-\infty, 0)$, so chunks, lanes and programs combine in any grouping.
# - $-\infty$ maxima need a guard, and float16 data float32 statistics.
# - The online kernel moves 3 row-sizes against 4 for three passes and the ideal of 2.

# %% [markdown]
# ## Further exercises
#
# 1. With few rows (say 4 rows of a million columns), one program per row leaves the GPU idle.
#    Split each row between programs that each write a state (m, d), and merge the states in a
#    small second kernel before normalising. Which property of the merge makes this correct?
# 2. In the first loop, one of $e^{m - m'}$ and $e^{x - m'}$ is always $e^0 = 1$. Rewrite the update
#    with one exponential per element; does it matter for float16 rows?
# 3. Run the normalising pass from the end of the row backwards: the blocks read last by the first
#    pass are likeliest to be in L2. Does the bandwidth change at 128k columns?
# 4. Compute `log_softmax` with the same two passes. What is its formula in m and d?
