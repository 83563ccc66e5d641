# %% [markdown]
# # 01 · The memory wall and the roofline
#
# *Reading time: about 11 minutes.*
#
# A GPU computes far faster than it can fetch its operands. NVIDIA's H100 SXM datasheet lists 989
# TFLOP/s of dense fp16 tensor-core arithmetic and 3.35 TB/s of HBM3 bandwidth: to keep the tensor
# cores busy, a kernel must do 989 / 3.35 = 295 operations per byte it moves. Adding two fp16
# vectors does one per 6 bytes. This gap, the *memory wall* (Wulf and McKee, "Hitting the memory
# wall", 1995), sets the speed of most kernels before you write a line: the *roofline model*
# (Williams, Waterman and Patterson, Communications of the ACM, 2009) turns two numbers about the
# device and two about the kernel into the best time any implementation can reach. You will
# measure the first two, count the others, and ask whether a custom kernel is worth writing.
#
# **You will learn:** how to measure copy bandwidth and matmul throughput (and why an fp32 matmul
# may run in TF32); the ridge point; how to count the FLOPs and bytes of add, softmax, matmul and
# attention; how to tell memory-bound from compute-bound ops and predict their best time; how to
# read a profile; and when a custom kernel pays.

# %%
from grader.runtime import device

DEVICE = device.setup()

import contextlib
import math
import numbers
import os

import torch
import torch.nn.functional as F
from IPython.display import display
from torch import nn
from tqdm.auto import tqdm

from grader.runtime import checks, plots, recorded, roofline, timing
from grader.runtime.widgets import roofline as roofline_explorer

print(f"This notebook runs on {DEVICE.describe()}.")

# %% tags=["parameters"]
# You may change these while you work; grading restores this cell as released.
RUN_BENCHMARKS = True
# The PyTorch ops placed on the roofline: counted everywhere, timed on a GPU only.
ADD_ELEMENTS = 1 << 26  # 64 Mi elements per operand
SOFTMAX_SHAPE = (8192, 8192)  # (rows, columns), softmax along each row
MATMUL_SIZES = [256, 1024, 4096, 8192]  # square N x N x N
ATTENTION_SHAPE = (4, 16, 2048, 64)  # (batch, heads, sequence length, head dimension)
# The transformer block that is profiled: small in the interpreter, where it runs on the CPU.
PROFILE = DEVICE.pick(
    gpu=dict(batch=8, seq=1024, width=1024, heads=16, layers=4),
    interpreter=dict(batch=2, seq=128, width=128, heads=4, layers=2),
)

# %% [markdown]
# ## Two ceilings
#
# A kernel does some work $W$ (floating-point operations, FLOPs) and moves some bytes $Q$ between
# the GPU's memory and its chip. The device has a peak arithmetic rate $P$ (FLOP/s) and a peak
# bandwidth $B$ (bytes/s). Neither can be beaten, so
#
# $$ T \;\ge\; \max\!\left(\frac{W}{P},\; \frac{Q}{B}\right). $$
#
# Both ceilings are measured here, not read off a datasheet:
#
# - **Bandwidth**: a device-to-device copy of 1 GiB, counting bytes read *plus* written (copying
#   $n$ bytes moves $2n$); a copy does no arithmetic.
# - **Matmul throughput**: cuBLAS (`torch.matmul`) on large square matrices, $2N^3$ FLOPs, per
#   precision: fp16 and bf16 on the tensor cores, fp32 on the ordinary cores, and **TF32**.
#
# TF32 is a tensor-core format with fp32's 8-bit exponent but 10 mantissa bits instead of 23
# (NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020). When
# `torch.backends.cuda.matmul.allow_tf32` is set (or `torch.set_float32_matmul_precision("high")`),
# an fp32 matmul rounds its inputs to TF32 and runs on the tensor cores: faster, less exact.
# PyTorch's CUDA-semantics notes document the flag, off for matmuls since PyTorch 1.12.
# `roofline.measure_ceilings()` measures both; the cell prints this session's setting.

# %%
print(f"torch.backends.cuda.matmul.allow_tf32 = {torch.backends.cuda.matmul.allow_tf32}, "
      f"float32 matmul precision = {torch.get_float32_matmul_precision()!r}")

with recorded.cell("01_roofline/ceilings"):
    if DEVICE.supports("timing") and RUN_BENCHMARKS:
        CEILINGS = roofline.measure_ceilings()  # copy 1 GiB; matmuls at N = 8192 (fp32: 4096)
        # What TF32 costs in accuracy: one fp32 matmul, with and without, against float64.
        a, b = torch.randn(2048, 2048, device="cuda"), torch.randn(2048, 2048, device="cuda")
        exact = a.double() @ b.double()
        allowed = torch.backends.cuda.matmul.allow_tf32
        for allow in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = allow
            error = ((a @ b).double() - exact).abs().max() / exact.abs().max()
            print(f"fp32 matmul 2048, allow_tf32={allow}: max error {error:.1e} of the largest entry")
        torch.backends.cuda.matmul.allow_tf32 = allowed
    else:
        CEILINGS = roofline.datasheet_h100()
        if DEVICE.supports("timing"):
            print("RUN_BENCHMARKS is off, so nothing is measured: below are the figures of NVIDIA's "
                  "H100 SXM datasheet (dense rates), labelled as such, not your GPU's.")
        else:
            print("Nothing can be measured here: this notebook runs on the CPU in Triton's "
                  "interpreter mode, where times say nothing about a GPU. Below are the figures of "
                  "NVIDIA's H100 SXM datasheet (dense rates), labelled as such; on a GPU this cell "
                  "measures your own.")

    print(f"\nceilings: {CEILINGS.source}")
    print(f"{'memory bandwidth':>18}: {CEILINGS.bandwidth / 1e12:7.2f} TB/s (bytes read + written)")
    for precision, rate in CEILINGS.flops.items():
        print(f"{precision + ' matmul':>18}: {rate / 1e12:7.1f} TFLOP/s   "
              f"ridge {CEILINGS.ridge(precision):6.1f} FLOP/B")
    print(f"TF32 over plain fp32: {CEILINGS.flops['tf32'] / CEILINGS.flops['fp32']:.1f}x")
    roofline.show(CEILINGS)  # one roof per precision; the fp16 one drawn bold
if not (DEVICE.supports("timing") and RUN_BENCHMARKS):
    print("\nWhat this cell measures on a GPU:")
    recorded.show("01_roofline/ceilings")

