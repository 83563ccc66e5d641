# %% [markdown]
# # 02 · First kernels: blocks, masks, bandwidth, fusion
#
# *Reading time: about 12 minutes.*
#
# Most operations in a neural network (an addition, an activation, a scale) do almost no
# arithmetic per byte, so memory traffic sets their speed: how many bytes travel between the GPU's
# DRAM (HBM) and its cores, and how much of each transfer is used. This notebook takes 00's kernel
# model apart and measures it: what one program sees, why masks exist, how close a plain kernel
# comes to the memory system's limit, what happens when neighbouring threads stop reading
# neighbouring addresses, and how fusing a chain of operations removes whole passes over memory.
#
# **You will learn:** how a grid of programs covers a tensor; to write a masked kernel that is right
# at every size; to measure bandwidth against a copy timed in the same run, and what the block size
# does to it; why coalesced access matters, in 32-byte transactions; and to fuse an eager chain
# into one kernel and measure what that buys; to read what the GPU's hardware counters (Nsight
# Compute) say about each of these, and to predict them.

# %%
from grader.runtime import device

DEVICE = device.setup()

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from tqdm.auto import tqdm

from grader.runtime import checks, perf, plots, profile, recorded, results, timing

print(f"Kernels run on {DEVICE.describe()}; tensors for them live on '{DEVICE.torch_device}'.")

# %% tags=["parameters"]
# You may change these while you work; grading restores this cell as released.
# Sizes adapt to the mode: the interpreter executes every program in Python, so it gets small ones.
ADD_SIZES = DEVICE.pick(gpu=[1, 17, 1000, 1024, 1025, 100_003, 10_000_019],
                        interpreter=[1, 17, 1024, 1025, 20_011])
FUSED_SHAPES = DEVICE.pick(gpu=[(1, 1), (3, 1000), (33, 513), (1000, 3001), (2048, 8191)],
                           interpreter=[(1, 1), (3, 1000), (33, 513), (70, 129)])
BENCH_ELEMENTS = 1 << 26  # 64 Mi elements: 256 MiB per float32 tensor, far beyond the L2 cache
FUSED_BENCH_SHAPE = (8192, 8192)  # 256 MiB of float32 in, 256 MiB out
FUSED_ROW_SHAPE = (1, 1 << 24)  # one row: the bias is as large as x
BLOCK_SWEEP = [64, 128, 256, 512, 1024, 2048, 4096, 8192]
STRIDES = [1, 2, 4, 8, 16, 32]
STRIDED_ELEMENTS = 1 << 24  # elements copied in the coalescing experiment, at every stride
RUN_BENCHMARKS = True

# %% [markdown]
# ## Programs, blocks, pointers and masks
#
# A launch `kernel[grid](...)` starts one **program** per grid point: a 1-D grid `(P,)` starts `P`
# programs numbered by `tl.program_id(0)` (grids have up to three axes). Programs are independent
# and run in no promised order: many at once on a GPU, each one thread block of `num_warps` warps
# of 32 threads (4 unless the launch says otherwise; see `triton.Config`), and one after another in
# the interpreter.
#
# Inside a program, code works on **blocks**: `tl.arange(0, BLOCK)` is `0, 1, ..., BLOCK-1`, and
# arithmetic on it is elementwise. Its length must be a power of two known at compile time, which
# `BLOCK: tl.constexpr` declares, so the compiler can assign elements to threads. Each value of a
# `constexpr` compiles its own kernel; a plain integer such as `n` is a run-time argument, so one
# kernel serves every size.

# %% [markdown]
# A tensor argument arrives as a **pointer** to its first element, typed by its dtype. Adding an
# integer moves it by that many *elements*, not bytes: `x_ptr + offsets` is a block of addresses
# and `tl.load` reads them all. Strides count elements too.
#
# A **mask** switches lanes off: `tl.load(ptrs, mask=m, other=0.0)` reads nothing where `m` is
# false and yields `other` there; `tl.store(ptrs, v, mask=m)` writes nothing there. The last
# program's block usually sticks out past the tensor's end; unmasked, it reads and writes memory
# that belongs to something else.
#
# The kernel below stores, for each element, the program and lane that wrote it. The outputs hold
# 24 elements set to -1, and the launch says `n = 20`: watch the last four.

# %%
@triton.jit
def whoami_kernel(
    # pointers
    program_ptr,  # output: the program that wrote each element, (n,) int32
    lane_ptr,  # output: the lane within that program, (n,) int32
    # sizes
    n,  # number of elements to write
    # compile-time constants
    BLOCK: tl.constexpr,  # elements per program
):
    pid = tl.program_id(axis=0)
    lanes = tl.arange(0, BLOCK)  # (BLOCK,)
    offsets = pid * BLOCK + lanes  # (BLOCK,)
    mask = offsets < n  # (BLOCK,)
    tl.store(program_ptr + offsets, lanes * 0 + pid, mask=mask)
    tl.store(lane_ptr + offsets, lanes, mask=mask)


