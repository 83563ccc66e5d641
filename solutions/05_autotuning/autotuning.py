# %% [markdown]
# # 05 · Autotuning
#
# *Reading time: about 11 minutes.*
#
# In 04 the fast settings (128x256 tiles, `BLOCK_K=64`, 8 warps, 3 stages) were handed to you.
# Where do they come from, and do they hold for another shape, dtype or GPU? The compiler, the
# memory system and the tensor cores interact in ways easier to measure than to model. Triton's
# answer is `triton.autotune`: list candidate configurations, let it time each on the first call
# for every new problem size, and keep the winner. This notebook is about doing that well: a small,
# sensible space, pruned before anything compiles, and an honest account of what the search costs
# and when it is not worth it.
#
# **You will learn:** how `triton.autotune`, `triton.Config`, `key`, pruning and the cache fit
# together; to prune configs that cannot fit in shared memory; what tuning costs, measured; the
# config space as a heatmap; how the best config moves with the shape; and when not to tune.

# %%
from grader.runtime import device

DEVICE = device.setup()

import inspect
import math
import time

import gemm  # gemm.py beside this notebook, released with it
import numpy as np
import torch
import triton
from IPython.display import display
from tqdm.auto import tqdm

from grader.runtime import checks, perf, recorded, timing
from grader.runtime.widgets import autotune as autotune_widget

print(f"Kernels run on {DEVICE.describe()}; tensors for them live on '{DEVICE.torch_device}'.")

# %% tags=["parameters"]
# You may change these while you work; grading restores this cell as released.
# The three float16 problems graded for speed; the interpreter gets small ones of the same kinds.
SHAPES = DEVICE.pick(
    gpu={"square": (4096, 4096, 4096), "tall": (16384, 1024, 4096), "odd": (4000, 4000, 4000)},
    interpreter={"square": (64, 64, 64), "tall": (256, 32, 64), "odd": (40, 40, 40)},
)
HEATMAP_N = DEVICE.pick(gpu=4096, interpreter=64)  # side of the square problem in the heatmap
MORE_SHAPES = [(2048, 2048, 2048), (8192, 8192, 8192)]  # also tuned when comparing winners (GPU)
FULL_SEARCH = False  # True: the larger config space (40 configs before pruning; minutes to tune)
RUN_BENCHMARKS = True

# %% [markdown]
# ## The kernel: 04's, with a second way to move tiles
#
# The kernel to tune is 04's blocked matmul (grouped order, float32 accumulator, masks, strides),
# kept in `gemm.py` beside this notebook so that the notebook and the course's benchmarks time the
# same code. One addition: where the layout allows, it moves tiles through **tensor descriptors**
# (`tl.make_tensor_descriptor`). On Hopper these become copies by the Tensor Memory Accelerator
# (TMA), a unit that moves whole tiles between global and shared memory and computes the addresses
# itself (NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022); loads past the matrix's edges
# return zeros (`padding_option="zero"`, the default) and stores there are dropped. The conditions
# (Triton documentation of `make_tensor_descriptor`): a 16-byte aligned base, leading strides in
# multiples of 16 bytes, a contiguous last dimension. `gemm.launch` checks them and otherwise takes
# 04's pointer path, as it always does before sm_90. The interpreter emulates descriptors with the
# same checks, so both paths are tested here.

# %%
print(inspect.getsource(gemm.matmul_kernel.fn))
dev = DEVICE.torch_device
a = torch.empty(64, 32, dtype=torch.float16, device=dev)
b = torch.empty(32, 48, dtype=torch.float16, device=dev)
c = torch.empty(64, 48, dtype=torch.float16, device=dev)
print("row-major, aligned:      descriptors" if gemm.tma_ok(a, b, c) else
      "row-major, aligned:      pointers (no TMA on this device)")
print(f"B transposed view:       {'descriptors' if gemm.tma_ok(a, b.t().contiguous().t(), c) else 'pointers'}")
print(f"rows of 71 halves (142 bytes): "
      f"{'descriptors' if gemm.tma_ok(torch.empty(64, 71, dtype=torch.float16, device=dev), b, c) else 'pointers'}")

# %% [markdown]
# Correctness is checked as in 04: fresh random inputs, a float64 reference, and a tolerance of the
# output's rounding (`rtol`) plus that of a $K$-term float32 sum,
# `atol = 4 * sqrt(K) * 2**-24 * max(|A| @ |B|)` (Higham and Mary, *SIAM J. Sci. Comput.* 41(5),
# 2019: a sum's rounding errors grow like $\sqrt{K}$ in practice).

# %%
def matmul_reference(a, b):  # reads M*K + K*N, writes M*N
    return a @ b


def matmul_inputs(M, N, K, dtype, transposed=False):
    """make_inputs(gen) for checks.check; transposed=True hands over B as a transposed view."""
    def make(gen):
        a = checks.randn((M, K), gen=gen, dtype=dtype)
        b = (checks.randn((N, K), gen=gen, dtype=dtype).t() if transposed
             else checks.randn((K, N), gen=gen, dtype=dtype))
        return a, b
    return make