# %% [markdown]
# ## The ridge point
#
# Work over traffic is the **arithmetic intensity** $I = W / Q$, in FLOP per byte. The bound
# becomes a statement about rates: a kernel of intensity $I$ reaches at most
#
# $$ \text{attainable FLOP/s} = \min(P,\; I \cdot B). $$
#
# On log-log axes (above) that is a slanted line (memory-bound: rate grows with intensity) meeting
# a flat one (compute-bound: the peak) at the **ridge point** $I^* = P / B$, printed above for each
# precision. Below the ridge only moving fewer bytes helps; above it only the arithmetic matters.
# Each precision has its own ridge, and so does each device: the H200 has the H100's compute and
# 4.8 TB/s (NVIDIA's datasheets), so its ridge is lower and more ops are compute-bound on it.

# %% [markdown]
# ## Counting FLOPs and bytes
#
# The counts are a model; the tests use exactly these conventions.
#
# **Bytes: ideal traffic.** Each input is read once and each output written once, at its dtype's
# size (`fp32` 4 bytes, `fp16` and `bf16` 2); caches, re-reads and padding do not count. Separate
# kernels pass intermediates through memory; a fused kernel keeps them on chip, at no cost.
#
# **FLOPs.** An add, multiply, comparison, division or `exp` counts 1; a multiply-add 2.
#
# | op | shape | computes | FLOPs |
# |---|---|---|---|
# | `"add"` | any | `z = x + y` | 1 per output element |
# | `"softmax"` | any; along the last dimension | `exp(x - max) / sum(exp(x - max))` | 5 per element: max, subtract, `exp`, sum, divide |
# | `"matmul"` | `(M, N, K)` | `C (M x N) = A (M x K) @ B (K x N)` | 2 per multiply-add |
# | `"attention_naive"` | `(batch, heads, n, d)` | three kernels: `S = Q Kᵀ`, `P = softmax(S)`, `O = P V` | the two matmuls and the softmax |
# | `"attention_tiled"` | `(batch, heads, n, d)` | the same `O`, one fused kernel (FlashAttention) | as naive |

# %% [markdown]
# In attention, `Q`, `K`, `V` and `O` are `(batch, heads, n, d)`; `S` and `P` are
# `(batch, heads, n, n)`. The $1/\sqrt{d}$ scaling is folded into `Q` and not counted. Naive
# attention's three ops pass `S` and `P` through memory; tiled attention (Dao et al.,
# FlashAttention, arXiv:2205.14135) computes blocks of them on chip and only reads `Q`, `K`, `V`
# and writes `O`. Its online softmax's few extra rescaling operations are not counted: both do the
# same FLOPs.
#
# The helpers below give the bytes per element and the compute ceiling of each op. Matmuls and
# attention run on the tensor cores at their dtype's rate (fp32 as TF32 when allowed); add and
# softmax run on the ordinary cores, and PyTorch's CUDA kernels compute them in fp32 even for
# half-precision tensors (its `opmath` type), so their ceiling is fp32's.

# %% nbgrader={"grade_id": "roofline-given"}
ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
OPS = ("add", "softmax", "matmul", "attention_naive", "attention_tiled")
TENSOR_CORE_OPS = ("matmul", "attention_naive", "attention_tiled")


def compute_precision(op: str, dtype: str, tf32: bool = False) -> str:
    """Which of the ceilings' compute rates bounds `op` on tensors of `dtype`."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")
    if op not in TENSOR_CORE_OPS:
        return "fp32"
    if dtype == "fp32":
        return "tf32" if tf32 else "fp32"
    return dtype


# %% [markdown]
# ### Exercise 1 · FLOPs, bytes and intensity (4 points)
#
# Write the three counting functions for every op in the table, any shape, and the dtypes `"fp16"`,
# `"bf16"` and `"fp32"`; return plain Python numbers (`math.prod(shape)` multiplies a shape out).
# For attention, ask which tensors each version reads and writes; a sketch of one head on paper
# helps. The tests' helpers come next, read-only: a failure names the case, the convention, the
# expected and actual numbers, and the likeliest cause.

# %% nbgrader={"grade_id": "roofline-costs", "solution": true}
def op_flops(op: str, shape: tuple) -> int:
    """FLOPs of `op` on `shape`, by the course's conventions."""
    ### BEGIN SOLUTION
    if op == "add":
        return math.prod(shape)  # one add per output element
    if op == "softmax":
        return 5 * math.prod(shape)  # max, subtract, exp, sum, divide
    if op == "matmul":
        m, n, k = shape
        return 2 * m * n * k  # M*N outputs, K multiply-adds each
    if op in ("attention_naive", "attention_tiled"):
        batch, heads, n, d = shape
        scores = op_flops("matmul", (n, n, d))  # S = Q K^T
        probabilities = op_flops("softmax", (n, n))  # P = softmax(S)
        output = op_flops("matmul", (n, d, n))  # O = P V
        return batch * heads * (scores + probabilities + output)
    raise ValueError(f"unknown op {op!r}")
    ### END SOLUTION


def op_bytes(op: str, shape: tuple, dtype: str) -> int:
    """Bytes `op` must move between memory and the chip: each input read once, each output
    written once; intermediates cost bytes only when they go through memory."""
    ### BEGIN SOLUTION
    size = ELEMENT_BYTES[dtype]
    if op == "add":
        return 3 * math.prod(shape) * size  # reads x and y, writes z
    if op == "softmax":
        return 2 * math.prod(shape) * size  # reads x, writes the result
    if op == "matmul":
        m, n, k = shape
        return (m * k + k * n + m * n) * size  # reads A and B, writes C
    if op == "attention_tiled":
        batch, heads, n, d = shape
        return batch * heads * 4 * n * d * size  # reads Q, K, V, writes O
    if op == "attention_naive":
        batch, heads, n, d = shape
        per_head = (
            op_bytes("matmul", (n, n, d), dtype)  # reads Q and K, writes S
            + op_bytes("softmax", (n, n), dtype)  # reads S, writes P
            + op_bytes("matmul", (n, d, n), dtype)  # reads P and V, writes O
        )
        return batch * heads * per_head
    raise ValueError(f"unknown op {op!r}")
    ### END SOLUTION


def op_intensity(op: str, shape: tuple, dtype: str) -> float:
    """Arithmetic intensity of `op` in FLOP per byte."""
    ### BEGIN SOLUTION
    return op_flops(op, shape) / op_bytes(op, shape, dtype)
    ### END SOLUTION


# %% nbgrader={"grade_id": "roofline-expect"}
H100 = roofline.datasheet_h100()  # the tests' usual roofline: NVIDIA's datasheet figures


def case(op, shape, dtype=None, ceilings=None, tf32=False):
    """'matmul 128x256x64 fp16', and the roofline when there is one."""
    text = f"{op} {'x'.join(str(s) for s in shape)}" + (f" {dtype}" if dtype else "")
    text += " with TF32 allowed" if tf32 else ""
    return text + (f" on the roofline '{ceilings.source}'" if ceilings is not None else "")