n_demo, block_demo = 20, 8
programs = torch.full((24,), -1, dtype=torch.int32, device=DEVICE.torch_device)
lanes = torch.full_like(programs, -1)
whoami_kernel[(triton.cdiv(n_demo, block_demo),)](programs, lanes, n_demo, BLOCK=block_demo)
print(f"grid = cdiv({n_demo}, {block_demo}) = {triton.cdiv(n_demo, block_demo)} programs")
for name, row in (("element", range(24)), ("program", programs.tolist()), ("lane", lanes.tolist())):
    print(f"{name:>8}: " + " ".join(f"{v:2d}" for v in row))

try:
    whoami_kernel[(4,)](programs, lanes, n_demo, BLOCK=6)
except Exception as refusal:  # the interpreter and the compiler word it alike
    lines = str(refusal).splitlines() or [type(refusal).__name__]
    print("\nBLOCK=6 is refused: " + next((s for s in lines if "power of 2" in s), lines[-1]))

# %% [markdown]
# ## Vector add, correct at every size
#
# The reference is PyTorch's `x + y`: `2n` elements read, `n` written, one addition each, so only
# memory traffic can make it slow.
#
# A kernel that writes past the end of `out` still leaves `out` right, so how does a grader see a
# missing mask? `checks.check` puts every output in the middle of a longer buffer whose ends hold
# the grader's NaN poison (**guard bands**): a guard element that lost its poison was written by a
# lane that should have been masked. Inputs sit at the front of longer random buffers, so a lane
# that loads past the end reads plausible numbers, as on a GPU, instead of failing loudly.

# %%
def add_reference(x, y):  # reads 2n elements, writes n
    return x + y


GUARD = 8192  # random elements after each test input
LOW = [torch.float16] + ([torch.bfloat16] if DEVICE.supports("bf16") else [])  # tests' 16-bit dtypes


