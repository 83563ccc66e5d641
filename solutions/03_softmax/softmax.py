# %% [markdown]
# # 03 · Fused softmax
#
# *Reading time: about 11 minutes.*
#
# Softmax turns each row of scores into probabilities: exponentiate, then divide by the row's sum.
# It sits in every attention layer and classifier and does little arithmetic per element, so
# memory traffic sets its speed. As a chain of PyTorch operations it sends the matrix to memory and
# back several times; one Triton kernel that keeps a row on chip reads it once and writes it once.
# You will count that difference, write the kernel, make it exact on the inputs that break naive
# versions, and find where rows grow too long to keep on chip.
#
# **You will learn:** how to count the memory trips of eager operations; how a program reduces a
# row; why softmax subtracts the row's maximum; how to handle rows whose length is not a power of
# two; how `num_warps` and rows per program change speed; and where long rows stop fitting.

# %%
from grader.runtime import device

DEVICE = device.setup()

import math

import torch
import triton
import triton.language as tl
from torch.overrides import TorchFunctionMode
from tqdm.auto import tqdm
from triton.runtime.errors import OutOfResources

from grader.runtime import checks, integrity, perf, plots, profile, recorded, results, timing

print(f"Kernels run on {DEVICE.describe()}; tensors for them live on '{DEVICE.torch_device}'.")

# %% tags=["parameters"]
# You may change these while you work; grading restores this cell as released.
# The graded speed shape: float32, many rows, a few thousand columns that are not a power of two.
SPEED_SHAPE = DEVICE.pick(gpu=(16384, 4000), interpreter=(8, 40))
# Correctness shapes (rows, columns): a single element, odd sizes, rows longer than 1024.
CHECK_SHAPES = DEVICE.pick(
    gpu=[(1, 1), (64, 1), (3, 1000), (127, 129), (1000, 2500), (64, 8193), (4096, 4000)],
    interpreter=[(1, 1), (64, 1), (3, 1000), (127, 129), (6, 2500), (3, 4500)],
)
# Row lengths for the bandwidth sweep; every shape holds 2**26 elements (256 MiB in float32).
ROW_LENGTHS = [128, 512, 1024, 2048, 4000, 8192, 16384, 32768, 65536]
SWEEP_ELEMENTS = 1 << 26
WARPS = [1, 2, 4, 8, 16, 32]
RUN_BENCHMARKS = True

# %% [markdown]
# ## Softmax from eager operations, and what it costs
#
# For a row $x$ of $N$ numbers, $\mathrm{softmax}(x)_j = e^{x_j - m} / \sum_k e^{x_k - m}$ with
# $m = \max_k x_k$. Subtracting $m$ changes nothing mathematically (numerator and denominator both
# gain a factor $e^{-m}$) and, as the next section shows, everything numerically. An
# $M \times N$ matrix takes the softmax of each row.
#
# In eager PyTorch each operation is its own kernel: it reads its inputs from device memory and
# writes its result back. Five of them make a softmax; the comments count their traffic in
# elements. The grader's reference is `torch.softmax` in float64.

# %%
def softmax_eager(x):
    """Row softmax from five PyTorch operations, each a separate kernel and trip to memory."""
    row_max = x.amax(dim=1, keepdim=True)  # reads M*N, writes M
    shifted = x - row_max  # reads M*N + M, writes M*N
    numerator = torch.exp(shifted)  # reads M*N, writes M*N
    denominator = numerator.sum(dim=1, keepdim=True)  # reads M*N, writes M
    return numerator / denominator  # reads M*N + M, writes M*N


def softmax_reference(x):  # what the grader compares with; reads M*N at least, writes M*N
    return torch.softmax(x, dim=1)


# %% [markdown]
# Rather than trust the comments, let PyTorch count. `TrafficCounter` is a
# `torch.overrides.TorchFunctionMode`: each PyTorch function called inside `with` passes through
# it, and it adds up the bytes of the tensors the operation takes (reads) and returns (writes). A
# memory-bound kernel moves at least those bytes, so the total is a floor on eager traffic.