def number(x):
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e18 else f"{x:.6g}"


def is_number(x):
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def expect(fn, args, want, unit, formula, hints=()):
    """fn(*args) must equal `want`; `hints` pairs known wrong answers with their likely cause."""
    __tracebackhide__ = True
    got = checks.call_graded(fn, *args)
    what = case(*args)
    if not is_number(got):
        raise AssertionError(f"{what}: `{fn.__name__}` must return a number of {unit}, got {got!r}")
    if math.isclose(got, want, rel_tol=1e-9):
        return
    hint = next((h for wrong, h in hints if math.isclose(got, wrong, rel_tol=1e-9)),
                "compare your count with the conventions above")
    raise AssertionError(f"{what}: expected {formula} = {number(want)} {unit}, got {number(got)}: "
                         f"{hint}")


def yours(op, shape, dtype):
    """What the student's exercise 1 says about this op, for messages."""
    try:
        return op_intensity(op, shape, dtype)
    except Exception:
        return None


def expect_bound(op, shape, dtype, ceilings, intensity, tf32=False):
    """classify_bound must compare the op's true `intensity` with the ridge of its ceiling."""
    __tracebackhide__ = True
    precision = compute_precision(op, dtype, tf32)
    ridge = ceilings.ridge(precision)
    want = "compute" if intensity >= ridge else "memory"
    got = checks.call_graded(classify_bound, op, shape, dtype, ceilings, tf32=tf32)
    what = case(op, shape, dtype, ceilings, tf32)
    if got not in ("memory", "compute"):
        raise AssertionError(f"{what}: return 'memory' or 'compute', got {got!r}")
    if got == want:
        return
    side = "at or above" if want == "compute" else "below"
    mine = yours(op, shape, dtype)
    if mine is not None and not math.isclose(mine, intensity, rel_tol=1e-9):
        hint = f"your op_intensity gives {mine:.5g}: fix exercise 1 first"
    elif math.isclose(intensity, ridge, rel_tol=1e-9):
        hint = "an intensity exactly at the ridge counts as compute"
    else:
        hint = (f"compare op_intensity with the {precision} ridge, "
                f"ceilings.flops[{precision!r}] / ceilings.bandwidth")
    raise AssertionError(f"{what}: intensity {intensity:.5g} FLOP/B is {side} the {precision} "
                         f"ridge {ridge:.5g} FLOP/B, so expected {want!r}, got {got!r}: {hint}")


def expect_seconds(op, shape, dtype, ceilings, flops, bytes_moved, tf32=False, rtol=0.01):
    """predict_seconds must return the roofline's lower bound within `rtol` (1%)."""
    __tracebackhide__ = True
    precision = compute_precision(op, dtype, tf32)
    compute = flops / ceilings.flops[precision]
    memory = bytes_moved / ceilings.bandwidth
    want = max(compute, memory)
    got = checks.call_graded(predict_seconds, op, shape, dtype, ceilings, tf32=tf32)
    what = case(op, shape, dtype, ceilings, tf32)
    if not is_number(got):
        raise AssertionError(f"{what}: `predict_seconds` must return seconds, got {got!r}")
    if abs(got - want) <= rtol * want:
        return
    hints = [(compute, "that is the compute floor alone: the bound is the larger of the two"),
             (memory, "that is the memory floor alone: the bound is the larger of the two"),
             (compute + memory, "that adds the floors: memory and arithmetic overlap, take the max"),
             (min(compute, memory), "that is the smaller floor: the bound is the larger one"),
             (want * 1e3, "that is in milliseconds: return seconds"),
             (want * 1e6, "that is in microseconds: return seconds"),
             (2 * memory, "that is twice the memory floor: ceilings.bandwidth already counts "
              "bytes read plus bytes written")]
    hints += [(max(flops / rate, memory), f"that uses the {p} rate; this op's ceiling is "
               f"{precision} (compute_precision(op, dtype, tf32))")
              for p, rate in ceilings.flops.items() if p != precision]
    hint = next((h for wrong, h in hints if abs(got - wrong) <= rtol * wrong),
                "check that FLOPs are divided by the rate of compute_precision(op, dtype, tf32) "
                "and bytes by ceilings.bandwidth, both per second")
    raise AssertionError(f"{what}: expected max({flops:.4g} FLOP / {precision} peak, "
                         f"{bytes_moved:.4g} B / bandwidth) = {want:.4g} s (within {rtol:.0%}), "
                         f"got {got:.4g} s: {hint}")


# %% nbgrader={"grade": true, "grade_id": "test-roofline-costs-visible", "points": 1}
elements = "that counts elements: multiply by the bytes per element"
expect(op_flops, ("add", (1000,)), 1000, "FLOPs", "n (one add per element)")
expect(op_bytes, ("add", (1000,), "fp32"), 12000, "bytes", "3 * n * 4 (read x and y, write z)",
       [(3000, elements), (8000, "did you forget to write the output z?")])
expect(op_flops, ("matmul", (128, 256, 64)), 4194304, "FLOPs", "2*M*N*K",
       [(2097152, "did you count the multiply and the add?")])
expect(op_bytes, ("matmul", (128, 256, 64), "fp16"), 114688, "bytes", "(M*K + K*N + M*N) * 2",
       [(57344, elements), (229376, "fp16 is 2 bytes per element, not 4"),
        (49152, "did you forget to write C?"),
        (98304, "the matrices are not square: use M, N and K")])
expect(op_intensity, ("matmul", (128, 256, 64), "fp16"), 4194304 / 114688, "FLOP/B",
       "FLOPs / bytes", [(114688 / 4194304, "that is bytes per FLOP: divide FLOPs by bytes")])
expect(op_flops, ("softmax", (32, 100)), 16000, "FLOPs", "5 * rows * cols",
       [(3200, "softmax is 5 FLOPs per element: max, subtract, exp, sum, divide"),
        (12800, "softmax is 5 FLOPs per element: did you leave out the exp?")])
attn_shape = (2, 3, 256, 32)  # batch, heads, n, d
expect(op_flops, ("attention_naive", attn_shape), 52297728, "FLOPs",
       "batch*heads*(4*n*n*d + 5*n*n)",
       [(50331648, "did you leave out the softmax's FLOPs on the scores?"),
        (17432576, "count every head: multiply by heads too")])
expect(op_bytes, ("attention_naive", attn_shape, "fp16"), 3538944, "bytes",
       "batch*heads*(4*n*d + 4*n*n) * 2",
       [(393216, "naive attention is three kernels: S and P go to memory and come back")])