def check_matmul(fn, M, N, K, dtype=torch.float16, transposed=False):
    seed = checks.new_seed()
    make = matmul_inputs(M, N, K, dtype, transposed)
    a, b = make(checks.generator(seed))
    atol = 4 * math.sqrt(K) * 2.0**-24 * float((a.double().abs() @ b.double().abs()).max())
    checks.check(fn, matmul_reference, make, trials=1, seed=seed,
                 atol=atol + checks.tolerance(dtype)[1])


def flops(M, N, K):
    return 2 * M * N * K


# %% [markdown]
# ## `triton.autotune` in one picture
#
# ```python
# @triton.autotune(
#     configs=[triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8},
#                            num_warps=8, num_stages=3), ...],
#     key=["M", "N", "K"],                        # re-tune when these arguments change
#     prune_configs_by={"early_config_prune": f},  # drop configs before compiling them
# )
# @triton.jit
# def kernel(..., M, N, K, ..., BLOCK_M: tl.constexpr, ...): ...
# ```
#
# - A **`triton.Config`** sets the kernel's `tl.constexpr` parameters and the compiler's
#   `num_warps` and `num_stages`; each config compiles separately.
# - **`key`** names the arguments whose values select a tuning result. The first call with a new
#   key compiles and times every remaining config with `triton.testing.do_bench` and keeps the
#   fastest; later calls go straight to it. The tensor arguments' dtypes join the key. Here the key
#   is `M, N, K` and the path (`USE_TMA`).
# - **`early_config_prune`**: `f(configs, named_args, **kwargs)` runs before any timing; only what
#   it returns (at least one config) is tuned.
# - **The cache** holds one entry per key for the life of the process; `cache_results=True` keeps
#   results on disk, and `TRITON_PRINT_AUTOTUNING=1` prints each decision (Triton documentation of
#   `triton.autotune`).
# - It is **not** a model or a learned search: it times the listed configs, nothing else.

# %% [markdown]
# ## Pruning by shared memory
#
# A program's software pipeline keeps `num_stages` copies of an $A$ block (`BLOCK_M x BLOCK_K`) and
# a $B$ block (`BLOCK_K x BLOCK_N`) in shared memory. A config whose buffers pass the per-block
# limit cannot run: an H100 allows 227 KB per block (NVIDIA H100 datasheet; CUDA C++ Programming
# Guide, compute capability 9.0), and on a GPU `SMEM_LIMIT` is read from the device. Triton finds
# the overflow only after compiling; pruning first saves the compile.
#
# ### Exercise 1 · shared-memory pruning (3 points)
#
# 1. `smem_bytes(block_m, block_n, block_k, num_stages, itemsize)`: the pipeline buffers' bytes.
# 2. `fits(config, itemsize, limit)`: whether a `triton.Config`'s buffers fit in `limit` bytes
#    (exactly `limit` fits). Tile sizes are in `config.kwargs`, the stages in `config.num_stages`.
# 3. `prune_configs(configs, named_args, **kwargs)`, the `early_config_prune` function: keep the
#    configs that fit in `SMEM_LIMIT`, in their order. `named_args` maps the kernel's argument
#    names to this call's values: where do you find the element size? If none fits, return the one
#    that needs the least shared memory, so the autotuner still has a config.

# %%
if DEVICE.is_gpu:
    props = torch.cuda.get_device_properties(0)
    SMEM_LIMIT = getattr(props, "shared_memory_per_block_optin", 227 * 1024)
else:
    SMEM_LIMIT = 227 * 1024  # H100 (datasheet; CUDA C++ Programming Guide)
print(f"shared memory per block: {SMEM_LIMIT / 1024:.0f} KB")

# %% nbgrader={"grade_id": "smem-prune", "solution": true}
def smem_bytes(block_m: int, block_n: int, block_k: int, num_stages: int, itemsize: int) -> int:
    """Bytes of shared memory for num_stages copies of an A block and a B block."""
    ### BEGIN SOLUTION
    return num_stages * (block_m * block_k + block_k * block_n) * itemsize
    ### END SOLUTION


def fits(config: triton.Config, itemsize: int, limit: int) -> bool:
    """Whether config's pipeline buffers fit in `limit` bytes."""
    ### BEGIN SOLUTION
    kw = config.kwargs
    need = smem_bytes(kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], config.num_stages, itemsize)
    return need <= limit
    ### END SOLUTION


def prune_configs(configs, named_args, **kwargs):
    """early_config_prune: the configs that fit in SMEM_LIMIT for A's dtype, in order; if none
    does, the one that needs the least shared memory."""
    ### BEGIN SOLUTION
    itemsize = named_args["a_ptr"].element_size()
    kept = [c for c in configs if fits(c, itemsize, SMEM_LIMIT)]
    if kept:
        return kept

    def need(c):
        kw = c.kwargs
        return smem_bytes(kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], c.num_stages, itemsize)

    return [min(configs, key=need)]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-smem-visible", "points": 1}