# %%
class TrafficCounter(TorchFunctionMode):
    """Records (operation, bytes read, bytes written) for every PyTorch call that returns a tensor."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if isinstance(result, torch.Tensor):
            inputs = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
            self.calls.append((func.__name__, sum(a.nbytes for a in inputs), result.nbytes))
        return result


M, N = 1024, 4000
x = torch.randn(M, N)
with TrafficCounter() as counter:
    softmax_eager(x)
matrix = x.nbytes
print(f"{'operation':<12}{'reads (x matrix)':>18}{'writes (x matrix)':>19}")
for name, read, written in counter.calls:
    print(f"{name:<12}{read / matrix:>18.4f}{written / matrix:>19.4f}")
reads = sum(r for _, r, _ in counter.calls) / matrix
writes = sum(w for _, _, w in counter.calls) / matrix
print(f"{'total':<12}{reads:>18.4f}{writes:>19.4f}")
print(f"\neager softmax moves {reads + writes:.2f} matrices of {matrix / 2**20:.1f} MiB; one fused "
      f"pass moves 2 (read once, write once): at most {(reads + writes) / 2:.2f}x less traffic.")

# %% [markdown]
# Five reads and three writes of the matrix, against one of each for a single pass: if every
# kernel ran at full memory speed, one fused kernel would be about four times as fast. On a GPU the
# next cell times each eager operation on the graded shape and turns its bytes into a bandwidth,
# beside a device copy measured in the same run. Where the two are close, the waste lies in the
# number of trips, not in how each is made.

# %%
if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("03_softmax/eager-steps"):
        x = torch.randn(SPEED_SHAPE, device="cuda")
        row_max = x.amax(dim=1, keepdim=True)
        shifted = x - row_max
        numerator = torch.exp(shifted)
        denominator = numerator.sum(dim=1, keepdim=True)
        steps = {  # (the operation, elements read + written)
            "amax": (lambda: x.amax(dim=1, keepdim=True), x.numel() + len(x)),
            "subtract": (lambda: x - row_max, 2 * x.numel() + len(x)),
            "exp": (lambda: torch.exp(shifted), 2 * x.numel()),
            "sum": (lambda: numerator.sum(dim=1, keepdim=True), x.numel() + len(x)),
            "divide": (lambda: numerator / denominator, 2 * x.numel() + len(x)),
        }
        copy = timing.bench(perf.copy_baseline(2 * x.nbytes)).per_second(2 * x.nbytes)
        total_ms = 0.0
        for name, (fn, elements) in steps.items():
            t = timing.bench(fn)
            total_ms += t.median_ms
            rate = t.per_second(elements * x.element_size())
            print(f"{name:<9} {t.median_ms * 1e3:7.1f} us  {rate / 1e9:6.0f} GB/s  "
                  f"({rate / copy:.0%} of copy)")
        whole = timing.bench(lambda: softmax_eager(x))
        print(f"sum of the five: {total_ms * 1e3:.1f} us; softmax_eager as one call: {whole}")
        print(f"copy bandwidth measured now: {copy / 1e9:.0f} GB/s; reading and writing the matrix "
              f"once at that rate takes {2 * x.nbytes / copy * 1e6:.1f} us")
        del x, row_max, shifted, numerator, denominator
else:
    print("On a GPU this cell times each of the five eager operations and compares its bandwidth "
          "with a device copy measured in the same run.")
    recorded.show("03_softmax/eager-steps")

# %% [markdown]
# ## Why subtract the maximum
#
# $e^x$ passes the largest float32 ($\approx 3.4 \times 10^{38}$) once $x > 88.7$, and the largest
# float16 (65504) once $x > 11.1$; the cell computes both limits from `torch.finfo`. Past them
# `exp` returns `inf`, and `inf / inf` is NaN: without the subtraction, one large score turns its
# row to NaN. After it, every exponent is at most 0, every $e^{x_j - m}$ lies in $[0, 1]$ and the
# sum between 1 and $N$: nothing overflows. Very negative entries underflow to 0, which is right to
# the format's precision.

# %%
def softmax_naive(x):  # no max subtraction: right on small inputs only
    numerator = torch.exp(x)
    return numerator / numerator.sum(dim=1, keepdim=True)


gen = torch.Generator().manual_seed(0)
for dtype in (torch.float32, torch.float16):
    limit = math.log(torch.finfo(dtype).max)
    print(f"{str(dtype)[6:]}: exp(x) overflows for x > {limit:.2f}; "
          f"exp({limit + 0.5:.1f}) = {torch.exp(torch.tensor(limit + 0.5, dtype=dtype)).item()}")
    for scale in (1, 10, 100, 1e4):
        x = (torch.randn(64, 1000, generator=gen) * scale).to(dtype)
        bad_naive = softmax_naive(x).isnan().any(dim=1).float().mean().item()
        stable = softmax_eager(x.float())
        error = (stable - softmax_reference(x.double())).abs().max().item()
        print(f"   scores ~ N(0, {scale:g}^2): naive softmax has NaN in {bad_naive:6.1%} of rows; "
              f"with the max subtracted, max error {error:.1e}")

# %% [markdown]
# ## One program per row
#
# Each row goes to one program, which loads the whole row into registers (`BLOCK` lanes spread
# over its threads), takes its maximum with `tl.max`, its exponentials and their sum with
# `tl.sum`, divides, and stores. The reductions stay on chip (registers and shared memory), so the
# kernel reads each element once and writes it once, the least any softmax can do.
#
# `tl.arange` needs a power-of-two length, so `BLOCK = triton.next_power_of_2(N)` and a mask
# (`cols < N`) switches off the lanes past the row's end. Unlike in an elementwise kernel, what
# those lanes hold matters: they take part in the max and the sum.
#
# Short rows leave a program little to do, so a program may own `ROWS` rows: a `(ROWS, BLOCK)`
# tile reduced along axis 1, with a second mask for rows past the matrix's end. The picture shows
# a 6 x 5 matrix in tiles of `ROWS = 4` by `BLOCK = 8`.

# %% [markdown]
# ![6 x 5 matrix in ROWS=4 x BLOCK=8 tiles; padded lanes, extra rows masked](figures/row_tiles.svg)
#
# *Each program loads a `(ROWS, BLOCK)` tile, reduces each row along axis 1, and masks the padding.*

# %% [markdown]
# Two candidate fills on one row of 5 negative scores padded to 8 lanes: which one leaves the
# softmax of the real lanes as `torch.softmax` has it?

# %%
row = torch.tensor([-3.0, -1.0, -2.0, -4.0, -1.5], dtype=torch.float64)
for fill in (0.0, -math.inf):
    padded = torch.cat([row, torch.full((3,), fill, dtype=torch.float64)])
    m = padded.max()
    numerator = torch.exp(padded - m)
    print(f"padding with {fill:>4}: max {m.item():>5}, sum {numerator.sum().item():.4f}, "
          f"softmax of the real lanes {(numerator / numerator.sum())[:5].numpy().round(4)}")
print(f"{'torch.softmax':>17}: {torch.softmax(row, dim=0).numpy().round(4)}")

# %% [markdown]
# ## What the kernel must return on special rows
#
# The kernel must match `torch.softmax`, also where the input holds `-inf` (attention masks put it
# there on purpose). In float64, PyTorch says:
#
# - a `-inf` entry in a row with a finite maximum gets exactly 0;
# - a row of nothing but `-inf` has no finite maximum, and its softmax is NaN everywhere
#   ($-\infty - (-\infty)$ is NaN). Some libraries return zeros instead; this course follows
#   `torch.softmax`, and the tests check both rules.

# %%
special = torch.tensor([[1.0, 2.0, -math.inf, 0.5],
                        [-math.inf, -math.inf, -math.inf, -math.inf],
                        [1e4, -1e4, 0.0, 1e4 - 1.0]], dtype=torch.float64)
print(torch.softmax(special, dim=1))

# %% [markdown]
# ### Exercise 1 · the softmax kernel and its launch configuration (6 points)
#
# Write the body of `softmax_kernel`; the tile's offsets and masks are given. Decide:
#
# 1. What must a masked lane hold so that it changes neither its row's maximum nor its sum? Give
#    that value to `tl.load`.
# 2. Inputs may be float16. In which precision should the max, the exponentials and the sum be
#    computed, and in which dtype must the result be stored?
# 3. `tl.max(x, axis=1)` has shape `(ROWS,)` while `x` is `(ROWS, BLOCK)`: how do you subtract
#    each row's maximum from every lane of that row?
# 4. Which lanes may the store write?
#
# Then write `launch_config`: `ROWS` and `num_warps` for a row length, both powers of two. Start
# with the simplest choice that is correct and improve it with the reasoning below. The given
# launcher `softmax` takes `num_warps` and `rows_per_program` as overrides for the sweeps.

# %% nbgrader={"grade_id": "softmax-kernel", "solution": true}
@triton.jit
def softmax_kernel(
    # pointers
    out_ptr,  # output, (n_rows, n_cols), the input's dtype
    x_ptr,  # input, (n_rows, n_cols), float32 or float16
    # sizes
    n_rows,  # number of rows
    n_cols,  # elements per row
    # strides: elements from one row to the next (columns are contiguous)
    x_row_stride,
    out_row_stride,
    # compile-time constants
    BLOCK: tl.constexpr,  # lanes per row, a power of two >= n_cols: the whole row
    ROWS: tl.constexpr,  # rows per program, a power of two
):
    # -- which rows and columns this program owns
    pid = tl.program_id(axis=0)
    rows = pid * ROWS + tl.arange(0, ROWS)[:, None]  # (ROWS, 1)
    cols = tl.arange(0, BLOCK)[None, :]  # (1, BLOCK)
    mask = (rows < n_rows) & (cols < n_cols)  # (ROWS, BLOCK)
    # -- load, reduce along each row, normalise, store: reads ROWS*n_cols, writes ROWS*n_cols
    ### BEGIN SOLUTION
    x = tl.load(x_ptr + rows * x_row_stride + cols, mask=mask, other=-float("inf"))
    x = x.to(tl.float32)  # (ROWS, BLOCK); -inf in masked lanes changes neither max nor sum
    row_max = tl.max(x, axis=1)  # (ROWS,)
    numerator = tl.exp(x - row_max[:, None])  # (ROWS, BLOCK), each in [0, 1]
    denominator = tl.sum(numerator, axis=1)  # (ROWS,), in [1, n_cols] when the max is finite
    y = numerator / denominator[:, None]  # (ROWS, BLOCK)
    tl.store(out_ptr + rows * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def launch_config(n_rows, n_cols):
    """(rows per program, num_warps) for a matrix of n_rows rows of n_cols elements."""
    block = triton.next_power_of_2(n_cols)
    ### BEGIN SOLUTION
    # Short rows: several per program, so that each program loads at least ~2048 elements
    # (8 KiB of float32) instead of a few hundred bytes; never more rows than the matrix has.
    rows = max(1, min(2048 // block, 16, triton.next_power_of_2(n_rows)))
    # About 16 elements per thread (32 threads per warp): enough independent loads in flight per
    # thread to hide memory latency, and few enough registers (the tile lives in them) for several
    # programs to share an SM. 16 warps caps it; longer rows then hold more per thread.
    num_warps = min(max(rows * block // (32 * 16), 1), 16)
    ### END SOLUTION
    return rows, num_warps


def softmax(x, out, *, num_warps=None, rows_per_program=None):
    """out = softmax(x) along dim 1, for a 2-D x with contiguous rows, by softmax_kernel."""
    assert x.ndim == 2 and out.shape == x.shape and out.dtype == x.dtype
    assert x.stride(1) == 1 and out.stride(1) == 1, "columns must be contiguous"
    n_rows, n_cols = x.shape
    rows, warps = launch_config(n_rows, n_cols)
    rows = rows_per_program or rows
    grid = (triton.cdiv(n_rows, rows),)
    softmax_kernel[grid](
        out, x, n_rows, n_cols, x.stride(0), out.stride(0),
        BLOCK=triton.next_power_of_2(n_cols), ROWS=rows, num_warps=num_warps or warps,
    )
    return out


# %% [markdown]
# **The launch configuration, reasoned.** The kernel is memory bound: what matters is keeping
# enough loads in flight to cover memory's latency without running out of registers.
#
# - `num_warps` sets how many threads (32 per warp) share a program's tile. Too few, and each
#   thread holds a large slice of the row in registers, so the SM runs few programs; too many, and
#   each thread loads a handful of elements while the cross-warp steps of `tl.max` and `tl.sum`
#   (through shared memory, with barriers) cost more than they save. How many elements per thread
#   would you aim for?
# - `ROWS` packs short rows into one program. A 128-element row is 512 bytes: a program that moves
#   only that spends more time starting and reducing than loading. How large should a tile be?
#
# The measurements after the speed cells show how bandwidth depends on both.

# %% [markdown]
# ### How the tests call your launcher
#
# `softmax_inputs` builds the test matrices: normal scores, uniform scores up to a given
# magnitude, rows shifted by large offsets (neighbours in one program differ by thousands), `-inf`
# entries, rows of nothing but `-inf`, and rows that are views into a wider matrix. `kernel_only`
# watches the PyTorch functions your launcher calls: calling `torch.softmax`, `exp`, `sum` and the
# like fails the test. `checks.check` with `kernels=["softmax_kernel"]` requires that kernel to be
# launched on `x` and to write every element of `out` itself.

# %%
def softmax_inputs(n_rows, n_cols, dtype=torch.float32, *, scale=1.0, spread=0.0, offset=0.0,
                   minus_inf=0.0, dead_rows=0, padding=0):
    """make_inputs for checks.check: one (n_rows, n_cols) matrix, fresh for every generator."""

    def make(gen):
        where = gen.device
        shape = (n_rows, n_cols + padding)  # padding > 0: rows are a view into a wider matrix
        x = checks.randn(shape, gen=gen, scale=scale)
        if spread:  # uniform in [-spread, spread]
            x = (torch.rand(shape, generator=gen, device=where) * 2 - 1) * spread
        if offset:  # each row shifted by its own amount in [-offset, offset]
            x = x + (torch.rand((n_rows, 1), generator=gen, device=where) * 2 - 1) * offset
        if minus_inf:
            x[torch.rand(shape, generator=gen, device=where) < minus_inf] = -math.inf
        if dead_rows:
            x[torch.randperm(n_rows, generator=gen, device=where)[:dead_rows]] = -math.inf
        return (x.to(dtype)[:, :n_cols],)

    return make


# What the launcher must not hand to PyTorch: the softmax itself, or its parts.
SOFTMAX_PARTS = integrity.SOFTMAX_OPS | {
    "exp", "exp2", "expm1", "amax", "max", "sum", "nansum", "div", "true_divide", "__truediv__",
    "__rtruediv__",
}


def kernel_only(launcher):
    """`launcher`, refusing PyTorch's softmax and its parts while it runs."""

    def run(*args, **kwargs):
        with integrity.forbid(SOFTMAX_PARTS, why="the softmax must be computed by your Triton "
                              "kernel, not by PyTorch"):
            return launcher(*args, **kwargs)

    run.__name__ = getattr(launcher, "__name__", "softmax")
    return run


