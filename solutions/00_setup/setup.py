# %% [markdown]
# # 00 · Setup
#
# *Reading time: about 9 minutes.*
#
# Every notebook runs in one of two places. On an NVIDIA GPU, your Triton kernels compile to
# machine code and are timed against PyTorch and the hardware's limits. On a laptop with no GPU,
# Triton's *interpreter* runs the same kernels as Python on the CPU: nothing can be timed, but
# every correctness test runs, so you can learn and debug anywhere. This notebook finds out which
# you have, shows how your work is graded, and has you write a first kernel.
#
# **You will learn:** how to read the course's device and version report; what the interpreter can
# and cannot tell you; how the grader checks a kernel and what its messages mean; and the anatomy
# of a Triton kernel: programs, blocks, offsets, masks, loads and stores.

# %% [markdown]
# ## Where your kernels run
#
# `device.setup()` must run before `import triton`: the interpreter is switched on by the
# environment variable `TRITON_INTERPRET=1`, which Triton reads as kernels are defined. With a
# CUDA GPU visible it chooses the GPU; otherwise the interpreter. Set `COURSE_MODE=interpreter`
# to force the interpreter on a GPU machine (useful for debugging: you can `print` inside a
# kernel), or `COURSE_MODE=gpu` to insist on the GPU.

# %%
from grader.runtime import device

DEVICE = device.setup()

import torch
import triton
import triton.language as tl

from grader.runtime import checks, doctor, perf, plots, recorded, timing

print(f"Kernels run on {DEVICE.describe()}; tensors for them live on '{DEVICE.torch_device}'.")

# %% tags=["parameters"]
# You may change these while you work; grading restores this cell as released.
# Sizes adapt to the mode: the interpreter executes every program in Python, so it gets small ones.
CHECK_SIZES = DEVICE.pick(gpu=[1, 17, 1024, 1025, 100_003, 10_000_019],
                          interpreter=[1, 17, 1024, 1025, 20_011])
BENCH_ELEMENTS = 1 << 26  # 64 Mi elements: 256 MiB in fp32, far larger than any L2 cache
RUN_BENCHMARKS = True

# %% [markdown]
# ## The doctor
#
# `python -m grader.runtime` (or the cell below) prints what the course needs to know about this
# machine: the mode, the GPU and its compute capability, library versions, what can be graded
# here, and any *known-bad combination* (versions or settings known to break kernels or grading)
# with what to do about it. Paste its output into any question you ask about the course.

# %%
report, findings = doctor.report()
print(report)

# %% [markdown]
# What each mode can do:
#
# | | GPU (sm_80 or newer) | interpreter (CPU) |
# |---|---|---|
# | run kernels | compiled to GPU code | executed as Python, one program after another |
# | correctness tests | yes, at full size | yes, at small sizes |
# | timing and speed grades | yes | no: a speed cell scores 0 and says why |
# | `print` inside a kernel | `tl.device_print` only | plain `print` works |
# | bfloat16 | yes | no |
#
# An older GPU (below sm_80) runs the correctness tests, but the course's speed thresholds are set
# for Ampere and newer, so it is not graded for speed.

# %% [markdown]
# ## How grading works
#
# Each exercise has a cell marked `# YOUR CODE HERE` with `raise NotImplementedError()` under it:
# replace both lines with your code. Test cells follow:
#
# - **visible tests**, which you can run as often as you like;
# - **hidden tests**, which show only a comment here and run at grading: more sizes, more dtypes,
#   awkward shapes;
# - **speed cells**, on a GPU only: your kernel is timed against a baseline *in the same run*, and
#   the threshold is a ratio ("at least 80% of the copy bandwidth measured just now"), never an
#   absolute time, so it means the same on every supported GPU.
#
# An exercise's heading states its points: the sum of its test and speed cells.
#
# On a laptop, the tests also compile your kernel for the GPU (sm_80 and sm_90) without running it
# there, so a kernel the GPU's compiler would refuse fails here too, as it would at grading.

# %% [markdown]
# **What grading runs.** The notebook as released, with the code of your answer cells and nothing
# else of yours. A given cell you edit runs as released; a cell you add does not run; files you
# hand in beside the notebook are not there. Try things out in cells of your own as much as you
# like, but put everything an answer needs inside the answer cell. The course's checks read your
# saved notebook while you work and warn (`HAND-IN CHECK: ...`) when an answer uses a name defined
# only in a cell that grading would not run; `handin.check()` (from `grader.runtime`) lists
# everything that will not run. The test cells themselves run in a process of the grader's: it
# calls your functions and kernels in your notebook's process, on inputs it draws, and checks
# what they return.