# 128x256x64 in float16: an A block of 128*64*2 = 16 KiB and a B block of 64*256*2 = 32 KiB
assert checks.call_graded(smem_bytes, 128, 256, 64, 3, 2) == 3 * 48 * 1024, "3 stages of 48 KiB"
big = triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8},
                    num_warps=8, num_stages=4)  # 192 KiB in float16, 384 KiB in float32
assert checks.call_graded(fits, big, 2, 227 * 1024), "192 KiB (float16) fits in 227 KB"
assert not fits(big, 4, 227 * 1024), "384 KiB (float32) does not fit in 227 KB"
tensor16 = torch.empty(4, 4, dtype=torch.float16, device=DEVICE.torch_device)
small = triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8})
kept = checks.call_graded(prune_configs, [big, small], {"a_ptr": tensor16})
expected = [big, small] if SMEM_LIMIT >= 192 * 1024 else [small]
assert kept == expected, (f"float16, limit {SMEM_LIMIT / 1024:.0f} KB: kept "
                          f"{[gemm.describe(c) for c in kept]}, expected "
                          f"{[gemm.describe(c) for c in expected]}")
assert checks.call_graded(fits, big, 2, 192 * 1024), "a config that needs exactly the limit fits"
tensor32 = torch.empty(4, 4, dtype=torch.float32, device=DEVICE.torch_device)
saved_limit = SMEM_LIMIT
try:  # small needs 24 KiB in float16 and 48 KiB in float32
    for limit, tensor, what in [(200, tensor32, "float32 (A's dtype), limit 200 KB"),
                                (16, tensor16, "nothing fits in 16 KB: the config that needs least")]:
        SMEM_LIMIT = limit * 1024
        kept = prune_configs([big, small], {"a_ptr": tensor})
        assert kept == [small], (f"{what}: kept {[gemm.describe(c) for c in kept]}, expected "
                                 f"{gemm.describe(small)}")
finally:
    SMEM_LIMIT = saved_limit
print("visible tests passed")

# %% nbgrader={"grade": true, "grade_id": "test-smem-hidden", "points": 2}
assert checks.call_graded(smem_bytes, 16, 16, 16, 1, 4) == 2048, (  # the hidden tests follow
    "one stage of two 16x16 blocks of 4 bytes takes 2048 bytes")
### BEGIN HIDDEN TESTS
rng = np.random.default_rng()


def _need(bm, bn, bk, s, size):
    return s * size * bk * (bm + bn)


def _config(bm, bn, bk, s):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                         num_warps=4, num_stages=s)


powers = [16, 32, 64, 128, 256]
for _ in range(300):
    bm, bn, bk = (int(rng.choice(powers)) for _ in range(3))
    s, size = int(rng.integers(1, 7)), int(rng.choice([1, 2, 4]))
    assert smem_bytes(bm, bn, bk, s, size) == _need(bm, bn, bk, s, size), (
        f"smem_bytes{(bm, bn, bk, s, size)} = {smem_bytes(bm, bn, bk, s, size)}, expected "
        f"{_need(bm, bn, bk, s, size)}")
    limit = int(rng.integers(16, 400)) * 1024
    cfg = _config(bm, bn, bk, s)
    assert fits(cfg, size, limit) == (_need(bm, bn, bk, s, size) <= limit), (
        f"fits({gemm.describe(cfg)}, {size}, {limit}) should be "
        f"{_need(bm, bn, bk, s, size) <= limit}: it needs {_need(bm, bn, bk, s, size)} bytes")
    assert fits(cfg, size, _need(bm, bn, bk, s, size)), "a config that needs exactly the limit fits"
    assert not fits(cfg, size, _need(bm, bn, bk, s, size) - 1), (
        "a config that needs one byte more than the limit does not fit")

saved_limit = SMEM_LIMIT
try:
    SMEM_LIMIT = 100 * 1024
    configs = [_config(128, 128, 64, 3), _config(64, 64, 32, 2), _config(128, 256, 32, 2),
               _config(32, 32, 32, 3)]  # 96, 16, 48 and 12 KiB in float16
    t16 = torch.empty(2, 2, dtype=torch.float16, device=DEVICE.torch_device)
    t32 = torch.empty(2, 2, dtype=torch.float32, device=DEVICE.torch_device)
    before = list(configs)
    def names(cs):
        return [gemm.describe(c) for c in cs]

    def expect(got, want, what):
        assert got == want, f"{what}: prune_configs kept {names(got)}, expected {names(want)}"

    expect(prune_configs(configs, {"a_ptr": t16, "b_ptr": t16}), configs, "100 KB, float16")
    assert configs == before, "prune_configs must not change the list it is given"
    expect(prune_configs(configs, {"a_ptr": t32}), configs[1:], "100 KB, float32 (A's dtype)")
    SMEM_LIMIT = 8 * 1024
    expect(prune_configs(configs, {"a_ptr": t16}), [configs[3]], "nothing fits: the smallest")
    SMEM_LIMIT = 40 * 1024
    expect(prune_configs(configs[::-1], {"a_ptr": t16}), [configs[3], configs[1]],
           "40 KB, in the order given")