def check_softmax(n_rows, n_cols, dtype=torch.float32, launcher=None, **kinds):
    checks.check(kernel_only(launcher or softmax), softmax_reference,
                 softmax_inputs(n_rows, n_cols, dtype, **kinds), kernels=["softmax_kernel"])


def check_exact_zeros(n_rows, n_cols, dtype=torch.float32):
    """-inf entries in rows with a finite maximum must give exactly 0, not merely a tiny value."""
    (x,) = softmax_inputs(n_rows, n_cols, dtype, minus_inf=0.3, dead_rows=1)(
        checks.generator(checks.new_seed()))
    out = torch.empty_like(x)
    kernel_only(softmax)(x, out=out)
    live = ~(x == -math.inf).all(dim=1, keepdim=True)
    wrong = int(((x == -math.inf) & live & (out != 0)).sum())
    if wrong:
        raise checks.KernelCheckError(f"{wrong} entries that are -inf in a row with a finite "
                                      "maximum did not come out as exactly 0")


# %% [markdown]
# ### Visible test
#
# A 127 x 129 float32 matrix (neither side a power of two) of normal scores, then one with `-inf`
# entries and three rows of nothing but `-inf`; scores up to 1e4, rows shifted far apart, rows
# longer than 1024, float16, and rows that are views into a wider matrix. At grading, the next
# cell checks every shape in `CHECK_SHAPES` in float32 and float16 (and bfloat16 on a GPU); scores
# up to 1e4 in float32 and 6e4 in float16 (largest finite value 65504); rows shifted far apart;
# `-inf` entries (exactly 0 out) and all-`-inf` rows (NaN out); rows that are views into a wider
# matrix; and several forced values of rows per program.