# %% [markdown]
# The correctness checks keep a wrong kernel from passing by luck:
#
# - **random inputs**, the same on every run of a visible test, so its verdict is too (a failure
#   prints the seed); at grading, the hidden tests draw fresh ones;
# - **poisoned outputs**: the output is filled with a NaN whose bit pattern no arithmetic produces,
#   so an element your kernel never wrote is found and reported;
# - **a float64 reference**, compared with **tolerances per dtype** (those of
#   `torch.testing.assert_close`, e.g. `rtol=1e-3` for float16, `1.3e-6` for float32);
# - **inputs must come back unchanged**; a failure names the first mismatches with their indices,
#   expected and actual values;
# - **your kernel must do the work**: with `kernels=["relu_kernel"]`, the check records every
#   Triton launch and compares the output before and after each launch of your kernel, which must
#   be given the real inputs and write every element of `out`. A launcher that computes the result
#   with PyTorch fails, whatever its values.

# %% [markdown]
# ## A first kernel: ReLU
#
# A Triton kernel is a function that many *programs* run at once. Each program gets an index,
# `tl.program_id(0)`, and handles one *block* of `BLOCK` consecutive elements. `BLOCK` is a
# `tl.constexpr`, known when the kernel compiles, so `tl.arange(0, BLOCK)` is a vector of fixed
# length the compiler can lay out across threads. Pointers are plain addresses: `x_ptr + offsets`
# is a vector of `BLOCK` addresses, and `tl.load` reads them all at once.
#
# The last block usually sticks out past the end of the tensor; a **mask** (`offsets < n`) turns
# those lanes off. The picture shows 3 programs of 8 lanes covering 20 elements: program 2's 4 grey
# lanes are masked.

# %% [markdown]
# ![3 programs of 8 lanes over 20 elements; the last 4 lanes masked off](figures/blocks.svg)
#
# *One program per block of `BLOCK` lanes; the mask switches off the lanes past `n`.*

# %% [markdown]
# The reference is PyTorch's own ReLU. Its memory traffic: it reads `n` elements and writes `n`.
# A ReLU does one comparison per element, so its speed is set by how fast memory moves, not by
# arithmetic; 01 makes that precise with the roofline.

# %%
def relu_reference(x):  # reads n elements, writes n
    return torch.relu(x)


# %% [markdown]
# ### Exercise 1 · the ReLU kernel (4 points)
#
# The offsets and mask are written for you. Load the block of `x`, compute `max(x, 0)`, and store
# it to `out`. Both memory operations take the mask: what would the load read past `n`, and what
# would the store overwrite there? Which elementwise function of `triton.language` computes
# `max(x, 0)` (look for a maximum, or a choice between two values by a condition)? The points: 3
# for correctness here, 1 for speed on a GPU, below.

# %% nbgrader={"grade_id": "relu-kernel", "solution": true}
@triton.jit
def relu_kernel(
    # pointers
    x_ptr,  # input, (n,)
    out_ptr,  # output, (n,)
    # sizes
    n,  # number of elements
    # compile-time constants
    BLOCK: tl.constexpr,  # elements per program
):
    # -- which elements this program owns
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,)
    mask = offsets < n  # (BLOCK,), False past the end
    # -- load, compute, store: reads n elements, writes n
    ### BEGIN SOLUTION
    # both masked: past n, the load would read memory that is not x's (on a GPU, an illegal
    # address or another tensor's data) and the store would overwrite memory that is not out's
    x = tl.load(x_ptr + offsets, mask=mask)  # (BLOCK,)
    y = tl.where(x > 0, x, 0.0)  # (BLOCK,)
    tl.store(out_ptr + offsets, y, mask=mask)
    ### END SOLUTION


# %% [markdown]
# The launcher is given. It asks for one program per block, `cdiv(n, BLOCK)` of them, and follows
# the course's convention for graded code: the caller passes the output tensor `out`, so the
# grader can poison it first.