finally:
    SMEM_LIMIT = saved_limit
print("hidden tests passed: 300 random configs, limits at the boundary, dtypes, the fallback")
### END HIDDEN TESTS

# %% [markdown]
# How good is the model? On a GPU the cell compiles one tile shape, 128x256x64 with 8 warps, at two
# to five stages (without running it) and reads the shared memory the compiler allocated
# (`CompiledKernel.metadata.shared`). The compiler may need more than the pipeline's buffers (a
# staging buffer for the output tile on the descriptor path, say), so the model is a lower bound:
# configs it passes can still be refused at compile time, and the autotuner skips them.

# %%
n = DEVICE.pick(gpu=4096, interpreter=64)
a = torch.empty(n, n, dtype=torch.float16, device=DEVICE.torch_device)
rows = []
stages = [triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8},
                        num_warps=8, num_stages=s) for s in (2, 3, 4, 5)]
for cfg in stages:
    kw = cfg.kwargs
    model = smem_bytes(kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], cfg.num_stages, 2)
    compiled = math.nan
    if DEVICE.is_gpu:
        kernel = gemm.matmul_kernel.warmup(
            a, a, a, n, n, n, n, 1, n, 1, n, 1, USE_TMA=gemm.tma_ok(a),
            INPUT_PRECISION="ieee", grid=(1,), **cfg.all_kwargs())
        compiled = kernel.metadata.shared
    rows.append((gemm.describe(cfg), model / 1024, compiled / 1024))
with recorded.cell("05_autotuning/compiled-smem"):
    print(f"{'config (float16)':28s} {'model KB':>9s} {'compiler KB':>12s}   limit {SMEM_LIMIT / 1024:.0f} KB")
    for name, model_kb, compiled_kb in rows:
        print(f"{name:28s} {model_kb:9.0f} {compiled_kb:12.0f}")
if not DEVICE.is_gpu:
    print("(the compiler's column needs a GPU: the interpreter does not compile)")
    recorded.show("05_autotuning/compiled-smem")

# %% [markdown]
# ## The config space
#
# A good space is small and aimed. Each config costs a compile and a timing run per new key
# (measured below): a few dozen make every new shape's first call slow, a single one gives up on
# shapes it does not suit. From 04: tiles large enough to feed the tensor cores (`BLOCK_M`,
# `BLOCK_N` of 64 to 256), `BLOCK_K` of 32 or 64, 4 or 8 warps, 3 or 4 stages, a few tile shapes
# (wide, tall, square) for different aspect ratios, and `GROUP_M=8`.
#
# ### Exercise 2 · a config space that competes with cuBLAS (6 points)
#
# Write `config_space(full)`: a list of `triton.Config` for `gemm.matmul_kernel`, each with exactly
# the meta-parameters `BLOCK_M`, `BLOCK_N`, `BLOCK_K` (powers of two from 16 to 256) and `GROUP_M`,
# plus `num_warps` and `num_stages`. The default list has **at most 8** configs (the notebook must
# finish in two minutes on a GPU, tuning included); `full=True` returns a larger one. The speed
# cells ask for 0.85x cuBLAS on three float16 problems: square, tall and skinny, and a size that is
# not a multiple of 128. The choice is yours (`gemm.py` lists no configs): which tiles suit a tall
# and skinny output, and what does a deeper pipeline cost?