# %% nbgrader={"grade": true, "grade_id": "test-softmax-visible", "points": 1}
check_softmax(127, 129)
check_softmax(127, 129, minus_inf=0.2, dead_rows=3)
check_softmax(20, 129, spread=1e4)  # one score dominates each row
check_softmax(20, 129, offset=1e4)  # neighbouring rows thousands apart
check_softmax(2, 1100)  # longer than 1024
LOW = [torch.float16] + ([torch.bfloat16] if DEVICE.supports("bf16") else [])
for dtype in LOW:
    check_softmax(20, 129, dtype)
check_softmax(10, 200, padding=7)  # row stride 207 for the input, 200 for the output
print(f"visible tests passed: 127 x 129 float32, normal scores and -inf entries/rows, large and "
      f"shifted scores, 1100 columns, {[str(d)[6:] for d in LOW]}, strided rows")

# %% nbgrader={"grade": true, "grade_id": "test-softmax-hidden", "points": 3}
check_softmax(1, 1)  # one element: its softmax is 1; the hidden tests follow
### BEGIN HIDDEN TESTS
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE.supports("bf16") else [])
LARGE = {torch.float32: 1e4, torch.float16: 6e4, torch.bfloat16: 1e4}
for n_rows, n_cols in CHECK_SHAPES:
    for dtype in DTYPES:
        check_softmax(n_rows, n_cols, dtype)