expect(op_bytes, ("attention_tiled", attn_shape, "fp16"), 393216, "bytes",
       "batch*heads*4*n*d * 2",
       [(3538944, "tiled attention keeps S and P on chip: it reads Q, K, V and writes O")])
print("visible tests passed: add, matmul, softmax and both attentions")

# %% [markdown]
# ### Hidden tests
#
# At grading, this cell checks all five ops over many shapes and every dtype: non-square and skinny
# matmuls, softmax over more than two dimensions, fp16 against fp32 bytes, and both attentions at
# several lengths and head dimensions.

# %% nbgrader={"grade": true, "grade_id": "test-roofline-costs-hidden", "points": 3}
### BEGIN HIDDEN TESTS
def _reference_cost(op, shape, dtype):
    """(FLOPs, bytes), written out independently of the solution."""
    s = {"fp16": 2, "bf16": 2, "fp32": 4}[dtype]
    if op == "add":
        n = math.prod(shape)
        return n, 3 * n * s
    if op == "softmax":
        n = math.prod(shape)
        return 5 * n, 2 * n * s
    if op == "matmul":
        m, n, k = shape
        return 2 * m * n * k, (m * k + k * n + m * n) * s
    b, h, n, d = shape
    flops = b * h * (4 * n * n * d + 5 * n * n)
    if op == "attention_naive":
        return flops, b * h * (4 * n * d + 4 * n * n) * s
    return flops, b * h * 4 * n * d * s


def _wrong_flops(op, shape):
    """Likely wrong FLOP counts, with what they reveal."""
    if op == "matmul":
        return [(math.prod(shape), "did you count the multiply and the add?")]
    if op == "softmax":
        n = math.prod(shape)
        return [(n, "softmax is 5 FLOPs per element"),
                (4 * n, "softmax is 5 FLOPs per element: did you leave out the exp?")]
    if op.startswith("attention"):
        b, h, n, d = shape
        return [(b * h * 4 * n * n * d, "did you leave out the softmax's FLOPs on the scores?"),
                (b * h * (2 * n * n * d + 5 * n * n), "count both matmuls at 2 FLOPs per "
                 "multiply-add"),
                (b * (4 * n * n * d + 5 * n * n), "count every head: multiply by heads too"),
                (h * (4 * n * n * d + 5 * n * n), "count every batch: multiply by batch too")]
    return []


def _wrong_bytes(op, shape, dtype):
    """Likely wrong byte counts, with what they reveal."""
    s = {"fp16": 2, "bf16": 2, "fp32": 4}[dtype]
    _, right = _reference_cost(op, shape, dtype)
    wrong = [(right / s, "that counts elements: multiply by the bytes per element")]
    if s == 2:
        wrong.append((right * 2, f"{dtype} is 2 bytes per element, not 4"))
    if op == "add":
        wrong.append((2 * math.prod(shape) * s, "did you forget to write the output?"))
    if op == "softmax":
        wrong.append((math.prod(shape) * s, "did you forget to write the output?"))
    if op == "matmul":
        m, n, k = shape
        wrong += [((m * k + k * n) * s, "did you forget to write C?"),
                  (3 * m * m * s, "the matrices are not square: use M, N and K")]
    if op.startswith("attention"):
        b, h, n, d = shape
        wrong += [(b * h * 4 * n * d * s, "naive attention is three kernels: S and P go to "
                   "memory and come back (write S, read S, write P, read P)"),
                  (b * h * (4 * n * d + 4 * n * n) * s, "tiled attention keeps S and P on chip: "
                   "it reads Q, K, V and writes O, nothing else"),
                  (b * h * 3 * n * d * s, "did you forget to write O?")]
        wrong = [(v, t) for v, t in wrong if not math.isclose(v, right)]
    return wrong


_FORMULAS = {  # (FLOPs, bytes) as the messages state them; n is the number of elements
    "add": ("n", "3 * n * size"),
    "softmax": ("5 * n", "2 * n * size"),
    "matmul": ("2*M*N*K", "(M*K + K*N + M*N) * size"),
    "attention_naive": ("batch*heads*(4*n*n*d + 5*n*n)", "batch*heads*(4*n*d + 4*n*n) * size"),
    "attention_tiled": ("batch*heads*(4*n*n*d + 5*n*n)", "batch*heads*4*n*d * size"),
}
_COST_CASES = [
    ("add", (1,), "fp32"), ("add", (1 << 20,), "fp16"), ("add", (64, 3, 17), "bf16"),
    ("add", (4096, 4096), "fp32"),
    ("softmax", (1, 1), "fp32"), ("softmax", (4096, 1000), "fp16"),
    ("softmax", (8, 128, 50257), "bf16"), ("softmax", (3, 7), "fp32"),
    ("matmul", (1, 1, 1), "fp32"), ("matmul", (4096, 4096, 4096), "fp16"),
    ("matmul", (1000, 3, 77), "fp32"), ("matmul", (16, 8192, 4096), "bf16"),
    ("matmul", (4096, 16, 4096), "fp16"), ("matmul", (512, 1024, 64), "fp32"),
    ("matmul", (8192, 8192, 128), "bf16"),
]
for _n, _d in ((128, 64), (2048, 64), (1000, 128), (4096, 128)):
    for _op in ("attention_naive", "attention_tiled"):
        for _dtype, _b, _h in (("fp16", 4, 16), ("fp32", 2, 12), ("bf16", 1, 32)):
            _COST_CASES.append((_op, (_b, _h, _n, _d), _dtype))
### END HIDDEN TESTS
# a check you can run now; the hidden tests around it run when your notebook is graded
expect(op_bytes, ("softmax", (32, 100), "bf16"), 12800, "bytes", "2 * rows * cols * 2",
       [(6400, "that counts elements: multiply by the bytes per element")])
### BEGIN HIDDEN TESTS
for _op, _shape, _dtype in _COST_CASES:
    _flops, _bytes = _reference_cost(_op, _shape, _dtype)
    expect(op_flops, (_op, _shape), _flops, "FLOPs", _FORMULAS[_op][0], _wrong_flops(_op, _shape))
    expect(op_bytes, (_op, _shape, _dtype), _bytes, "bytes", _FORMULAS[_op][1],
           _wrong_bytes(_op, _shape, _dtype))
    expect(op_intensity, (_op, _shape, _dtype), _flops / _bytes, "FLOP/B", "FLOPs / bytes",
           [(_bytes / _flops, "that is bytes per FLOP: divide FLOPs by bytes")])
print(f"hidden tests passed: {len(_COST_CASES)} cases over every op and dtype")
### END HIDDEN TESTS