# %% nbgrader={"grade_id": "config-space", "solution": true}
def config_space(full: bool = False) -> list[triton.Config]:
    """Candidate configs for gemm.matmul_kernel; at most 8 unless full."""
    ### BEGIN SOLUTION
    def config(block_m, block_n, block_k, num_warps, num_stages):
        return triton.Config(
            {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": 8},
            num_warps=num_warps, num_stages=num_stages)

    if full:  # every combination of 04's ranges: 40 configs before pruning
        return [config(bm, bn, bk, w, s) for bm in (64, 128, 256) for bn in (128, 256)
                for bk in (32, 64) for w in (4, 8) for s in (3, 4) if not bm == bn == 256]
    # two tile shapes per family (wide, tall, square), the shapes of Triton's matmul tutorials,
    # known to suit large float16 and bfloat16 problems on Hopper and Ampere
    return [config(128, 256, 64, 8, 3), config(256, 128, 64, 8, 3),
            config(128, 128, 64, 8, 4), config(128, 128, 64, 4, 4),
            config(128, 256, 32, 8, 4), config(64, 256, 64, 4, 4)]
    ### END SOLUTION


# %% [markdown]
# The autotuned matmul: `gemm.Tuned` wraps two kernels in `triton.autotune` over your space, pruned
# by your `prune_configs`. Where every matrix suits tensor descriptors either can run. One is a
# **persistent** kernel (`gemm.matmul_kernel_persistent`, printed below): one program per SM, each
# walking the tiles `pid, pid + num_programs, ...` in grouped order, so no program waits to be
# scheduled and one tile's store overlaps the next tile's loads. Its descriptors are made on the
# host (`gemm.descriptors`): no program spends its start building them, but Triton encodes them
# again at every launch, host time that the autotuner, timing GPU work alone, never sees. So
# `gemm.Tuned` tunes both kernels, then times the two winners back to back, as a loop of calls
# runs them (`gemm.per_call_ms`), and keeps the cheaper per call. On H200s (the course's
# measurements of 29 November 2026) that was `gemm.matmul_kernel`'s pointer path at 512³ and the
# persistent kernel at 4096³; at 2048³ the two came within 1% of each other, and runs kept
# either. Elsewhere (a transposed view, rows not a multiple of 16
# bytes, a GPU older than sm_90) only the pointer path runs. Both take the same configs.

# %% [markdown]
# In the interpreter nothing can be timed, so `gemm.Tuned` keeps only the first config (with one
# config the autotuner times nothing) and the persistent kernel wherever the layout allows it;
# the tests still run every config of your space, one by one, on that path. To see where
# persistence pays on your GPU, time one config both ways: `gemm.launch_config(config, a, b, c)`
# takes the persistent kernel where the layout allows it,
# `gemm.launch(gemm.matmul_kernel, a, b, c, tma=False, **config.all_kwargs())` the pointer path.

# %%
print(inspect.getsource(gemm.matmul_kernel_persistent.fn))
SPACE = config_space(FULL_SEARCH)
matmul_tuned = gemm.Tuned(SPACE if DEVICE.supports("timing") else SPACE[:1], prune=prune_configs)


def matmul(a, b, out):
    """out = a @ b by the autotuned kernels; the first call for each new key tunes."""
    return matmul_tuned(a, b, out)


def launch_config(config):
    """A launcher that runs one config of the space, without tuning: the persistent kernel where
    the layout allows it, the pointer path elsewhere."""
    return lambda a, b, out: gemm.launch_config(config, a, b, out)


def check_structure(space, full_space):
    """The space's structure: sizes, meta-parameters, no config twice, one that fits an H100."""
    assert isinstance(space, list) and 1 <= len(space) <= 8, (
        f"the default space needs 1 to 8 configs, it has {len(space) if isinstance(space, list) else space!r}")
    assert isinstance(full_space, list) and len(full_space) > len(space), (
        "config_space(full=True) should be larger than the default space")
    seen = set()
    for cfg in space + full_space:
        assert isinstance(cfg, triton.Config), f"{cfg!r} is not a triton.Config"
        assert set(cfg.kwargs) == {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"}, (
            f"kwargs must be exactly BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M: got {sorted(cfg.kwargs)}")
        for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
            v = cfg.kwargs[name]
            assert isinstance(v, int) and 16 <= v <= 256 and v & (v - 1) == 0, (
                f"{name}={v!r}: a power of two from 16 (tl.dot's smallest block) to 256")
        assert isinstance(cfg.kwargs["GROUP_M"], int) and cfg.kwargs["GROUP_M"] >= 1, (
            f"GROUP_M={cfg.kwargs['GROUP_M']!r}: a whole number of row blocks, 1 or more")
        assert cfg.num_warps in (1, 2, 4, 8, 16), f"num_warps={cfg.num_warps}: a power of two"
        assert isinstance(cfg.num_stages, int) and cfg.num_stages >= 1, (
            f"num_stages={cfg.num_stages!r}: a whole number, 1 or more")
    for cfg in space:
        assert gemm.describe(cfg) not in seen, f"{gemm.describe(cfg)} twice"
        seen.add(gemm.describe(cfg))
    fit = [checks.call_graded(fits, c, 2, 227 * 1024, what="Exercise 1's `fits`") for c in space]
    assert any(fit), "no config fits an H100's 227 KB in float16"


def check_space(space, full_space):
    """The space's structure, then every config on an aligned and an odd float16 problem."""
    check_structure(space, full_space)
    for cfg in space:
        for shape in [(64, 48, 80), (37, 53, 71)]:  # descriptors where possible; pointers
            try:
                check_matmul(launch_config(cfg), *shape)
            except triton.runtime.OutOfResources:  # too big for this GPU: the autotuner skips it
                print(f"{gemm.describe(cfg)} does not fit on this GPU; the autotuner skips it")


# %% nbgrader={"grade": true, "grade_id": "test-config-space-visible", "points": 1}
space = checks.call_graded(config_space, False)
full_space = config_space(True)
check_space(space, full_space)
check_matmul(matmul, 96, 80, 112)
print(f"visible tests passed: {len(space)} configs (full: {len(full_space)}), each correct")

# %% nbgrader={"grade": true, "grade_id": "test-config-space-hidden", "points": 2}
check_structure(checks.call_graded(config_space, False), config_space(True))  # as on a GPU
check_matmul(matmul, 37, 53, 71)  # odd sizes through the autotuned launcher; hidden tests follow
### BEGIN HIDDEN TESTS
for shape in [(3, 5, 7), (130, 70, 200), (64, 64, 16)]:
    check_matmul(matmul, *shape)
if not DEVICE.is_gpu:  # more layouts and dtypes, and a sample of the full space (compiles on a GPU)
    check_matmul(matmul, 37, 53, 71, transposed=True)
    check_matmul(matmul, 48, 32, 96, dtype=torch.float32)
    sample = np.random.default_rng().choice(len(full_space), size=min(4, len(full_space)),
                                            replace=False)
    for i in sample:
        check_matmul(launch_config(full_space[int(i)]), 40, 24, 56)
print("hidden tests passed")
### END HIDDEN TESTS

# %% [markdown]
# ## The cost of tuning
#
# The first call for a new key compiles every config that survives pruning (unless Triton's kernel
# cache, in memory and on disk, holds it already: the model-against-compiler cell compiled the
# default space for this problem) and times each with `do_bench`; later calls only look the key
# up. The cell measures both on the square problem: the first call's wall time, and the tuned
# kernel's.

# %%
TUNING = {}
if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("05_autotuning/tuning-cost"):
        M, N, K = SHAPES["square"]
        a = torch.randn(M, K, device=DEVICE.torch_device, dtype=torch.float16)
        b = torch.randn(K, N, device=DEVICE.torch_device, dtype=torch.float16)
        c = torch.empty(M, N, device=DEVICE.torch_device, dtype=torch.float16)
        start = time.perf_counter()
        matmul(a, b, c)
        if DEVICE.is_gpu:
            torch.cuda.synchronize()  # the kernel has finished, not only been queued
        TUNING["first call s"] = time.perf_counter() - start
        tuned = timing.bench(lambda: matmul(a, b, c))
        TUNING["tuned ms"] = tuned.median_ms
        print(f"{M}x{N}x{K}: the first call took {TUNING['first call s']:.2f} s to compile (what "
              f"Triton's kernel cache did not hold yet) and time {len(prune_configs(SPACE, {'a_ptr': a}))} "
              f"configs; later calls "
              f"{tuned.median_ms * 1e3:.0f} us each, {tuned.per_second(flops(M, N, K)) / 1e12:.0f} TFLOP/s")
        print(f"the first call cost as much as {TUNING['first call s'] * 1e3 / tuned.median_ms:,.0f} tuned calls")
        print(f"chosen: {gemm.describe(matmul_tuned.best_config)}; cached keys: {len(matmul_tuned.cache)}")
else:
    print("On a GPU this cell times the first, tuning call against the tuned calls; the "
          "interpreter cannot time anything.")
    recorded.show("05_autotuning/tuning-cost")

# %% [markdown]
# ## Host time per call
#
# Each call of `matmul` first does work on the host: find the tuned plan for this layout, gather
# the arguments, hand them to Triton's launcher. Only then can the GPU start the kernel. When the
# kernel's GPU time is shorter than the call's host time, the GPU waits for the host and a faster
# kernel would not speed the program up: the problem is *host-bound*. `gemm.Tuned` keeps, after
# the first call of each layout (`gemm.layout`), a `gemm.Plan` with the config, the grid and the
# compiled kernel, so that a call passes only pointers, sizes and strides (on the persistent path,
# pointers, sizes and the descriptors, which the plan keeps while the tensors' addresses stay
# the same).
#
# The cell measures both figures on this device, for your `matmul` and for `torch.matmul`, on a
# small square problem and on the graded square one: host time as back-to-back calls issued while
# the GPU is still busy with earlier work (`timing.host_time`), GPU time as everywhere else in the
# course (`timing.bench`).

# %%
def host_and_gpu_us(M, N, K):
    """{name: (host us, GPU us)} per call of your matmul and of torch.matmul on one problem."""
    a = torch.randn(M, K, device=DEVICE.torch_device, dtype=torch.float16)
    b = torch.randn(K, N, device=DEVICE.torch_device, dtype=torch.float16)
    c, theirs = (torch.empty(M, N, device=DEVICE.torch_device, dtype=torch.float16) for _ in "ct")
    matmul(a, b, c)  # the first call of this layout tunes
    calls = {"your matmul": lambda: matmul(a, b, c),
             "torch.matmul": lambda: torch.matmul(a, b, out=theirs)}
    return {name: (timing.host_time(call).us, timing.bench(call).median_ms * 1e3)
            for name, call in calls.items()}


if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("05_autotuning/host-vs-gpu"):
        for M, N, K in [(512, 512, 512), SHAPES["square"]]:
            for name, (host_us, gpu_us) in host_and_gpu_us(M, N, K).items():
                bound = "host-bound" if host_us > gpu_us else "GPU-bound"
                print(f"{M}x{N}x{K} {name:12s}: host {host_us:5.1f} us per call, "
                      f"GPU {gpu_us:7.1f} us per call: {bound}")
else:
    print("On a GPU this cell sets each call's host time beside its GPU time; the interpreter "
          "cannot time anything.")
    recorded.show("05_autotuning/host-vs-gpu")

# %% [markdown]
# ### Speed (graded on a GPU)
#
# Your autotuned matmul against cuBLAS (`torch.matmul`) on three float16 problems, timed
# alternately in the same run, the inputs drawn afresh before every timed call and the output checked:
# at least 0.85x on each; a rate above cuBLAS's is flagged. Each problem's first call, which tunes,
# comes before the timing.

# %%
def grade_shape(name, points=1):
    M, N, K = SHAPES[name]
    gen = checks.generator(checks.new_seed())
    a = checks.randn((M, K), gen=gen, dtype=torch.float16)
    b = checks.randn((K, N), gen=gen, dtype=torch.float16)
    c = torch.empty(M, N, device=a.device, dtype=torch.float16)
    theirs = torch.empty_like(c)

    def verify():  # against the inputs as they are now: they change before every timed call
        atol = 4 * math.sqrt(K) * 2.0**-24 * float((a.double().abs() @ b.double().abs()).max())
        checks.compare(c, a.double() @ b.double(), atol=atol + 1e-5, context="after a timed call")

    cublas = perf.Baseline("cuBLAS (torch.matmul)", lambda: torch.matmul(a, b, out=theirs),
                           at_least=0.85)
    return perf.grade(
        perf.Case(lambda: matmul(a, b, c), kernels=["matmul_kernel", "matmul_kernel_persistent"],
                  inputs=(a, b), out=c, verify=verify, baselines=[cublas],
                  name=f"autotuned matmul {M}x{N}x{K}", flops=2 * M * N * K,
                  dtype=torch.float16),
        points=points)


# %% nbgrader={"grade": true, "grade_id": "speed-autotuned-square", "points": 1}
grade_shape("square")

# %% nbgrader={"grade": true, "grade_id": "speed-autotuned-tall", "points": 1}
grade_shape("tall")

# %% nbgrader={"grade": true, "grade_id": "speed-autotuned-odd", "points": 1}
grade_shape("odd")

# %% [markdown]
# ## The config space as a heatmap
#
# On a GPU the cell times a grid of configs on the square problem of side `HEATMAP_N` (three tile
# shapes against 2, 3 and 4 stages, 8 warps, `BLOCK_K=64`) and records each one's TFLOP/s and
# modelled shared memory; configs the compiler refuses stay blank. The explorer switches the axis
# between `num_stages`, `num_warps` and `BLOCK_K`, and the value between measurement and model. In
# the interpreter it shows the model over your full space.

# %%
HEATMAP = []
with recorded.cell("05_autotuning/heatmap"):
    if DEVICE.supports("timing") and RUN_BENCHMARKS:
        n = HEATMAP_N
        a = torch.randn(n, n, device=DEVICE.torch_device, dtype=torch.float16)
        b = torch.randn(n, n, device=DEVICE.torch_device, dtype=torch.float16)
        c = torch.empty(n, n, device=DEVICE.torch_device, dtype=torch.float16)
        grid = [(bm, bn, s) for bm, bn in [(128, 128), (128, 256), (256, 128)] for s in (2, 3, 4)]
        for bm, bn, s in tqdm(grid, desc="configs"):
            cfg = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "GROUP_M": 8},
                                num_warps=8, num_stages=s)
            row = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "num_warps": 8, "num_stages": s,
                   "smem_kb": smem_bytes(bm, bn, 64, s, 2) / 1024, "shape": f"{n}x{n}x{n}"}
            try:
                t = timing.bench(lambda cfg=cfg: launch_config(cfg)(a, b, c))
                row["tflops"] = t.per_second(flops(n, n, n)) / 1e12
            except triton.runtime.OutOfResources:
                row["tflops"] = math.nan
            HEATMAP.append(row)
        table, value = HEATMAP, "tflops"
    else:  # the model over your full space
        table = [{**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages,
                  "smem_kb": smem_bytes(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"],
                                        c.kwargs["BLOCK_K"], c.num_stages, 2) / 1024}
                 for c in config_space(True)]
        value = "smem_kb"
    autotune_widget.show(table, "num_stages", value)