def guarded_randn(shape, gen, dtype, guard=GUARD, scale=1.0):
    """Random values of `shape`, at the front of a longer random buffer."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    numel = math.prod(shape)
    buffer = checks.randn(numel + guard, gen=gen, dtype=dtype, scale=scale)
    return buffer[:numel].view(shape)


def add_inputs(n, dtype=torch.float32):
    """Fresh inputs for each trial: x and y of n elements, each followed by random spare data."""
    return lambda gen: (guarded_randn(n, gen, dtype), guarded_randn(n, gen, dtype))


# %% [markdown]
# ### Exercise 1 · the add kernel (3 points)
#
# Write the whole body this time: which elements does this program own, which of them exist, and
# what must the loads and the store do with the others? Nothing may depend on `n` being a multiple
# of `BLOCK`.
#
# The visible test runs 2500 elements with `BLOCK = 1024`: three programs, the last with 572 lanes
# past the end; float32, then float16. Fresh inputs, two trials, `out` and its guard bands
# poisoned, a float64 reference; `kernels=["add_kernel"]` requires `add_kernel` to be launched on
# `x` and `y` and to write every element of `out` itself.

# %% nbgrader={"grade_id": "add-kernel", "solution": true}
@triton.jit
def add_kernel(
    # pointers
    x_ptr,  # first input, (n,)
    y_ptr,  # second input, (n,)
    out_ptr,  # output, (n,)
    # sizes
    n,  # number of elements
    # compile-time constants
    BLOCK: tl.constexpr,  # elements per program, a power of two
):
    ### BEGIN SOLUTION
    # -- which elements this program owns
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,)
    mask = offsets < n  # (BLOCK,), False past the end
    # -- load, add, store: reads 2n elements, writes n
    x = tl.load(x_ptr + offsets, mask=mask)  # (BLOCK,)
    y = tl.load(y_ptr + offsets, mask=mask)  # (BLOCK,)
    tl.store(out_ptr + offsets, x + y, mask=mask)
    ### END SOLUTION


# %%
def add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """out = x + y elementwise, computed by add_kernel with `block` elements per program."""
    assert x.shape == y.shape == out.shape, "x, y and out must have one shape"
    assert x.is_contiguous() and y.is_contiguous() and out.is_contiguous(), (
        "x, y and out must be contiguous")
    n = x.numel()
    add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    return out


# %% nbgrader={"grade": true, "grade_id": "test-add-visible", "points": 1}
for dtype in [torch.float32, *LOW]:
    checks.check(add, add_reference, add_inputs(2500, dtype), kernels=["add_kernel"])
print(f"visible test passed: 2500 elements (3 programs), float32 and {[str(d)[6:] for d in LOW]}, "
      "written by add_kernel, nothing past the end")

# %% nbgrader={"grade": true, "grade_id": "test-add-hidden", "points": 2}
# Hidden tests: sizes from 1 element to large primes, float32 and float16 (and bfloat16 on a GPU),
# other block sizes. One element here; the hidden tests follow.
checks.check(add, add_reference, add_inputs(1), kernels=["add_kernel"])
### BEGIN HIDDEN TESTS
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE.supports("bf16") else [])
for n in ADD_SIZES:
    for dtype in DTYPES:
        checks.check(add, add_reference, add_inputs(n, dtype), kernels=["add_kernel"])
for block in (128, 4096):  # the kernel must not depend on one block size
    checks.check(lambda x, y, out, block=block: add(x, y, out, block), add_reference,
                 add_inputs(3 * block + 1), kernels=["add_kernel"])
print(f"hidden tests passed: sizes {ADD_SIZES}, dtypes {[str(d)[6:] for d in DTYPES]}")
### END HIDDEN TESTS

# %% [markdown]
# ## How close to the limit?
#
# An add of `n` float32 elements moves `3 * 4n` bytes. The yardstick is a device-to-device copy of
# as many bytes timed in the same run (`perf.copy_baseline`): no arithmetic, as close to the memory
# system's limit as ordinary code gets. A datasheet peak (3.35 TB/s for an H100 SXM, NVIDIA H100
# Tensor Core GPU datasheet) is not promised to any code; the copy is a rate this device has just
# sustained. The cell prints both and their ratio, and records your time for 08's closing roofline.

# %%
if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("02_first_kernels/add-vs-copy"):
        x = torch.randn(BENCH_ELEMENTS, device="cuda")
        y = torch.randn_like(x)
        out = torch.empty_like(x)
        moved = 3 * x.nbytes  # reads x and y, writes out
        add_vs_copy = perf.compare(lambda: add(x, y, out), perf.copy_baseline(moved),
                                   names=("add", "copy of the same bytes"))
        print(add_vs_copy)
        print(f"add: {add_vs_copy.candidate.per_second(moved) / 1e9:.0f} GB/s; "
              f"copy: {add_vs_copy.baseline.per_second(moved) / 1e9:.0f} GB/s; "
              f"the add runs at {add_vs_copy.speedup:.0%} of the copy ceiling")
        results.record("02_first_kernels", "vector add", flops=x.numel(), bytes_moved=moved,
                       seconds=add_vs_copy.candidate.median_ms * 1e-3, precision="fp32")
else:
    print("On a GPU this cell times the add against a copy of the same bytes and prints the "
          "fraction of the copy's bandwidth it reaches; the interpreter cannot time anything.")
    recorded.show("02_first_kernels/add-vs-copy")

# %% [markdown]
# ### What the block size does
#
# `BLOCK` cuts the work into `n / BLOCK` programs, each spread over 4 warps (128 threads). Two
# forces pull apart:
#
# - **Small blocks** give a program little to do. Each pays fixed costs (scheduling, offsets), and
#   an SM holds a limited number of resident blocks (32 at compute capability 9.0: CUDA C++
#   Programming Guide, *Compute Capabilities*), so small blocks cap the bytes in flight, and
#   bandwidth needs many (bytes in flight = bandwidth x latency, Little's law). Under 128
#   elements, some threads idle.
# - **Large blocks** give each thread many elements: more registers per thread, fewer programs per
#   SM and, at the extreme, spills to memory.
#
# The sweep times the add at each block size on 64 Mi elements; the dashed line is the copy.

# %%
if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("02_first_kernels/block-sweep"):
        copy_gbs = timing.bench(perf.copy_baseline(moved)).per_second(moved) / 1e9
        sweep = {}
        for block in tqdm(BLOCK_SWEEP, desc="block sizes"):
            add(x, y, out, block)  # compile outside the timed region
            sweep[block] = timing.bench(lambda block=block: add(x, y, out, block)).per_second(moved) / 1e9
        print(f"{'BLOCK':>6} {'programs':>9} {'GB/s':>7} {'of copy':>8}")
        for block, gbs in sweep.items():
            print(f"{block:6d} {triton.cdiv(x.numel(), block):9d} {gbs:7.0f} {gbs / copy_gbs:8.0%}")
        plots.curves(list(sweep), {"add (your kernel)": list(sweep.values())},
                     references={"copy of the same bytes": copy_gbs}, from_zero=True,
                     xlabel="BLOCK (elements per program)", ylabel="GB/s (bytes read + written)",
                     title=f"Vector add, {x.numel() >> 20} Mi float32 elements, on {DEVICE.name}")
else:
    print("The block-size sweep needs a GPU: in the interpreter, programs run one after another "
          "in Python, so BLOCK changes only how long this notebook takes.")
    recorded.show("02_first_kernels/block-sweep")

# %% [markdown]
# Read the curve from the left: where does it reach the copy line, and does it stay there? Where it
# flattens, blocks keep enough bytes in flight; larger ones stop helping. A kernel on the copy line
# is done as far as memory goes: only moving fewer bytes makes it faster.
#
# ## Coalescing: a warp's accesses, in 32-byte sectors
#
# The 32 threads of a warp execute a load together, and the hardware combines (*coalesces*) their
# addresses into as few transactions as it can: from compute capability 6.0, as many as there are
# **32-byte** segments needed to serve the warp (*CUDA C++ Best Practices Guide*, *Coalesced Access
# to Global Memory*), naturally aligned (*CUDA C++ Programming Guide*, *Device Memory Accesses*).
# A warp loading float32:
#
# | lanes read | bytes used | 32-byte sectors | fetched per byte used |
# |---|---|---|---|
# | consecutive elements | 128 | 4 | 1 |
# | every 2nd | 128 | 8 | 2 |
# | every 4th | 128 | 16 | 4 |
# | every 8th or sparser | 128 | 32 | 8 |
#
# Reading a column of a row-major matrix is such a strided read. The experiment copies `n` float32
# elements reading at stride `S` (`out[i] = x[i * S]`), writing contiguously, so the sectors predict
# a time ratio to the plain copy of `(min(S, 8) + 1) / 2`.

# %%
@triton.jit
def strided_copy_kernel(
    # pointers
    x_ptr,  # input, read at x[i * stride]
    out_ptr,  # output, (n,) contiguous
    # sizes and strides
    n,  # number of elements to copy
    stride,  # distance between consecutive reads, in elements
    # compile-time constants
    BLOCK: tl.constexpr,  # elements per program
):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,)
    mask = offsets < n
    x = tl.load(x_ptr + offsets * stride, mask=mask)  # (BLOCK,) neighbouring lanes stride apart
    tl.store(out_ptr + offsets, x, mask=mask)  # neighbouring lanes 1 element apart


def strided_copy(x, out, stride, block=1024):
    """out[i] = x[i * stride] for i < out.numel(); reads n, writes n elements."""
    n = out.numel()
    assert x.is_contiguous() and x.numel() >= (n - 1) * stride + 1
    strided_copy_kernel[(triton.cdiv(n, block),)](x, out, n, stride, BLOCK=block)
    return out


def strided_problem(n, stride):
    """What profile.each calls in the profiled process: the inputs, and the call to profile."""
    x = torch.randn(n * stride, device="cuda")
    out = torch.empty(n, device="cuda")
    return lambda: strided_copy(x, out, stride)


PROFILED_STRIDES = [1, 2, 8, 32]
# why this machine profiles nothing (no GPU, no Nsight Compute), or None where it can
NOT_PROFILED = profile.unavailable() or (None if RUN_BENCHMARKS else "RUN_BENCHMARKS is off")

# the kernel reads what we think it reads, in both modes
source_demo = torch.arange(300, dtype=torch.float32, device=DEVICE.torch_device)
for s in (1, 3, 8):
    copied = strided_copy(source_demo, torch.empty(37, device=DEVICE.torch_device), s)
    assert torch.equal(copied, source_demo[::s][:37]), f"stride {s}"
print("strided_copy reads x[0], x[S], x[2S], ... for strides 1, 3 and 8")

# %%
if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("02_first_kernels/strided-copy"):
        n_strided = STRIDED_ELEMENTS
        source = torch.randn(n_strided * max(STRIDES), device="cuda")
        strided_out = torch.empty(n_strided, device="cuda")
        useful = 2 * strided_out.nbytes  # bytes the copy needs: n read, n written
        strided_ms = {}
        for s in tqdm(STRIDES, desc="strides"):
            strided_copy(source, strided_out, s)  # compile outside the timed region
            strided_ms[s] = timing.bench(lambda s=s: strided_copy(source, strided_out, s)).median_ms
        predicted = {s: (min(s, 8) + 1) / 2 for s in STRIDES}
        measured = {s: strided_ms[s] / strided_ms[1] for s in STRIDES}
        print(f"{'stride':>6} {'useful GB/s':>12} {'time / stride 1':>16} {'sector model':>13}")
        for s in STRIDES:
            gbs = useful / (strided_ms[s] * 1e-3) / 1e9
            print(f"{s:6d} {gbs:12.0f} {measured[s]:16.2f} {predicted[s]:13.2f}")
        model = "32-byte sector model, (min(S, 8) + 1) / 2"
        plots.curves(STRIDES, {"measured": list(measured.values()), model: list(predicted.values())},
                     dashed=[model], xlabel="read stride S (elements)",
                     ylabel="time relative to the contiguous copy",
                     title=f"Copying {n_strided >> 20} Mi float32 elements read at stride S, "
                           f"{DEVICE.name}")
        del source
        if NOT_PROFILED is None:  # the counters, every stride in one process under the profiler
            strided_profiles = profile.each({
                f"stride {s}": profile.Call(strided_problem, ["strided_copy_kernel"],
                                            {"n": n_strided, "stride": s})
                for s in PROFILED_STRIDES})
            profile.compare(strided_profiles, columns=("duration", "l1_load", "dram_read", "l2_hit"),
                            minimum_read=dict.fromkeys(strided_profiles, 4 * n_strided))
        else:
            print(f"Not profiled here: {NOT_PROFILED}.")
else:
    print("On a GPU this cell times the strided copy for strides "
          f"{STRIDES}, plots the slowdown against the 32-byte sector model and profiles strides "
          f"{PROFILED_STRIDES}.")
    recorded.show("02_first_kernels/strided-copy")

# %% [markdown]
# The model counts sectors only: above it, strided reads cost more than their sectors' bytes;
# below it, part of the traffic was hidden (a cache, or time spent elsewhere). Either way,
# **neighbouring lanes should touch neighbouring addresses**.
#
# The table under the plot is what the GPU counted (Nsight Compute; counts do not drift between
# runs). **L1 sectors/load**: the fewest a warp's load can touch is its bytes over 32; Triton
# loads contiguous float32 16 bytes a thread, so 16 is perfect at stride 1, while a strided read
# moves 4 bytes a thread (4 sectors at best). **read / minimum**: DRAM bytes read per byte needed;
# past stride 8 it exceeds the sector model's 8, as DRAM moves more than a sector at a time.
#
# In Triton you do not assign lanes to threads: the compiler lays each block out, putting
# consecutive elements along the axis it can show to be contiguous in consecutive lanes, with
# vector loads of up to 16 bytes per thread when it can also show alignment. Your part is to give
# it blocks whose contiguous axis is long: for a row-major 2-D tensor, tiles wide along the rows,
# with `tl.arange(0, BLOCK_N)` on the pointer block's last axis.

# %% [markdown]
# ## Fusion: one pass instead of three
#
# A piece of a transformer's MLP: `y = gelu(x + bias) * scale`, with `x` of shape `(M, N)`, `bias`
# of shape `(N,)` (broadcast over the rows) and a number `scale`. In PyTorch each operation is its
# own kernel, reading its input from memory and writing its result back:
#
# | eager step | reads | writes | full-tensor passes |
# |---|---|---|---|
# | `t = x + bias` | `x`, `bias` | `t` | 2 |
# | `g = gelu(t)` | `t` | `g` | 2 |
# | `y = g * scale` | `g` | `y` | 2 |
# | **eager, 3 kernels** | | | **6** |
# | **fused, 1 kernel** | `x`, `bias` | `y` | **2** |
#
# (`bias` is `1/M` of a pass.) At equal bandwidth, the fused kernel takes a third of the chain's
# time; the measurement says how much of that survives.
#
# **Which GELU.** GELU is `x * Phi(x)`, `Phi` the standard normal CDF (Hendrycks and Gimpel,
# arXiv:1606.08415); `F.gelu(x, approximate="tanh")` computes the paper's tanh approximation,
# `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))`. Triton's core language has no
# `tanh`, but `0.5 * (1 + tanh(u)) = sigmoid(2u)`, and `tl.sigmoid` runs in the interpreter too.
# The cell checks in float64 that the two forms agree.

# %%
def bias_gelu_scale_reference(x, bias, scale):  # eager: 3 kernels, 6 passes over an (M, N) tensor
    t = x + bias  # reads M*N + N, writes M*N
    g = F.gelu(t, approximate="tanh")  # reads M*N, writes M*N
    return g * scale  # reads M*N, writes M*N


z64 = torch.linspace(-12, 12, 100_001, dtype=torch.float64)
u64 = math.sqrt(2 / math.pi) * (z64 + 0.044715 * z64**3)
as_sigmoid = z64 * torch.sigmoid(2 * u64)
difference = (as_sigmoid - F.gelu(z64, approximate="tanh")).abs().max().item()
print(f"z * sigmoid(2u) vs torch's tanh-form GELU on [-12, 12], float64: "
      f"max |difference| = {difference:.1e}")

# %% [markdown]
# ### Exercise 2 · the fused bias + GELU + scale kernel (6 points)
#
# The given launcher starts a 2-D grid: axis 0 over blocks of `BLOCK_M` rows, axis 1 over blocks of
# `BLOCK_N` columns. Write the kernel's body:
#
# 1. This program's tile: its row and column offsets, and a `(BLOCK_M, BLOCK_N)` mask. How do you
#    combine a `(BLOCK_M,)` and a `(BLOCK_N,)` vector into a tile (think broadcasting)?
# 2. Where does element `(m, n)` of `x` live, given that columns are contiguous and rows are
#    `stride_xm` elements apart (not necessarily `N`)?
# 3. `bias` has one value per column: load its slice once and apply it to every row of the tile.
# 4. Compute `y = z * sigmoid(2u) * scale` with `z = x + bias` and
#    `u = sqrt(2/pi) * (z + 0.044715 * z**3)`, `sqrt(2/pi) = 0.7978845608028654`. Inputs may be
#    float16 and large: in which precision should this run, and in which dtype must `out` be
#    written?
# 5. Store with the mask.

# %% nbgrader={"grade_id": "fused-kernel", "solution": true}
@triton.jit
def bias_gelu_scale_kernel(
    # pointers
    x_ptr,  # input, (M, N), columns contiguous
    bias_ptr,  # bias, (N,)
    out_ptr,  # output, (M, N), columns contiguous
    # sizes
    M,  # rows
    N,  # columns
    # strides, in elements
    stride_xm,  # between rows of x
    stride_om,  # between rows of out
    # scalars
    scale,  # multiplies the result
    # compile-time constants
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_N: tl.constexpr,  # columns per program
):
    ### BEGIN SOLUTION
    # -- this program's tile
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    mask_n = offs_n < N  # (BLOCK_N,)
    mask = (offs_m[:, None] < M) & mask_n[None, :]  # (BLOCK_M, BLOCK_N)
    # -- load: reads M*N + N elements in all
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_n[None, :]  # (BLOCK_M, BLOCK_N)
    x = tl.load(x_ptrs, mask=mask).to(tl.float32)  # (BLOCK_M, BLOCK_N)
    bias = tl.load(bias_ptr + offs_n, mask=mask_n).to(tl.float32)  # (BLOCK_N,)
    # -- compute in float32: gelu_tanh(z) = z * sigmoid(2u)
    z = x + bias[None, :]  # (BLOCK_M, BLOCK_N)
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)  # (BLOCK_M, BLOCK_N)
    y = z * tl.sigmoid(2.0 * u) * scale  # (BLOCK_M, BLOCK_N)
    # -- store: writes M*N elements
    out_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]  # (BLOCK_M, BLOCK_N)
    tl.store(out_ptrs, y.to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def bias_gelu_scale(x, bias, scale, out, block_m=1, block_n=8192, num_warps=16):
    """out = gelu_tanh(x + bias) * scale for x (M, N), bias (N,), scale a float, in one kernel.
    The default tile is 8192 columns of one row per program, 16 warps: 16 elements per thread."""
    M, N = x.shape
    assert bias.shape == (N,) and out.shape == (M, N), "bias must be (N,) and out (M, N)"
    assert x.stride(1) == 1 and out.stride(1) == 1 and bias.is_contiguous()
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    bias_gelu_scale_kernel[grid](
        x, bias, out, M, N, x.stride(0), out.stride(0), scale, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=num_warps,
    )
    return out


# %% [markdown]
# The launcher's default tile is one row slice of 8192 elements run by 16 warps: 16 elements per
# thread, several 16-byte loads in flight each. Of the tiles the course's benchmarks time, it came
# closest to the copy on an H200: 0.963 of its bandwidth, against 0.941 for 4 × 1024 tiles with 4
# warps (the course's benchmark report of 2026-11-21, table "02 fused kernel: launcher tiles"). The
# hidden tests run your kernel with other tiles too.
#
# The tests draw `x` and `bias` from a normal distribution and `scale` from [0.25, 0.75), each
# input followed by random spare data, and check that `bias_gelu_scale_kernel` was launched on `x`
# and `bias` and wrote every element of `out` itself: computing the result with PyTorch in the
# launcher fails. The hidden tests: odd shapes from `(1, 1)` up, float32 and float16 (and bfloat16
# on a GPU), other tile shapes, rows further apart than `N` (a column slice of a wider tensor), and
# inputs a hundred times larger, where a careless formula overflows.

# %%
def fused_inputs(shape, dtype=torch.float32, x_scale=1.0, row_gap=0):
    """x (M, N) with rows N + row_gap elements apart, bias (N,), scale in [0.25, 0.75)."""
    M, N = shape
    spare = (M + 64) * (N + row_gap) + GUARD  # room for unmasked rows and columns to read

    def make(gen):
        x = guarded_randn((M, N + row_gap), gen, dtype, spare, scale=x_scale)[:, :N]
        bias = guarded_randn(N, gen, dtype, spare)
        scale = 0.25 + 0.5 * float(torch.rand((), generator=gen, device=gen.device))
        return x, bias, scale

    return make


def check_fused(shape, dtype=torch.float32, block=None, **input_options):
    """checks.check of bias_gelu_scale (output guarded) against the float64 reference."""
    if block is None:
        launch = bias_gelu_scale
    else:
        def launch(x, bias, scale, out):
            return bias_gelu_scale(x, bias, scale, out, block_m=block[0], block_n=block[1])
    checks.check(launch, bias_gelu_scale_reference, fused_inputs(shape, dtype, **input_options),
                 kernels=["bias_gelu_scale_kernel"])


# %% nbgrader={"grade": true, "grade_id": "test-fused-visible", "points": 1}
check_fused((37, 300))  # the launcher's tile: one row of 8192 columns per program
for dtype in LOW:
    check_fused((5, 300), dtype)
check_fused((21, 100), block=(8, 32), row_gap=5)  # 3 x 4 programs; rows 105 elements apart
check_fused((5, 300), x_scale=100.0)  # |x| up to a few hundred
print("visible tests passed: (37, 300) float32, low precision, 8 x 32 tiles over strided rows, "
      "large inputs")

# %% nbgrader={"grade": true, "grade_id": "test-fused-hidden", "points": 3}
check_fused((1, 1))  # one element; the hidden tests follow
### BEGIN HIDDEN TESTS
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE.supports("bf16") else [])
for shape in FUSED_SHAPES:
    for dtype in DTYPES:
        check_fused(shape, dtype)
for block in [(1, 64), (16, 32)]:  # the kernel must not depend on one tile shape
    check_fused((13, 129), block=block)
check_fused((33, 100), row_gap=7)  # rows 107 elements apart: use stride_xm, not N
for dtype in (torch.float32, torch.float16):
    check_fused((17, 300), dtype, x_scale=100.0)  # |x| up to a few hundred
print(f"hidden tests passed: shapes {FUSED_SHAPES}, dtypes {[str(d)[6:] for d in DTYPES]}, "
      "tile shapes, strided rows, large inputs")
### END HIDDEN TESTS

# %% [markdown]
# ### Speed (graded on a GPU)
#
# On an `(8192, 8192)` float32 tensor (256 MiB, several times an H100's 50 MB L2 per its
# datasheet, so every pass goes to HBM), two thresholds:
#
# - at least **2x** as fast as the eager chain (`bias_gelu_scale_reference`: 3 kernels, 6 passes;
#   counting bytes predicts 3x);
# - at least **80%** of the copy bandwidth, counting the ideal traffic: `x` and `bias` read once,
#   `y` written once. Where Nsight Compute can count, the bytes the kernel moves to and from DRAM
#   are graded beside it: at most 1.1x that ideal traffic. A count does not drift with the clocks.
#
# The inputs are drawn afresh before every timed call, and the output of the last call and of a
# few drawn at random is checked against the float64 reference for that call's inputs, so an
# output kept from an earlier call fails. A bandwidth above the copy's scores 0. A kernel making two
# passes where one would do reaches at best 50% of the copy and 6/4 = 1.5x the eager chain: short
# of both.

# %%
M_speed, N_speed = DEVICE.pick(gpu=FUSED_BENCH_SHAPE, interpreter=(8, 32))
x_speed = torch.randn(M_speed, N_speed, device=DEVICE.torch_device)
bias_speed = torch.randn(N_speed, device=DEVICE.torch_device)
scale_speed = 0.5
out_speed = torch.empty_like(x_speed)
ideal_bytes = x_speed.nbytes + bias_speed.nbytes + out_speed.nbytes


def fused_speed():
    return bias_gelu_scale(x_speed, bias_speed, scale_speed, out=out_speed)


def fused_problem(M, N, fused):
    """What profile.each calls: the fused kernel, or the eager chain, on (M, N) float32 inputs."""
    x = torch.randn(M, N, device="cuda")
    bias = torch.randn(N, device="cuda")
    out = torch.empty_like(x)
    if fused:
        return lambda: bias_gelu_scale(x, bias, 0.5, out)
    return lambda: bias_gelu_scale_reference(x, bias, 0.5)


def eager_speed():
    return bias_gelu_scale_reference(x_speed, bias_speed, scale_speed)


def verify_speed():
    expected = bias_gelu_scale_reference(x_speed.double(), bias_speed.double(), scale_speed)
    checks.compare(out_speed, expected, context="after a timed call")


def fused_case(*baselines, traffic=None):
    """The fused kernel on the speed tensors, timed against `baselines`."""
    return perf.Case(fused_speed, kernels=["bias_gelu_scale_kernel"], inputs=(x_speed, bias_speed),
                     out=out_speed, verify=verify_speed, baselines=baselines,
                     bytes_moved=ideal_bytes, traffic=traffic)


# %% nbgrader={"grade": true, "grade_id": "speed-fused-vs-eager", "points": 1}
perf.grade(fused_case(perf.Baseline("eager PyTorch, 3 kernels", eager_speed, at_least=2.0)),
           points=1)

# %% nbgrader={"grade": true, "grade_id": "speed-fused-bandwidth", "points": 1}
perf.grade(fused_case(perf.copy_bandwidth(ideal_bytes, at_least=0.8),
                      traffic=perf.Traffic(fused_problem, {"M": M_speed, "N": N_speed, "fused": True},
                                           fewest=ideal_bytes)),
           points=1)

# %% [markdown]
# ### Where the time goes
#
# The next cell times each eager step alone, beside a copy of one read and one write of the
# tensor, the chain and the fused kernel: if the accounting holds, each step costs about one copy,
# the chain about three, the fused kernel one. Then the profiler counts the DRAM bytes each read
# (the chain's three kernels, and yours), in a process apart from the notebook's.
#
# ### Exercise 3 · the bytes the profiler counts (2 points)
#
# The table under the bars (recorded on a GPU, the same on every machine) gives those bytes at the
# speed shape and for a single row of 16 Mi columns. Explain them with a count that holds at
# every shape: how many bytes must each **read** from DRAM for a float32 `x` of shape `(M, N)`,
# its `bias` and a Python float `scale`?
# Every eager kernel reads its inputs from memory (the profiler flushes the caches before each
# kernel). Bytes written are left out: lines still in L2 when a kernel ends are not counted. The
# visible test holds your counts against the profiler's; the hidden tests check them exactly on
# other shapes.

# %%
if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("02_first_kernels/fused-steps"):
        t_speed = x_speed + bias_speed
        g_speed = F.gelu(t_speed, approximate="tanh")
        steps = {
            "copy (1 read + 1 write)": perf.copy_baseline(2 * x_speed.nbytes),
            "eager: x + bias": lambda: x_speed + bias_speed,
            "eager: gelu": lambda: F.gelu(t_speed, approximate="tanh"),
            "eager: * scale": lambda: g_speed * scale_speed,
            "eager chain": eager_speed,
            "fused kernel": fused_speed,
        }
        ms = {name: timing.bench(fn).median_ms for name, fn in tqdm(steps.items(), desc="timing")}
        copy_ms = ms["copy (1 read + 1 write)"]
        print(f"{'':26} {'ms':>7} {'copies':>7}")
        for name, t in ms.items():
            print(f"{name:26} {t:7.3f} {t / copy_ms:7.2f}")
        print(f"fused vs eager: {ms['eager chain'] / ms['fused kernel']:.2f}x "
              "(counting passes predicts 3x)")
        plots.bars(ms, horizontal=True, colors=["gray", "C0", "C0", "C0", "C1", "C2"],
                   xlabel="milliseconds (median)",
                   title=f"bias + GELU + scale on {M_speed} x {N_speed} float32, {DEVICE.name}")
        # 12 FLOPs per element as the kernel is written (exp and division counted as one each)
        results.record("02_first_kernels", "bias+GELU+scale", flops=12 * x_speed.numel(),
                       bytes_moved=ideal_bytes, seconds=ms["fused kernel"] * 1e-3, precision="fp32")
        if NOT_PROFILED is None:
            calls = {}
            for (M, N), where in ((FUSED_BENCH_SHAPE, ""), (FUSED_ROW_SHAPE, ", one row")):
                calls[f"eager chain{where}"] = profile.Call(fused_problem, [],
                                                            {"M": M, "N": N, "fused": False})
                calls[f"fused kernel{where}"] = profile.Call(
                    fused_problem, ["bias_gelu_scale_kernel"], {"M": M, "N": N, "fused": True})
            profile.compare(profile.each(calls), columns=("duration", "dram_read", "dram_written"))
        else:
            print(f"Not profiled here: {NOT_PROFILED}.")
else:
    print("On a GPU this cell times each eager step, the eager chain and the fused kernel, and "
          "draws them as bars, then profiles the chain and the kernel; here there is nothing to "
          "time.")
    recorded.show("02_first_kernels/fused-steps")

# %% nbgrader={"grade_id": "fused-bytes", "solution": true}
def eager_dram_read(M: int, N: int) -> int:
    """Bytes the three eager kernels read from DRAM, for float32 x (M, N) and bias (N,)."""
    ### BEGIN SOLUTION
    return 4 * (M * N + N) + 4 * M * N + 4 * M * N  # x + bias, then gelu(t), then g * scale
    ### END SOLUTION


def fused_dram_read(M: int, N: int) -> int:
    """Bytes the fused kernel reads from DRAM, for float32 x (M, N) and bias (N,)."""
    ### BEGIN SOLUTION
    return 4 * (M * N + N)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-fused-bytes-visible", "points": 1}
counted = profile.recorded_profiles("02_first_kernels/fused-steps")
for shape, where in ((FUSED_BENCH_SHAPE, ""), (FUSED_ROW_SHAPE, ", one row")):
    for fn, label in ((fused_dram_read, "fused kernel"), (eager_dram_read, "eager chain")):
        read = profile.total(counted[label + where], "dram_bytes_read")
        checks.expect_count(fn, shape, read, unit="bytes", within=0.05,
                            counted_by=f"the profiler, for the {label}{where},")
print("visible test passed: both counts within 5% of what the profiler counted, on both shapes")

# %% nbgrader={"grade": true, "grade_id": "test-fused-bytes-hidden", "points": 1}
# a check you can run now; the exact counts on other shapes run when the notebook is graded
fewer = checks.call_graded(fused_dram_read, 64, 64) < checks.call_graded(eager_dram_read, 64, 64)
assert fewer, "the fused kernel reads less than the eager chain: count again"
### BEGIN HIDDEN TESTS
_WRITES = "that counts the bytes written too: the question is what is read"
_BIAS = "the bias is read too: N more elements"
_FP16 = "x is float32: 4 bytes an element"
_ONCE = "each eager step reads a full tensor: x + bias reads x, gelu reads t, * scale reads g"
for M, N in [(1, 1), (3, 1000), (8192, 8192), (1000, 3001)]:
    checks.expect_count(fused_dram_read, (M, N), 4 * (M * N + N), unit="bytes",
                        wrong={4 * (2 * M * N + N): _WRITES, 4 * M * N: _BIAS,
                               2 * (M * N + N): _FP16})
    checks.expect_count(eager_dram_read, (M, N), 4 * (3 * M * N + N), unit="bytes",
                        wrong={4 * (6 * M * N + N): _WRITES, 4 * (2 * M * N + N): _ONCE,
                               4 * (M * N + N): _ONCE, 12 * M * N: _BIAS,
                               2 * (3 * M * N + N): _FP16})
print("hidden tests passed: exact counts on four shapes")
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
#
# - A launch starts a grid of independent programs; each builds its offsets from `tl.program_id`
#   and `tl.arange(0, BLOCK)` (`BLOCK` a power-of-two `tl.constexpr`) and adds them to typed
#   pointers that count in elements.
# - Masks make a kernel right at every size; a guard band of poison after the output shows a store
#   that escaped its mask.
# - An elementwise kernel is judged against a copy of the same bytes timed in the same run; the
#   block size sets how many bytes each program keeps in flight.
# - A warp's accesses are served in 32-byte sectors: neighbouring lanes on neighbouring addresses
#   use every byte fetched; a stride of 8 or more float32 elements uses one byte in eight.
# - Eager PyTorch makes a pass over memory per operation; a fused kernel leaves one read and one
#   write, and the time follows the bytes. The profiler's DRAM counters confirm a count made
#   beforehand: every byte the exercise predicted, read.

# %% [markdown]
# ## Further exercises
#
# 1. Sweep `num_warps` (2, 8, 16) for the add at `BLOCK` 1024 and 4096. Which combinations stay on
#    the copy line, and why?
# 2. Write a transpose kernel, `out[j, i] = x[i, j]`, with square tiles, and time it on an 8192 x
#    8192 float32 tensor against a copy. Which side is strided, and does the sector model predict
#    the cost?
# 3. Time `torch.compile(bias_gelu_scale_reference)` on the speed-test tensors. How many kernels
#    does it launch (`torch.profiler`), and how does its time compare with yours?
# 4. Add a residual, `y = gelu(x + bias) * scale + r`: count the passes eager and fused, predict
#    the speedup, measure it.
# 5. In float16, eager PyTorch rounds `t` and `g` to float16 between kernels; the fused kernel keeps
#    float32. Compare each one's largest error against the float64 reference.
# 6. Write the exact GELU, `0.5 * z * (1 + erf(z / sqrt(2)))`, with `tl.math.erf`, and check it
#    against `F.gelu(x, approximate="none")` in float64. How far apart are the two GELUs, and is the
#    exact one slower?