# %% [markdown]
# ## The intensity of common ops
#
# With your counts, here is where common ops fall against this roofline's ridges. The table uses
# the parameters cell's sizes; the plot sweeps $N$ (add and softmax on $N \times N$, an $N^3$
# matmul, attention over $N$ positions with head dimension 64).

# %%
def intensity_row(label, op, shape):
    values = "".join(f"{op_intensity(op, shape, dt):>10.3g}" for dt in ("fp16", "fp32"))
    return f"{label:<30}{values}"


print(f"{'op':<30}{'fp16':>10}{'fp32':>10}   FLOP/B")
print(intensity_row(f"add, {ADD_ELEMENTS} elements", "add", (ADD_ELEMENTS,)))
print(intensity_row(f"softmax {SOFTMAX_SHAPE}", "softmax", SOFTMAX_SHAPE))
for n in MATMUL_SIZES:
    print(intensity_row(f"matmul {n}^3", "matmul", (n, n, n)))
for op in ("attention_naive", "attention_tiled"):
    print(intensity_row(f"{op} {ATTENTION_SHAPE}", op, ATTENTION_SHAPE))
print(f"ridges of '{CEILINGS.source}': fp16 {CEILINGS.ridge('fp16'):.0f}, "
      f"tf32 {CEILINGS.ridge('tf32'):.0f}, fp32 {CEILINGS.ridge('fp32'):.0f} FLOP/B")
limit = op_intensity("attention_naive", (1, 1, 1 << 24, 64), "fp16")
print(f"naive attention, fp16, d=64, at n = 2^24 positions: {limit:.1f} FLOP/B")

sizes = [2**k for k in range(6, 16)]
shapes = {"add": lambda n: (n, n), "softmax": lambda n: (n, n), "matmul": lambda n: (n, n, n),
          "attention_naive": lambda n: (1, 1, n, 64), "attention_tiled": lambda n: (1, 1, n, 64)}
plots.curves(sizes, {op: [op_intensity(op, shape_of(n), "fp16") for n in sizes]
                     for op, shape_of in shapes.items()},
             references={f"{p} ridge ({CEILINGS.ridge(p):.0f} FLOP/B)": CEILINGS.ridge(p)
                         for p in ("fp16", "fp32")},
             log_y=True, xlabel="size N", ylabel="arithmetic intensity (FLOP/B), fp16",
             title=f"Intensity against size; ridges of: {CEILINGS.source}")

# %% [markdown]
# What the counts say, before anything is timed:
#
# - **Add and softmax** have a constant intensity far below every ridge: memory-bound at any size,
#   their best time is bytes over bandwidth. Halving the bytes (fp16) halves it; less arithmetic
#   changes nothing.
# - **Matmul**'s intensity grows like $N$ ($2N^3$ FLOPs on $3N^2$ elements): small matmuls are
#   memory-bound, large ones compute-bound, and the ridge is the crossing.
# - **Naive attention** levels off: its traffic is dominated by the $n \times n$ `S` and `P`, which
#   grow as fast as the FLOPs, so its intensity tends to a limit set by the head dimension (printed
#   above for $n = 2^{24}$): memory-bound at any length. **Tiled attention** moves only `Q`, `K`,
#   `V` and `O`, which grow like $n$ against FLOPs like $n^2$, so it crosses the ridge. Same FLOPs,
#   same result, fewer bytes: that is FlashAttention's idea, and 07 builds it.

# %% [markdown]
# ### Exercise 2 · memory- or compute-bound? (3 points)
#
# Write `classify_bound`: `"memory"` when the op's intensity is below the ridge of the compute
# ceiling that bounds it, else `"compute"` (exactly at the ridge both floors are equal: count it as
# compute). `compute_precision(op, dtype, tf32)` names that ceiling; the rates are
# `ceilings.flops[precision]` (FLOP/s) and `ceilings.bandwidth` (bytes/s). Use your functions from
# exercise 1.

# %% nbgrader={"grade_id": "roofline-bound", "solution": true}
def classify_bound(op: str, shape: tuple, dtype: str, ceilings: roofline.Ceilings,
                   tf32: bool = False) -> str:
    """'memory' or 'compute': which ceiling limits `op` on `ceilings`."""
    ### BEGIN SOLUTION
    precision = compute_precision(op, dtype, tf32)
    ridge = ceilings.flops[precision] / ceilings.bandwidth
    return "compute" if op_intensity(op, shape, dtype) >= ridge else "memory"
    ### END SOLUTION


# %% [markdown]
# ### Visible test
#
# On the H100 datasheet roofline: a large fp16 add, a large fp16 matmul, and an fp32 matmul of 256
# whose answer depends on whether TF32 is allowed; then an op exactly at the ridge.

# %% nbgrader={"grade": true, "grade_id": "test-roofline-bound-visible", "points": 1}
expect_bound("add", (1 << 24,), "fp16", H100, intensity=1 / 6)
expect_bound("matmul", (8192, 8192, 8192), "fp16", H100, intensity=8192 / 3)
expect_bound("matmul", (256, 256, 256), "fp32", H100, intensity=256 / 6)
expect_bound("matmul", (256, 256, 256), "fp32", H100, intensity=256 / 6, tf32=True)
# a made-up device whose fp32 ridge is exactly 8 FLOP/B, the intensity of a 48^3 fp32 matmul
EVEN = roofline.Ceilings(2e12, {"fp16": 500e12, "bf16": 500e12, "tf32": 100e12, "fp32": 16e12},
                         "a made-up device, for an op exactly at the ridge")
expect_bound("matmul", (48, 48, 48), "fp32", EVEN, intensity=8.0)
print("visible tests passed: add, matmul fp16, matmul fp32 with and without TF32, the ridge")

# %% [markdown]
# ### Hidden tests
#
# Far from the ridge and within a fraction of a percent of it, every op and precision with and
# without TF32, skinny matmuls, short and long attention, an op exactly at the ridge, and the same
# ops on the H200's datasheet roofline, whose ridge is lower.

# %% nbgrader={"grade": true, "grade_id": "test-roofline-bound-hidden", "points": 2}
### BEGIN HIDDEN TESTS
_H200 = roofline.Ceilings(4.8e12, dict(H100.flops), "NVIDIA H200 datasheet (dense rates), not measured")
_TIE = roofline.Ceilings(1e12, {"fp16": 1000e12, "bf16": 1000e12, "tf32": 200e12, "fp32": 16e12},
                         "a made-up device whose fp32 ridge is exactly 16 FLOP/B")