if not HEATMAP:
    recorded.show("05_autotuning/heatmap")
display(autotune_widget.explore(table, value=value))

# %% [markdown]
# ## How the best config moves with the shape
#
# The tuned kernel keeps one decision per key. The cell tunes the sizes in `MORE_SHAPES` and the
# graded problems, and lists each winner with its speed against cuBLAS. Whether the winners differ,
# and by how much each beats your list's first config, is this GPU's answer to "do I need to tune
# per shape?".

# %%
def first_config_time(a, b, c):
    """The Timing of the first config of the space that runs (no tuning)."""
    for cfg in prune_configs(SPACE, {"a_ptr": a}):
        try:
            return timing.bench(lambda cfg=cfg: launch_config(cfg)(a, b, c))
        except triton.runtime.OutOfResources:
            continue
    raise RuntimeError("no config of the space runs on this GPU")


if DEVICE.supports("timing") and RUN_BENCHMARKS:
    with recorded.cell("05_autotuning/per-shape"):
        problems = [*SHAPES.values(), *MORE_SHAPES]
        for M, N, K in tqdm(problems, desc="shapes"):
            a = torch.randn(M, K, device=DEVICE.torch_device, dtype=torch.float16)
            b = torch.randn(K, N, device=DEVICE.torch_device, dtype=torch.float16)
            c = torch.empty(M, N, device=DEVICE.torch_device, dtype=torch.float16)
            matmul(a, b, c)  # tunes if this key is new
            best = gemm.describe(matmul_tuned.best_config)
            mine = timing.bench(lambda a=a, b=b, c=c: matmul(a, b, c))
            fixed = first_config_time(a, b, c)
            theirs = timing.bench(lambda a=a, b=b, c=c: torch.matmul(a, b, out=c))
            print(f"{f'{M}x{N}x{K}':>17s} best {best:22s} {mine.per_second(flops(M, N, K)) / 1e12:5.0f} "
                  f"TFLOP/s = {theirs.median_ms / mine.median_ms:.2f}x cuBLAS; the first config of the "
                  f"list takes {fixed.median_ms / mine.median_ms:.2f}x the tuned time")
            if (M, N, K) == SHAPES["square"]:
                TUNING["fixed ms"] = fixed.median_ms
            del a, b, c