for dtype in DTYPES:
    big = LARGE[dtype]
    check_softmax(127, 129, dtype, spread=big)  # one score dominates each row
    check_softmax(127, 129, dtype, offset=big)  # rows far apart from each other
    check_softmax(3, 1000, dtype, spread=big, minus_inf=0.3, dead_rows=1)
    check_softmax(6, 2500, dtype, offset=big, minus_inf=0.1, dead_rows=2)
    check_exact_zeros(33, 300, dtype)
check_softmax(9, 1100, padding=17)  # row stride 1117 for the input, 1100 for the output
check_softmax(127, 129, torch.float16, padding=3, offset=1e3)
for rows in (1, 2, 8):  # the kernel must not depend on one ROWS
    forced = lambda x, out, rows=rows: softmax(x, out, rows_per_program=rows)  # noqa: E731
    check_softmax(19, 129, launcher=forced, offset=1e4)
    check_softmax(5, 1500, launcher=forced, minus_inf=0.2, dead_rows=1)
print(f"hidden tests passed: {CHECK_SHAPES}, dtypes {[str(d)[6:] for d in DTYPES]}, extremes, "
      "strides, rows per program 1, 2, 8")
### END HIDDEN TESTS

# %% [markdown]
# ### Speed (graded on a GPU)
#
# Two cells time a float32 matrix of `SPEED_SHAPE` (16384 x 4000 on a GPU: 250 MiB, five times an
# H100's 50 MB L2 per its datasheet, so every pass goes to device memory) against a baseline timed
# in the same run, alternately, and re-check your output after timing:
#
# - at least **3x** as fast as `softmax_eager`. The traffic count gives a single pass 4x (a
#   little more, as eager's steps run below the copy's bandwidth, in the steps' table); a
#   kernel that moves the matrix four times gets 2x by the count, and measured 2.6x on an H200;
# - at least **0.9x** the speed of `torch.softmax`, which is a single pass too: PyTorch's CUDA
#   softmax (`aten/src/ATen/native/cuda/SoftMax.cu`) keeps a row of this length on chip.

# %% nbgrader={"grade": true, "grade_id": "speed-softmax-vs-eager", "points": 1}
x_speed = checks.randn(SPEED_SHAPE, gen=checks.generator(checks.new_seed()))
out_speed = torch.empty_like(x_speed)


def verify_speed():
    checks.compare(out_speed, softmax_reference(x_speed.double()), context="after a timed call")


def softmax_case(baseline):
    """softmax_kernel on the speed matrix, timed against `baseline`."""
    return perf.Case(lambda: softmax(x_speed, out_speed), kernels=["softmax_kernel"],
                     inputs=(x_speed,), out=out_speed, verify=verify_speed, baselines=[baseline],
                     bytes_moved=2 * x_speed.nbytes)


perf.grade(softmax_case(perf.Baseline("eager (5 operations)", lambda: softmax_eager(x_speed),
                                      at_least=3.0)), points=1)

# %% nbgrader={"grade": true, "grade_id": "speed-softmax-vs-torch", "points": 1}
perf.grade(softmax_case(perf.Baseline("torch.softmax", lambda: torch.softmax(x_speed, dim=1),
                                      at_least=0.9)), points=1)