_BOUND_CASES = [
    # far from the ridge
    ("add", (1 << 26,), "fp16", H100, False), ("add", (4096, 4096), "fp32", _H200, False),
    ("softmax", (8192, 8192), "fp16", H100, False), ("softmax", (64, 50257), "bf16", _H200, False),
    ("matmul", (8192, 8192, 8192), "bf16", H100, False),
    ("matmul", (4096, 16, 4096), "fp16", H100, False),  # skinny: memory-bound
    ("matmul", (16, 8192, 4096), "fp32", H100, True),
    ("attention_naive", (4, 16, 8192, 128), "fp16", H100, False),
    ("attention_tiled", (4, 16, 8192, 128), "fp16", H100, False),
    ("attention_tiled", (1, 16, 128, 64), "fp16", H100, False),  # short: memory-bound
    ("attention_naive", (2, 12, 1024, 64), "fp32", H100, True),
    ("attention_tiled", (2, 12, 4096, 64), "fp32", H100, True),
    # within half a percent of the ridge: fp16 295.2, tf32 147.5, fp32 20 FLOP/B on the H100
    ("matmul", (885, 885, 885), "fp16", H100, False), ("matmul", (886, 886, 886), "fp16", H100, False),
    ("matmul", (886, 886, 886), "bf16", H100, False),
    ("matmul", (884, 884, 884), "fp32", H100, True), ("matmul", (886, 886, 886), "fp32", H100, True),
    ("matmul", (884, 884, 884), "fp32", H100, False),
    ("matmul", (119, 119, 119), "fp32", H100, False), ("matmul", (121, 121, 121), "fp32", H100, False),
    # the H200's ridge is lower: compute-bound there, memory-bound on the H100
    ("matmul", (700, 700, 700), "fp16", _H200, False), ("matmul", (700, 700, 700), "fp16", H100, False),
    # exactly at the ridge: compute
    ("matmul", (96, 96, 96), "fp32", _TIE, False),
    # whatever this notebook's own roofline is
    ("matmul", (4096, 4096, 4096), "fp16", CEILINGS, False),
    ("attention_tiled", ATTENTION_SHAPE, "fp16", CEILINGS, False),
]
### END HIDDEN TESTS
# a check you can run now; the hidden tests around it run when your notebook is graded
expect_bound("softmax", (4096, 4096), "fp32", H100, intensity=5 / 8)
### BEGIN HIDDEN TESTS
for _op, _shape, _dtype, _ceilings, _tf32 in _BOUND_CASES:
    _flops, _bytes = _reference_cost(_op, _shape, _dtype)
    expect_bound(_op, _shape, _dtype, _ceilings, intensity=_flops / _bytes, tf32=_tf32)
print(f"hidden tests passed: {len(_BOUND_CASES)} cases near and far from the ridge")
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 3 · the best possible time (3 points)
#
# Write `predict_seconds`: the roofline's lower bound on the time of `op`, in seconds. Which two
# floors does the roofline put under a kernel's time, and how do they combine? The tests accept
# answers within 1% of the exact bound.

# %% nbgrader={"grade_id": "roofline-predict", "solution": true}
def predict_seconds(op: str, shape: tuple, dtype: str, ceilings: roofline.Ceilings,
                    tf32: bool = False) -> float:
    """No implementation of `op` can finish in less time than this on `ceilings`."""
    ### BEGIN SOLUTION
    precision = compute_precision(op, dtype, tf32)
    compute = op_flops(op, shape) / ceilings.flops[precision]
    memory = op_bytes(op, shape, dtype) / ceilings.bandwidth
    return max(compute, memory)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-roofline-predict-visible", "points": 1}
expect_seconds("add", (1 << 24,), "fp32", H100, flops=2**24, bytes_moved=12 * 2**24)
expect_seconds("matmul", (8192, 8192, 8192), "fp16", H100, flops=2 * 8192**3,
               bytes_moved=3 * 8192**2 * 2)
expect_seconds("matmul", (4096, 4096, 4096), "fp32", H100, flops=2 * 4096**3,
               bytes_moved=3 * 4096**2 * 4, tf32=True)
print(f"visible tests passed: add 2^24 fp32 needs at least "
      f"{predict_seconds('add', (1 << 24,), 'fp32', H100) * 1e6:.1f} us on the H100 datasheet")

# %% [markdown]
# ### Hidden tests
#
# Every op and dtype, on both sides of the ridge and at it, with and without TF32, on the H100 and
# H200 datasheets and on this notebook's roofline.

# %% nbgrader={"grade": true, "grade_id": "test-roofline-predict-hidden", "points": 2}
### BEGIN HIDDEN TESTS
_PREDICT_CASES = list(_BOUND_CASES) + [
    ("add", (1,), "fp32", H100, False), ("add", (1 << 20,), "bf16", _H200, False),
    ("softmax", (8, 128, 50257), "fp32", _H200, False),
    ("matmul", (1000, 3, 77), "fp32", H100, True), ("matmul", (512, 1024, 64), "fp16", _H200, False),
    ("matmul", (8192, 8192, 8192), "fp32", H100, False),
    ("matmul", (8192, 8192, 8192), "fp32", _H200, True),
    ("attention_naive", (1, 32, 4096, 128), "bf16", _H200, False),
    ("attention_tiled", (1, 32, 4096, 128), "bf16", _H200, False),
    ("matmul", (2048, 2048, 2048), "fp16", CEILINGS, False),
    ("softmax", SOFTMAX_SHAPE, "fp16", CEILINGS, False),
]
### END HIDDEN TESTS
# a check you can run now; the hidden tests around it run when your notebook is graded
expect_seconds("softmax", (4096, 4096), "fp16", H100, flops=5 * 4096**2,
               bytes_moved=2 * 4096**2 * 2)
### BEGIN HIDDEN TESTS
for _op, _shape, _dtype, _ceilings, _tf32 in _PREDICT_CASES:
    _flops, _bytes = _reference_cost(_op, _shape, _dtype)
    expect_seconds(_op, _shape, _dtype, _ceilings, _flops, _bytes, tf32=_tf32)
print(f"hidden tests passed: {len(_PREDICT_CASES)} predictions within 1%")
### END HIDDEN TESTS

# %% [markdown]
# ## PyTorch's ops on the roofline
#
# On a GPU, the next cell times PyTorch's own ops in fp16 with `timing.bench`, counts their FLOPs
# and bytes with *your* functions, and places each at its measured rate. The naive attention is the
# three-op formula; `scaled_dot_product_attention` dispatches to a fused, tiled kernel
# (FlashAttention or cuDNN's), so it counts as `attention_tiled`. The last column, the roofline
# bound over the measured time, says how close each op comes to the best any kernel could do with
# *its* traffic.

# %%
def naive_attention(q, k, v):  # the 1/sqrt(d) scale is taken as folded into q
    return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