else:
    print("On a GPU this cell lists the winning config and its speed against cuBLAS for each "
          "shape; the interpreter cannot time.")
    recorded.show("05_autotuning/per-shape")

# %% [markdown]
# ## When not to tune
#
# 01's three conditions for writing a kernel apply to tuning it: **headroom** (measurably short of
# the roofline bound or the library), a **hot** op (a real share of a profile), and a **stable
# shape** (the same keys come back, so the cost is paid once). A model serving many sequence
# lengths fails the third: each new length is a new key and pays again (bucket the shapes, or tune
# offline with `cache_results=True`). With the numbers above, the break-even point is the tuning
# cost over the time saved per call against the list's first config.

# %%
if {"first call s", "tuned ms", "fixed ms"} <= TUNING.keys():
    with recorded.cell("05_autotuning/break-even"):
        saved_ms = TUNING["fixed ms"] - TUNING["tuned ms"]
        if saved_ms > 0:
            print(f"tuning cost {TUNING['first call s']:.2f} s and saves {saved_ms * 1e3:.1f} us per call "
                  f"on {SHAPES['square']}: it pays after {TUNING['first call s'] * 1e3 / saved_ms:,.0f} calls")
        else:
            print(f"on {SHAPES['square']} the first config of the list was already the fastest: the "
                  f"{TUNING['first call s']:.2f} s of tuning bought nothing for this shape")