# %%
def relu(x: torch.Tensor, out: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """out = max(x, 0) elementwise, computed by relu_kernel."""
    assert x.is_contiguous() and out.is_contiguous() and out.shape == x.shape, (
        "x and out must be contiguous and of one shape")
    n = x.numel()
    grid = (triton.cdiv(n, block),)
    relu_kernel[grid](x, out, n, BLOCK=block)
    return out


def relu_inputs(n, dtype=torch.float32):
    """A function the grader calls with a random generator, seeded anew for each trial."""
    return lambda gen: (checks.randn(n, gen=gen, dtype=dtype),)


# %% [markdown]
# ### Visible test
#
# `checks.check` calls `relu` on random inputs (two trials), with `out` poisoned, checks
# that `relu_kernel` wrote `out`, and compares the result with the float64 reference. 2500
# elements take three programs of 1024, the last one partly masked; then the same in float16.

# %% nbgrader={"grade": true, "grade_id": "test-relu-visible", "points": 1}
LOW = [torch.float16] + ([torch.bfloat16] if DEVICE.supports("bf16") else [])
for dtype in [torch.float32, *LOW]:
    checks.check(relu, relu_reference, relu_inputs(2500, dtype), kernels=["relu_kernel"])
print(f"visible test passed: 2500 elements (3 programs), float32 and {[str(d)[6:] for d in LOW]}, "
      "written by relu_kernel")

# %% [markdown]
# ### Hidden tests
#
# At grading, this cell checks sizes of 1 element, a little over one block, and large primes, in
# float32 and float16 (and bfloat16 on a GPU).

# %% nbgrader={"grade": true, "grade_id": "test-relu-hidden", "points": 2}
# one element; the hidden tests follow
checks.check(relu, relu_reference, relu_inputs(1), kernels=["relu_kernel"])
### BEGIN HIDDEN TESTS
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE.supports("bf16") else [])
for n in CHECK_SIZES:
    for dtype in DTYPES:
        checks.check(relu, relu_reference, relu_inputs(n, dtype), kernels=["relu_kernel"])
for block in (128, 256):  # the kernel must not depend on one block size
    checks.check(lambda x, out, block=block: relu(x, out, block), relu_reference,
                 relu_inputs(3 * block + 1), kernels=["relu_kernel"])
print(f"hidden tests passed: sizes {CHECK_SIZES}, dtypes {[str(d)[6:] for d in DTYPES]}")
### END HIDDEN TESTS

# %% [markdown]
# ## What the grader says when a kernel is wrong
#
# Reading a failure well is half of debugging. Here are three broken kernels and the grader's
# verdict on each: one that still holds the stub, one that computes the ReLU but never stores it,
# and a correct kernel launched on too small a grid.