RUNS = [  # (label, op and shape to count, the call, the shapes of its fp16 inputs)
    ("torch.add", "add", (ADD_ELEMENTS,), lambda x, y, z: torch.add(x, y, out=z),
     [(ADD_ELEMENTS,)] * 3),
    ("torch.softmax", "softmax", SOFTMAX_SHAPE, lambda s: torch.softmax(s, dim=-1),
     [SOFTMAX_SHAPE]),
    *[(f"matmul {n}", "matmul", (n, n, n), torch.matmul, [(n, n)] * 2) for n in MATMUL_SIZES],
    ("attention, naive", "attention_naive", ATTENTION_SHAPE, naive_attention,
     [ATTENTION_SHAPE] * 3),
    ("SDPA (tiled)", "attention_tiled", ATTENTION_SHAPE, F.scaled_dot_product_attention,
     [ATTENTION_SHAPE] * 3),
]

with recorded.cell("01_roofline/pytorch-ops"):
    points, measured = [], DEVICE.supports("timing") and RUN_BENCHMARKS
    print(f"{'op':<18}{'FLOPs':>10}{'bytes':>10}{'FLOP/B':>9}  {'bound':<8}"
          f"{'measured':>11}{'roofline':>11}{'of roof':>9}")
    for label, op, shape, call, input_shapes in tqdm(RUNS, disable=not measured, desc="timing"):
        flops, moved = op_flops(op, shape), op_bytes(op, shape, "fp16")
        best = predict_seconds(op, shape, "fp16", CEILINGS)
        if measured:
            args = [torch.randn(*s, device="cuda", dtype=torch.float16) for s in input_shapes]
            seconds = timing.bench(lambda call=call, args=args: call(*args)).median_ms * 1e-3
            del args
            points.append(roofline.Point(label, flops, moved, seconds))
            timed = f"{seconds * 1e6:>9.4g}us{best * 1e6:>9.4g}us{best / seconds:>9.0%}"
        else:  # nothing to time: the point sits on the roof, at the best it could do
            points.append(roofline.Point(label, flops, moved, best,
                                         style={"facecolors": "none", "edgecolors": "C3"}))
            timed = f"{'-':>11}{best * 1e6:>9.4g}us{'-':>9}"
        print(f"{label:<18}{flops:>10.2e}{moved:>10.2e}{flops / moved:>9.3g}  "
              f"{classify_bound(op, shape, 'fp16', CEILINGS):<8}{timed}")

    if measured:
        title = f"PyTorch ops in fp16, measured on {DEVICE.name}"
    else:
        print("\nNothing was timed (no GPU, or RUN_BENCHMARKS is off). The plot is NVIDIA's H100 SXM "
              "datasheet roofline, not a measurement, with each op drawn on the roof at its "
              "intensity, the best it could do; on a GPU the points are live timings, on or below "
              "the roof.")
        title = "Datasheet roofline (H100 SXM, not measured); ops at their best possible rate"
    # points on the flat roof crowd together: their labels are turned upwards
    roofline.show(CEILINGS, points, precision="fp16", title=title, labels_up=not measured)
if not measured:
    recorded.show("01_roofline/pytorch-ops")

# %% [markdown]
# How to read it. Points under the slanted roof are memory-bound: only fewer bytes lift them (fuse
# ops, use a smaller dtype). Points under the flat roof are compute-bound: only fewer or faster
# FLOPs do. The vertical gap to the roof is the *headroom* a better kernel could still gain. On a
# GPU, read the `of roof` column too: the 8192 matmul set the fp16 roof, so it sits on it by
# construction; smaller matmuls have too little work to fill the GPU; add and softmax show how
# close PyTorch's kernels come to the copy bandwidth; naive attention sits far left of SDPA, the
# same FLOPs on many times the bytes.
#
# ## Explore
#
# Pick an op, a size and a dtype and see where it lands on this notebook's roofline (your GPU's,
# or the H100 datasheet's on the CPU), counted with *your* functions. Try: the matmul size where
# fp16 crosses the ridge; naive against tiled attention; an fp32 matmul as fp32 and as TF32.

# %%
explorer = roofline_explorer.explore(CEILINGS, op_flops, op_bytes, compute_precision)
print(explorer.text())  # the readout at the default settings, for where widgets are not shown
display(explorer)

# %% [markdown]
# ## Profile first
#
# The roofline says how fast an op *could* be; first find out which ops take the time. PyTorch's
# profiler (`torch.profiler`) records every op a model runs, with its CPU time and, on a GPU, the
# time of the kernels it launched. Here it profiles a small stack of transformer blocks (layernorm,
# QKV projection, attention written out as $\mathrm{softmax}(QK^T)V$, output projection,
# layernorm, MLP with GELU), sorted by *self* time (an op's own work, without the ops it calls). In
# the interpreter only CPU time is recorded, and the shares are this CPU's, not a GPU's.
#
# The rows are ATen ops (PyTorch's operator library): `addmm` and `mm` are the linear layers, `bmm`
# the attention matmuls, `copy_` the copies that reshapes and transposes need; on a GPU the kernels
# appear too, under their cuBLAS or PyTorch names. The next cell groups them into the block's parts.