else:
    print("On a GPU this cell divides the measured tuning cost by the time tuning saves per call.")
    recorded.show("05_autotuning/break-even")

# %% [markdown]
# ## Summary
#
# - `triton.autotune` times every listed `triton.Config` on the first call for each new key (plus
#   the tensor dtypes), keeps the fastest in a per-process cache and reuses it; it searches nothing
#   beyond the list.
# - `early_config_prune` removes configs before they compile; the pipeline's shared memory,
#   `num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * itemsize` bytes, is the first check against the
#   per-block limit. The compiler may need more.
# - Tuning costs compiles and timing runs per new key: measure it against the time saved per call.
# - A small space aimed by what you know beats a large blind one; the best config can move with
#   the shape.
# - Tune only with headroom, a hot op and stable shapes.

# %% [markdown]
# ## Further exercises
#
# 1. Set `FULL_SEARCH = True` and rerun. How long does tuning take, and does any shape gain more
#    than a few percent over the default space?
# 2. Add `"perf_model"` and `"top_k"` to `prune_configs_by`: estimate each config's time from 01's
#    roofline (FLOPs over the tensor-core rate, bytes requested over bandwidth) and time only the
#    best two. How often does the estimate pick the winner?
# 3. Try 3000x5000x4000. Its rows of 5000 halves are 10000 bytes, a multiple of 16, but 5000 is not
#    a multiple of 16 elements: which path does the launcher take, and how does Triton's
#    specialisation on arguments divisible by 16 (04) affect speed?
# 4. For each shape's winning config, time the persistent kernel against one program per tile,
#    `gemm.launch(gemm.matmul_kernel, a, b, c, tma=True, **config.all_kwargs())`. Where does
#    persistence pay? Compare the 128x256 tiles of a 2048x2048 output with the SM count
#    (`gemm.num_sms()`): what is left for persistence to improve there?