# %%
@triton.jit
def relu_kernel_stub(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # YOUR CODE HERE
    raise NotImplementedError()


@triton.jit
def relu_kernel_no_store(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    y = tl.where(x > 0, x, 0.0)  # computed, never stored  # noqa: F841


def launcher(kernel, programs=None):
    def launch(x, out, block=256):
        grid = (programs or triton.cdiv(x.numel(), block),)
        kernel[grid](x, out, x.numel(), BLOCK=block)
    launch.__name__ = kernel.__name__
    return launch


broken = {
    "stub left in the kernel": launcher(relu_kernel_stub),
    "never stores": launcher(relu_kernel_no_store),
    "grid of one program": launcher(relu_kernel, programs=1),
}
for what, candidate in broken.items():
    try:
        checks.check(candidate, relu_reference, relu_inputs(1000))
        print(f"{what}: passed?!")
    except AssertionError as failure:
        print(f"--- {what} ---\n{failure}\n")

# %% [markdown]
# ## Measuring a kernel
#
# The course times everything one way (`grader.runtime.timing.bench`), as Triton's `do_bench`
# does: it warms the kernel up, flushes the L2 cache before each call so every call reads device
# memory, and times calls with CUDA events. `bench` repeats this in rounds until two successive
# medians agree within 1%, then reports the median and the spread (interquartile range over
# median). Each round also times a batch of calls by the host's clock, with the GPU synchronized
# around it: work the events cannot see (on another stream, say) shows as a disagreement, which
# the speed cells flag. Below, one kernel is timed twice; the medians should agree within a few
# percent. On the interpreter, timing refuses and says why.

# %%
if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("00_setup/relu-twice"):
        x = torch.randn(BENCH_ELEMENTS, device="cuda")
        out = torch.empty_like(x)
        first = timing.bench(lambda: relu(x, out))
        second = timing.bench(lambda: relu(x, out))
        drift = abs(first.median_ms - second.median_ms) / first.median_ms
        print(f"first:  {first}\nsecond: {second}\nthe two medians differ by {drift:.2%}")
        print(f"relu moves {2 * x.nbytes / 2**20:.0f} MiB per call: "
              f"{first.per_second(2 * x.nbytes) / 1e9:.0f} GB/s")
elif DEVICE.supports("timing"):
    print("RUN_BENCHMARKS is off: nothing timed.")
    recorded.show("00_setup/relu-twice")
else:
    try:
        timing.bench(lambda: relu(torch.zeros(8), torch.empty(8)))
    except timing.TimingUnavailable as refusal:
        print(refusal)
    recorded.show("00_setup/relu-twice")

# %% [markdown]
# How fast is fast? For a kernel that only moves memory, the yardstick is a plain device-to-device
# copy of the same number of bytes, measured now on this GPU. The plot sweeps the size: small
# tensors are dominated by the fixed cost of a launch, large ones approach the memory system's
# limit.

# %%
if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("00_setup/bandwidth-sweep"):
        sizes = [1 << k for k in range(16, 27, 2)]
        curves = {"relu (yours)": [], "torch.relu": [], "copy": []}
        for n in sizes:
            x = torch.randn(n, device="cuda")
            out = torch.empty_like(x)
            moved = 2 * x.nbytes
            runs = {"relu (yours)": lambda x=x, out=out: relu(x, out),
                    "torch.relu": lambda x=x: torch.relu(x),
                    "copy": lambda x=x, out=out: out.copy_(x)}
            for name, fn in runs.items():
                curves[name].append(timing.bench(fn).per_second(moved) / 1e9)
        plots.curves([4 * n for n in sizes], curves, xlabel="tensor size (bytes, float32)",
                     ylabel="GB/s (bytes read + written)",
                     title=f"Bandwidth against size on {DEVICE.name}")
else:
    print("The bandwidth sweep needs a GPU; run this notebook on one to see it.")
    recorded.show("00_setup/bandwidth-sweep")

# %% [markdown]
# ### Speed (graded on a GPU)
#
# Your kernel must reach at least 80% of the copy bandwidth measured in the same run, on 64 Mi
# float32 elements. Every speed cell of the course takes the same path (`perf.grade`):
#
# - the input is drawn afresh before every timed call, and outputs are checked against it;
# - before and after timing, `out` is poisoned and must be written by `relu_kernel`;
# - every GPU kernel the timed calls run is recorded: one that is not yours (a library's, say) is
#   named, and the cell is flagged;
# - a bandwidth above the copy's is flagged.
#
# A flagged cell scores 0 and says why. Off the GPU this cell scores 0 and says so, without
# touching your correctness points: your instructor grades speed on a GPU.

# %% nbgrader={"grade": true, "grade_id": "speed-relu", "points": 1}
x_speed = torch.randn(DEVICE.pick(gpu=BENCH_ELEMENTS, interpreter=1024),
                      device=DEVICE.torch_device)
out_speed = torch.empty_like(x_speed)
perf.grade(perf.Case(lambda: relu(x_speed, out_speed), kernels=["relu_kernel"],
                     inputs=(x_speed,), out=out_speed,
                     verify=lambda: checks.compare(out_speed, relu_reference(x_speed)),
                     baselines=[perf.copy_bandwidth(2 * x_speed.nbytes, at_least=0.8)]),
           points=1)

# %% [markdown]
# ## Summary
#
# - `device.setup()` picks the GPU or Triton's interpreter and must run before `import triton`.
#   The interpreter checks correctness anywhere; speed needs a GPU of sm_80 or newer.
# - The doctor reports the device, the versions, and known-bad combinations with their fixes.
# - A grid of programs runs a Triton kernel; each owns a block of offsets, and a mask keeps the
#   last block inside the tensor.
# - The grader checks random inputs, with poisoned outputs, against a float64 reference; its
#   messages name a stub left in place, an output never stored, elements never written, or the
#   first mismatches.
# - Speed is graded as a ratio against a baseline timed in the same run.
#
# ## Further exercises
#
# 1. Set `COURSE_MODE=interpreter` on a GPU machine, restart the kernel, and put a `print(x)` in
#    `relu_kernel`. What does one program see?
# 2. Launch `relu` with `block=64` and with `block=8192` in the bandwidth sweep. Which sizes
#    suffer, and why might a very small block hurt even for large tensors?
# 3. Write a kernel for `out = x * sigmoid(x)` (SiLU) and check it against a float64 reference.
#    Which tolerance does float16 need, and why?