# %% [markdown]
# The kernel's time is recorded for 08's roofline of all your kernels (5 operations per element;
# one read and one write of the matrix). Then the GPU's counters (Nsight Compute, in a process
# apart from the notebook's, caches flushed before each kernel): the DRAM bytes the eager softmax's five kernels
# and yours read and wrote. Yours should read the matrix once; bytes written can come out below a
# matrix, as lines still dirty in L2 when a kernel ends are not counted.
#
# ### Exercise 2 · which reads are coalesced? (2 points)
#
# The cell also profiles three copies from a code review, `review_copy_a`, `_b` and `_c`, each of
# `n` float32 elements (recorded on a GPU: the same figures everywhere). All three read the same
# DRAM bytes, yet one takes several times as long: where is the waste?
#
# 1. Write `fetched_per_used(k, used_bytes)`: the bytes the global loads of the launch `k` (a
#    `profile.KernelProfile`) fetched into L1 (`k.l1_load_sectors` sectors of 32 bytes) per byte
#    the copy needed.
# 2. Set `UNCOALESCED` to the labels of the copies whose warps fetch sectors they do not use. Many
#    sectors per request is not by itself a waste. Why did DRAM not see it?

# %%
def softmax_problem(n_rows, n_cols, rows, warps, eager):
    """What profile.each calls in the profiled process: the eager softmax, or softmax_kernel."""
    x = torch.randn(n_rows, n_cols, device="cuda")
    out = torch.empty_like(x)
    if eager:
        return lambda: softmax_eager(x)
    return lambda: softmax_kernel[(triton.cdiv(n_rows, rows),)](
        out, x, n_rows, n_cols, x.stride(0), out.stride(0), BLOCK=triton.next_power_of_2(n_cols),
        ROWS=rows, num_warps=warps)