# %%
class Block(nn.Module):
    """A pre-norm transformer block, with attention written out as three ops."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)  # the QKV projection
        self.proj = nn.Linear(width, width)  # the attention's output projection
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)  # the MLP

    def forward(self, x):  # x: (batch, seq, width)
        b, t, w = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, w // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (batch, heads, seq, head dim)
        scores = (q * (w // self.heads) ** -0.5) @ k.transpose(-2, -1)  # (batch, heads, seq, seq)
        attended = torch.softmax(scores, dim=-1) @ v  # (batch, heads, seq, head dim)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, t, w))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


@contextlib.contextmanager
def native_stderr_silenced():
    """The profiler's C++ library logs its start and stop straight to the process's stderr;
    keep those two lines out of the notebook (Python's own warnings still show)."""
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


P = PROFILE
dtype = torch.float16 if DEVICE.is_gpu else torch.float32
model = nn.Sequential(*[Block(P["width"], P["heads"]) for _ in range(P["layers"])])
model = model.to(DEVICE.torch_device, dtype).eval()
x = torch.randn(P["batch"], P["seq"], P["width"], device=DEVICE.torch_device, dtype=dtype)
activities = [torch.profiler.ProfilerActivity.CPU]
activities += [torch.profiler.ProfilerActivity.CUDA] if DEVICE.is_gpu else []
STEPS = 3
with torch.no_grad():
    for _ in range(2):  # warm-up: first calls pay for library setup and memory allocation
        model(x)
    if DEVICE.is_gpu:
        torch.cuda.synchronize()
    with native_stderr_silenced(), torch.profiler.profile(activities=activities) as prof:
        for _ in range(STEPS):
            model(x)
        if DEVICE.is_gpu:
            torch.cuda.synchronize()

with recorded.cell("01_roofline/profile"):
    SELF_TIME = "self_device_time_total" if DEVICE.is_gpu else "self_cpu_time_total"
    print(f"{STEPS} forward passes of {P['layers']} blocks, {P} in {str(dtype)[6:]}, "
          f"sorted by self {'GPU' if DEVICE.is_gpu else 'CPU'} time")
    print(prof.key_averages().table(sort_by=SELF_TIME, row_limit=10, max_name_column_width=36))
if not DEVICE.is_gpu:
    print("\nThe same profile on a GPU:")
    recorded.show("01_roofline/profile")

# %%
PARTS = {"aten::addmm": "linear layers", "aten::mm": "linear layers",
         "aten::bmm": "attention", "aten::_softmax": "attention",
         "aten::native_layer_norm": "layernorm", "aten::gelu": "GELU"}
aten = [event for event in prof.key_averages() if event.key.startswith("aten::")]
if not any(getattr(event, SELF_TIME) for event in aten):
    print("The profiler attributed no GPU time to ATen ops here; using CPU time instead.")
    SELF_TIME = "self_cpu_time_total"
share = {}
for event in aten:
    part = PARTS.get(event.key, "other (copies, adds, scaling)")
    share[part] = share.get(part, 0.0) + getattr(event, SELF_TIME) * 1e-6 / STEPS
total = sum(share.values())
for part, seconds in sorted(share.items(), key=lambda kv: -kv[1]):
    print(f"{part:<32}{seconds * 1e3:9.2f} ms per forward {seconds / total:7.1%}")

# %% [markdown]
# ## When does a custom kernel pay?
#
# A custom kernel costs effort long after it first runs: tests on every shape, tuning, keeping it
# correct and fast as GPUs and libraries change. It pays only when three conditions hold together:
#
# 1. **Headroom under the roofline.** The op runs well below the best time its work allows (the
#    bound of the *cheapest* way to compute it, e.g. tiled rather than naive attention). An op at
#    its roof cannot be made faster.
# 2. **A hot op.** It takes a large share of the time. Amdahl's law (Amdahl, AFIPS 1967) caps the
#    gain: speeding up a share $p$ by $h$ speeds up the whole by $1 / ((1 - p) + p / h)$, never
#    more than $1 / (1 - p)$.
# 3. **A stable shape.** Its shapes are known and few, so the kernel can be specialised and tuned
#    for them.
#
# On a GPU the cell below puts numbers on the first two for the profiled block: each part's time
# against its roofline bound (linear layers as matmuls, attention as tiled attention), and the
# end-to-end speedup reaching the bound would give. The block's shapes are fixed: the third holds.

# %%
def amdahl(share, headroom):
    """End-to-end speedup when a part with `share` of the time becomes `headroom` times faster."""
    return 1 / ((1 - share) + share / headroom)


if DEVICE.is_gpu and RUN_BENCHMARKS:
    with recorded.cell("01_roofline/headroom"):
        tokens, width = P["batch"] * P["seq"], P["width"]
        matmuls = [(tokens, 3 * width, width), (tokens, width, width),
                   (tokens, 4 * width, width), (tokens, width, 4 * width)]
        bounds = {
            "linear layers": P["layers"] * sum(predict_seconds("matmul", s, "fp16", CEILINGS)
                                               for s in matmuls),
            "attention": P["layers"] * predict_seconds(
                "attention_tiled", (P["batch"], P["heads"], P["seq"], width // P["heads"]), "fp16",
                CEILINGS),
        }
        print(f"{'part':<16}{'measured':>11}{'roofline':>11}{'headroom':>10}{'share':>8}"
              f"{'whole block at most':>21}")
        for part, best in bounds.items():
            h, p = share[part] / best, share[part] / total
            print(f"{part:<16}{share[part] * 1e3:>9.2f}ms{best * 1e3:>9.2f}ms{h:>9.1f}x{p:>8.0%}"
                  f"{amdahl(p, h):>20.2f}x")
else:
    print("On a GPU, with RUN_BENCHMARKS on, this cell prints each part's headroom under the "
          "measured roofline and the whole block's best possible speedup from it. Here there is "
          "no measured roofline, and the shares above are this machine's CPU times.")
    recorded.show("01_roofline/headroom")

# %% [markdown]
# Read the GPU numbers with the three conditions in mind. A part whose headroom is near 1x is done,
# whatever its share (the linear layers: cuBLAS at its roof). A part with large headroom and a
# large share, on fixed shapes, is where a kernel pays.
# Written-out attention against the bound of *tiled* attention is the classic case; the kernel that
# closes the gap is FlashAttention, which you write in 07. The small elementwise parts (layernorm,
# GELU, copies) are memory-bound; their usual fix is fusion with their neighbours (02 and 03),
# which `torch.compile` also does.
#
# ## Summary
#
# - A kernel takes at least $\max(W/P, Q/B)$. Measure both ceilings on your device: copy bandwidth
#   counts bytes read plus written; matmul throughput depends on the precision, and fp32 matmuls
#   run as TF32 when `torch.backends.cuda.matmul.allow_tf32` is set.
# - The ridge point $P/B$ separates memory-bound ops (move fewer bytes) from compute-bound ones (do
#   fewer or faster FLOPs); each precision has its own.
# - Add and softmax are memory-bound at any size; matmul crosses the ridge as it grows; naive
#   attention stays memory-bound, tiled attention does the same FLOPs on far fewer bytes.
# - Profile first; write a kernel only where there is headroom, a hot op and a stable shape.

# %% [markdown]
# ## Further exercises
#
# 1. Add `"layernorm"` and `"gelu"` to your counting functions (how many FLOPs is a `tanh`?) and
#    place `torch.nn.functional.layer_norm` and `F.gelu` on the roofline.
# 2. Count a *fused* add and ReLU (one kernel) against the two separate ops. How much lower is the
#    fused bound? 02 writes that kernel.
# 3. Replace the written-out attention in `Block` with `F.scaled_dot_product_attention` and profile
#    again. How do the shares change, and the three conditions with them?
# 4. Time `torch.matmul` on fp32 inputs with `allow_tf32` on and off for sizes 256 to 8192. From
#    which size does TF32 pay, and why not below?
# 5. Run `roofline.measure_ceilings(copy_bytes=...)` with copies of 1 MiB to 1 GiB. Where does the
#    bandwidth jump, and what has the H100's 50 MB L2 (NVIDIA's datasheet) to do with it?