@triton.jit
def review_copy_a(x_ptr, out_ptr, n, rows, cols, BLOCK: tl.constexpr):
    # x is (rows, cols), row-major, copied in tiles of BLOCK // 128 rows x 128 columns
    pid = tl.program_id(0)
    tiles_per_row = cols // 128
    r = (pid // tiles_per_row) * (BLOCK // 128) + tl.arange(0, BLOCK // 128)  # (BLOCK // 128,)
    c = (pid % tiles_per_row) * 128 + tl.arange(0, 128)  # (128,)
    offsets = r[:, None] * cols + c[None, :]  # (BLOCK // 128, 128)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def review_copy_b(x_ptr, out_ptr, n, rows, cols, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,)
    mask = offsets < n
    # x is (rows, cols), row-major; out[i] = x[i % rows, i // rows], its transpose flattened
    x = tl.load(x_ptr + (offsets % rows) * cols + offsets // rows, mask=mask)
    tl.store(out_ptr + offsets, x, mask=mask)


@triton.jit
def review_copy_c(x_ptr, out_ptr, n, rows, cols, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


def review_problem(n, label, rows=4096, block=1024):
    """What profile.each calls: copy `label` of n float32 elements (n a multiple of 128 rows)."""
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    kernel = {"A": review_copy_a, "B": review_copy_b, "C": review_copy_c}[label]
    return lambda: kernel[(triton.cdiv(n, block),)](x, out, n, rows, n // rows, BLOCK=block)


REVIEW_ELEMENTS = 1 << 24
NOT_PROFILED = profile.unavailable() or (None if RUN_BENCHMARKS else "RUN_BENCHMARKS is off")
if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("03_softmax/kernel-time"):
        t = timing.bench(lambda: softmax(x_speed, out_speed))
        moved = 2 * x_speed.nbytes
        entry = results.record("03_softmax", "softmax", flops=5 * x_speed.numel(), bytes_moved=moved,
                               seconds=t.median_ms * 1e-3, precision="fp32")
        print(f"softmax_kernel on {tuple(x_speed.shape)} float32: {t}, "
              f"{t.per_second(moved) / 1e9:.0f} GB/s; recorded for {entry.device}")
        if NOT_PROFILED is None:
            rows, warps = launch_config(*SPEED_SHAPE)
            shape = {"n_rows": SPEED_SHAPE[0], "n_cols": SPEED_SHAPE[1], "rows": rows,
                     "warps": warps}
            found = profile.each({  # all five calls in one process under the profiler
                "eager, 5 kernels": profile.Call(softmax_problem, [], {**shape, "eager": True}),
                "softmax_kernel": profile.Call(softmax_problem, ["softmax_kernel"],
                                               {**shape, "eager": False}),
                **{label: profile.Call(review_problem, [f"review_copy_{label.lower()}"],
                                       {"n": REVIEW_ELEMENTS, "label": label})
                   for label in "ABC"}})
            counted = {k: found[k] for k in ("eager, 5 kernels", "softmax_kernel")}
            profile.compare(counted, columns=("duration", "dram_read", "dram_written"),
                            minimum_read=dict.fromkeys(counted, x_speed.nbytes))
            review_live = {label: found[label] for label in "ABC"}
            profile.compare(review_live, columns=("l1_load", "l1_read", "dram_read", "duration"))
        else:
            print(f"Not profiled here: {NOT_PROFILED}.")
else:
    print("On a GPU this cell records the kernel's time for the course's closing roofline, then "
          "profiles; interpreter times are not recorded.")
    recorded.show("03_softmax/kernel-time")

# %% nbgrader={"grade_id": "review-coalesced", "solution": true}
def fetched_per_used(k: profile.KernelProfile, used_bytes: float) -> float:
    """Bytes the loads of the launch `k` fetched into L1 per byte it needed to read."""
    ### BEGIN SOLUTION
    return 32 * k.l1_load_sectors / used_bytes
    ### END SOLUTION


### BEGIN SOLUTION
UNCOALESCED = {"B"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test-review-coalesced-visible", "points": 1}
recorded_review = profile.recorded_profiles("03_softmax/kernel-time", nth=1)
review = {label: p.kernels[0] for label, p in recorded_review.items()}
used = 4 * REVIEW_ELEMENTS  # each copy needs to read n float32 elements
for label, k in review.items():
    fetched = 32 * k.l1_load_sectors
    checks.expect_count(fetched_per_used, (k, used), fetched / used,
                        unit="bytes fetched per byte used", what=f"copy {label}",
                        wrong={used / fetched: "that is the inverse: used over fetched",
                               k.dram_bytes_read / used: "that is DRAM's count: L1's is asked"})
assert isinstance(UNCOALESCED, (set, frozenset)) and UNCOALESCED <= set(review), (
    f"UNCOALESCED is a set of labels among {sorted(review)}, got {UNCOALESCED!r}")
print("visible test passed: fetched_per_used on the three recorded profiles; UNCOALESCED is a set "
      "of their labels")

# %% nbgrader={"grade": true, "grade_id": "test-review-coalesced-set", "points": 1}
# a copy wastes where its loads fetch at least twice the bytes it uses
waste = {label for label, k in review.items() if 32 * k.l1_load_sectors >= 2 * used}
why = {"A": "A's tiles are 128 columns wide, each row contiguous: a warp's loads touch only the "
            "sectors they use",
       "B": "B's neighbouring lanes read addresses a row apart: each fetches a sector of its own, "
            "which L2 then serves again to the lanes that need its other bytes",
       "C": "C moves 16 bytes a thread: 16 sectors are the fewest a 512-byte request can touch, "
            "and it reads what it needs"}
wrong = sorted(UNCOALESCED ^ waste)
assert not wrong, f"UNCOALESCED = {sorted(UNCOALESCED)} is not right: " + "; ".join(
    why[label] for label in wrong)
print("visible test passed: UNCOALESCED names the copies whose loads fetch bytes they do not use")

# %% [markdown]
# ## `num_warps`: how many threads share a row
#
# The same kernel on the graded shape with `num_warps` from 1 to 32, the most a program can have
# (1024 threads per block, CUDA C++ Programming Guide, "Technical Specifications per Compute
# Capability"). The dashed line is the copy bandwidth; beside each bar, the registers per thread
# and the 32-bit values spilled to local memory, as the compiled kernel reports them.

# %%
def compiled_stats(x, out, rows, warps):
    """Launch softmax_kernel once; return (registers, spilled 32-bit words) per thread."""
    n_rows, n_cols = x.shape
    kernel = softmax_kernel[(triton.cdiv(n_rows, rows),)](
        out, x, n_rows, n_cols, x.stride(0), out.stride(0),
        BLOCK=triton.next_power_of_2(n_cols), ROWS=rows, num_warps=warps)
    return getattr(kernel, "n_regs", None), getattr(kernel, "n_spills", None)


if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("03_softmax/num-warps"):
        moved = 2 * x_speed.nbytes
        copy = timing.bench(perf.copy_baseline(moved)).per_second(moved)
        rows, default_warps = launch_config(*x_speed.shape)
        rates = []
        for warps in tqdm(WARPS, desc="num_warps"):
            try:
                regs, spills = compiled_stats(x_speed, out_speed, rows, warps)
            except OutOfResources as refusal:  # more registers per thread than 1024 threads can have
                rates.append(0.0)
                print(f"num_warps={warps:<3} cannot launch: {refusal}")
                continue
            t = timing.bench(lambda warps=warps: softmax(x_speed, out_speed, num_warps=warps))
            rates.append(t.per_second(moved) / 1e9)
            print(f"num_warps={warps:<3} {rates[-1]:6.0f} GB/s  {regs} registers/thread, "
                  f"{spills} spilled, {x_speed.shape[1] / (32 * warps):.0f} elements/thread")
        plots.bars(dict(zip(map(str, WARPS), rates, strict=True)), size=(6, 3.5),
                   colors=["C1" if w == default_warps else "C0" for w in WARPS],
                   references={f"copy {copy / 1e9:.0f} GB/s": copy / 1e9},
                   xlabel="num_warps (orange: launch_config's choice)", ylabel="GB/s (read + write)",
                   title=f"softmax_kernel on {tuple(x_speed.shape)} float32, {DEVICE.name}")
else:
    print("On a GPU this cell times the kernel with num_warps from 1 to 32 and shows registers "
          "per thread for each.")
    recorded.show("03_softmax/num-warps")

# %% [markdown]
# ## Bandwidth against row length, and where rows stop fitting
#
# The sweep keeps the matrix at `SWEEP_ELEMENTS` float32 elements and varies the row length: short
# rows make many small programs, long rows few large ones. Each point is the useful traffic (one
# read and one write) over the time, so the eager version, which moves about four times that, can
# reach at most a quarter of the copy line (dashed, measured in the same run). A table of registers
# per thread follows the plot.

# %% [markdown]
# Why long rows stop fitting: the kernel holds the whole row in registers. An SM of compute
# capability 8.0 or 9.0 has 64K 32-bit registers (256 KiB); a thread block may use at most 64K of
# them and a thread at most 255 (CUDA C++ Programming Guide, "Technical Specifications per Compute
# Capability"). A float32 row of 32768 elements is 128 KiB, half the register file, so with its
# temporaries one such program fills an SM and nothing overlaps its loads with another program's
# reductions. At 65536 elements the row is the whole register file: the compiler spills to local
# memory, which lives in device memory. Shared memory (at most 227 KB per block at compute
# capability 9.0, same table) would only postpone the limit. Notebook 06 removes it with an
# *online* softmax that streams the row in chunks.

# %%
if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("03_softmax/row-length-sweep"):
        moved = 2 * SWEEP_ELEMENTS * 4
        copy = timing.bench(perf.copy_baseline(moved)).per_second(moved)
        curves = {"softmax_kernel (yours)": [], "torch.softmax": [], "eager (5 operations)": []}
        stats = []
        for n_cols in tqdm(ROW_LENGTHS, desc="row length"):
            x = torch.randn(SWEEP_ELEMENTS // n_cols, n_cols, device="cuda")
            out = torch.empty_like(x)
            rows, warps = launch_config(*x.shape)
            stats.append((n_cols, rows, warps, *compiled_stats(x, out, rows, warps)))
            runs = {"softmax_kernel (yours)": lambda x=x, out=out: softmax(x, out),
                    "torch.softmax": lambda x=x: torch.softmax(x, dim=1),
                    "eager (5 operations)": lambda x=x: softmax_eager(x)}
            for name, fn in runs.items():
                curves[name].append(timing.bench(fn).per_second(2 * x.nbytes) / 1e9)
            del x, out
        plots.curves(ROW_LENGTHS, curves, references={f"copy {copy / 1e9:.0f} GB/s": copy / 1e9},
                     xlabel="row length N (float32 elements; the matrix holds 2**26 of them)",
                     ylabel="GB/s (one read + one write of the matrix)",
                     title=f"Softmax bandwidth against row length on {DEVICE.name}")
        print(f"{'N':>6} {'row KiB':>8} {'ROWS':>5} {'warps':>6} {'regs/thread':>12} {'spilled':>8}")
        for n_cols, rows, warps, regs, spills in stats:
            print(f"{n_cols:>6} {4 * n_cols / 1024:>8.1f} {rows:>5} {warps:>6} {regs!s:>12} "
                  f"{spills!s:>8}")
else:
    print("On a GPU this cell sweeps the row length from 128 to 65536 and plots your kernel, "
          "torch.softmax and the eager version against the copy bandwidth.")
    recorded.show("03_softmax/row-length-sweep")

# %% [markdown]
# Read the plot beside the table. Where does your kernel come closest to the copy line, and how
# does it compare with `torch.softmax` there? Where it falls away at long rows, do the registers
# per thread near the limits above, or does the spill column turn non-zero?
#
# ## Summary
#
# - Eager softmax reads the matrix five times and writes it three times; one fused pass reads and
#   writes it once, up to four times as fast where every pass is memory bound.
# - One program per row (or per few short rows) keeps the row on chip; `tl.max` and `tl.sum`
#   along axis 1 reduce it without touching device memory.
# - Subtracting the row's maximum keeps every exponent at most 0: no overflow, same result.
#   Accumulate in float32, store in the input's dtype.
# - Rows of any length use `BLOCK = next_power_of_2(N)`; masked lanes hold `-inf`, the one value
#   that changes neither the max nor the sum.
# - `-inf` entries give exactly 0, an all-`-inf` row NaN, as in `torch.softmax`.
# - `num_warps` and rows per program set how much each thread holds and how many loads are in
#   flight. A row too long for one program's registers spills; notebook 06 streams it instead.

# %% [markdown]
# ## Further exercises
#
# 1. Run the row-length sweep with `rows_per_program=1` forced. For which row lengths does packing
#    rows matter, and why?
# 2. Time the graded shape with 4001 columns instead of 4000. Triton compiles a separate version of
#    a kernel when an integer argument is a multiple of 16 (`triton.jit`'s
#    `do_not_specialize_on_alignment` turns this off), which lets it prove rows start aligned and
#    use wide loads. Does the bandwidth change?
# 3. Write a *persistent* version: launch a few programs per SM
#    (`torch.cuda.get_device_properties(0).multi_processor_count`) and let each loop with
#    `for row in range(pid, n_rows, tl.num_programs(0))`. Where does it help?
# 4. Write `log_softmax` (`x - m - log(sum)`) in the same kernel. Which special rows behave
#    differently?
# 5. Split a row of 65536 float32 elements between two programs: what must they exchange to finish
#    the softmax? Notebook 06 answers it.
