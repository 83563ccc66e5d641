# %% [markdown]
# # 08 · Trust, but verify
#
# *Reading time: about 11 minutes.*
#
# A language model writes a FlashAttention kernel in seconds. It compiles, runs, and may print the
# right numbers on the first test you think of. Whether it is right is another question; whether it
# is fast, a third. When KernelBench (Ouyang et al., 2025, arXiv:2502.10517) asked models for
# kernels for 250 PyTorch workloads, even the best, out of the box, matched the PyTorch baseline
# (correct and at least as fast) in fewer than 20% of cases: most drafts were wrong or slower. Here
# you receive three drafts of an attention kernel, prove each wrong with an audit, name the defects,
# fix the most promising one and make it fast, then draw the roofline of every kernel you wrote.
#
# **You will learn:** why tests on zeros, tile-multiple sizes or one seed pass broken kernels; how an
# audit sweeps shapes, dtypes, strides, flags and extreme values against a float64 reference with
# poisoned memory; the defects that hide in attention kernels and their signatures; what no small
# run can show (32-bit offset overflow); how a grader makes sure the timed code is yours; and how to
# make a fixed draft fast.

# %%
from grader.runtime import device

DEVICE = device.setup()

import math
from pathlib import Path

import torch
import triton
import triton.language as tl

from grader.runtime import attention as attn
from grader.runtime import checks, integrity, llm, perf, recorded, results, roofline, verify

print(f"Kernels run on {DEVICE.describe()}; tensors for them live on '{DEVICE.torch_device}'.")

# %% tags=["parameters"]
# You may change these while you work; grading restores this cell as released.
# The drafts ask for 128 x 128 tiles. The interpreter runs every program as Python, so there they
# run with 32 x 32 tiles, and every audit size is set relative to the tile.
TILE = DEVICE.pick(gpu=128, interpreter=32)
FUZZ_CASES = DEVICE.pick(gpu=12, interpreter=8)  # random shapes in the hidden tests
SPEED_SHAPE = dict(batch=4, heads=16, n=4096, d=64)  # fp16, as the speed cells grade it
RUN_BENCHMARKS = True
AUDIT_MY_DRAFT = False  # audit the draft your own model wrote (read it first: it runs here)

# %% [markdown]
# ## The prompt and the drafts
#
# This is the prompt; the three drafts in `drafts/` answer it. They were written for this course in
# the style of model output (a confident docstring, helpful comments, the requested signature), each
# with defects planted from the taxonomy below, so the answer is known and your diagnosis can be
# graded. The optional cell near the end sends the prompt to a model of your own.

# %%
PROMPT = """\
Write a Triton kernel for softmax(Q K^T / sqrt(d)) V: the forward pass of attention, for
sequence length 8192 and head dimension 128, with 128 x 128 tiles, and without materializing
Q K^T in global memory (FlashAttention-style online softmax). Inputs are (batch, heads, seq_len,
head_dim) tensors in fp16 or fp32. Provide a launcher

    def attention(q, k, v, causal=False, sm_scale=None) -> torch.Tensor

that returns the output (sm_scale defaults to 1/sqrt(head_dim)), and support causal masking.
"""
print(PROMPT)

DRAFTS = {
    name: verify.load_module(Path("drafts") / f"{name}.py", BLOCK_M=TILE, BLOCK_N=TILE)
    for name in ("draft_a", "draft_b", "draft_c")
}


def kernels_of(module):
    """The Triton kernels a draft defines."""
    return [k for k in vars(module).values() if isinstance(k, triton.KernelInterface)]


for name, draft in DRAFTS.items():
    lines = Path(draft.__file__).read_text().count("\n")
    summary = draft.__doc__.strip().splitlines()[0]
    kernels = ", ".join(k.__name__ for k in kernels_of(draft))
    print(f"{name}: {lines} lines, kernel {kernels}: {summary}")

# %% [markdown]
# Read the three files in `drafts/` as a colleague's pull request. All three follow 07's
# algorithm: each program owns a block of query rows, walks over key/value blocks and keeps a
# running max `m`, sum `l` and unnormalised output `acc`; when a block raises the max from `m_old`
# to `m_new`, all so far is multiplied by `exp(m_old - m_new)`.
#
# ## Why simple tests pass broken kernels
#
# A first test calls the kernel once, on a convenient shape. Each convenience hides bugs:
#
# - **Zeros** make every softmax uniform: a wrong scale, mask or rescale changes nothing.
# - **Multiples of the tile** never reach the partial last tile, where masks matter; **sizes within
#   one tile** never reach the rescaling between key blocks.
# - **One call on fresh tensors** cannot tell a kernel from a cache keyed on addresses.
# - **Fresh memory is often zero** (the system hands out zeroed pages): reading unwritten memory
#   passes until a buffer is recycled.
# - **A reference in the same low precision** cannot tell whose rounding it sees, and
#   `torch.allclose` ignores where NaN comes from.
#
# The cell runs two such tests, `torch.allclose` at 1e-2 on zeros and on one seed at N of one
# tile, and measures how far an fp16 reference is from float64.

# %%
def weak_test(attention, make):
    q, k, v = make()
    out = attention(q, k, v)
    return torch.allclose(out.float(), attn.reference(q, k, v).float(), atol=1e-2, rtol=1e-2)


shape = (1, 2, TILE, DEVICE.pick(gpu=64, interpreter=16))
where = DEVICE.torch_device
zeros = lambda: [torch.zeros(shape, device=where) for _ in range(3)]  # noqa: E731
one_seed = lambda: [torch.randn(shape, device=where) for _ in range(3)]  # noqa: E731
print(f"{'draft':8s}  {'zeros':6s}  one seed at N={TILE}")
passed_both = 0
for name, draft in DRAFTS.items():
    verdicts = [weak_test(draft.attention, make) for make in (zeros, one_seed)]
    passed_both += all(verdicts)
    print(f"{name:8s}  " + "  ".join(f"{'pass' if ok else 'FAIL':6s}" for ok in verdicts))
print(f"{passed_both} of {len(DRAFTS)} drafts pass both weak tests")

q, k, v = (checks.randn((1, 2, 256, 64), gen=checks.generator(0), dtype=torch.float16) for _ in "qkv")
exact = attn.reference(q, k, v)
fp16_error = (attn.naive(q, k, v).double() - exact).abs().max().item()
print(f"\nfp16 eager attention vs float64: max abs error {fp16_error:.1e}, fp16 tolerance "
      f"{attn.tolerance(torch.float16)[1]:.0e} + {attn.tolerance(torch.float16)[0]:.0e}*|expected|")

# %% [markdown]
# The fp16 eager error above is of the order of the fp16 tolerance: against an fp16 reference, a
# good kernel and a slightly wrong one look alike.
#
# ## The taxonomy and the audit
#
# `verify.audit(candidate, reference, cases)`, the weak test's opposite in KernelBench's spirit,
# sweeps cases sized relative to the tile (N=1, one tile, ragged tails, several key blocks), fp32
# and fp16, views, causal on and off, an explicit `sm_scale` and extreme values, each on two
# seeds, the second written into the first seed's tensors. Tensors the candidate allocates with
# `torch.empty` hold NaN poison; its calls to softmax, matmul or `scaled_dot_product_attention`
# are recorded. The reference is `attn.reference` in float64, the tolerance a few units in the
# last place of the output dtype.
#
# Below, the taxonomy ("fails as": how each defect fails), then the cases (sizes in tiles T), what
# each was built to catch, and what it rules out by construction (equal values average to
# themselves at any scale; the top key holds every query's largest score, so the running max
# never rises). Planted alone in a correct kernel with one-tile key blocks, each defect but one
# fails a case built to catch it and passes those that rule it out (the tests check).

# %%
print(verify.taxonomy_table())
CASES = attn.cases(tile=TILE)
print(f"\nthe sweep ({len(CASES)} cases, 2 seeds each; T = {TILE}):")
for case in CASES:
    catches, ruled = ", ".join(case.catches) or "-", ", ".join(case.rules_out) or "-"
    print(f"  {case.name:24s} catches {catches}; rules out {ruled}")

# %% [markdown]
# ### Draft A
#
# Read the table as evidence: which cases fail, and how. "wrong at 1435/1440" is a numerical error;
# "NaN/inf" a row whose softmax had nothing to normalise or a sum that overflowed; "poison" an output
# holding the NaN the audit put into fresh memory; "called torch..." PyTorch doing the work;
# "returned seed 1's output" a cache. Under the table, the review of the kernel's offset arithmetic,
# explained after the three audits.

# %%
def audit_draft(name):
    draft = DRAFTS[name]
    review = verify.offset_review(kernels_of(draft)[0], attn.LARGE_SHAPES)
    return verify.audit(draft.attention, attn.reference, CASES, review=review, name=name)


report_a = audit_draft("draft_a")

# %% [markdown]
# Draft A passes whole tiles, several key blocks and the extreme values, and fails exactly where
# N is ragged, where the mask is causal, and where the inputs are views. That pattern points at
# a few lines of code. Now draft B.

# %%
report_b = audit_draft("draft_b")

# %% [markdown]
# Draft B fails everywhere, so look at *how* each case fails, and at the second seed. Then
# draft C.

# %%
report_c = audit_draft("draft_c")

# %% [markdown]
# `report_c.explain(CASES[2].name)` (or any case's name) prints the full message behind a line,
# seeds and first mismatches included.
#
# ## What no small run can show: 32-bit offsets
#
# Triton computes in 32-bit integers unless told otherwise: `tl.program_id` is an `int32`, and so
# is every integer argument that fits. An offset such as `off_hz * N_CTX * HEAD_DIM` ((batch, head)
# pair times the size of one) is right until the product passes 2^31 - 1, then wraps negative, and
# the kernel touches memory before the tensor's start. With one tensor of 64 × 64 × 8192 × 128 =
# 2^32 elements (8 GiB in fp16), the last head's offset does not fit.
#
# The interpreter cannot show it: it needs the same tensors, four of 8 GiB, and an out-of-bounds
# access there ends the Python process. A large enough GPU can run it in a process of its own, as an
# illegal address ends the CUDA context (Further exercise 3). The audit reasons instead:
# `verify.offset_review` computes each shape's largest element offset and reads the kernel's source
# for products of a program id and a run-time size not first widened with `.to(tl.int64)`. The cell
# repeats the arithmetic in torch's int32.

# %%
B, H, N, D = attn.LARGE_SHAPES[0]
last = B * H - 1  # the last (batch, head) pair
wide = last * N * D
narrow = torch.tensor(last, dtype=torch.int32) * N * D  # int32 times Python ints stays int32
print(f"offset of the last head: {wide:,} needed, {int(narrow):,} computed in int32 "
      f"(verify.int32_wrap agrees: {verify.int32_wrap(wide):,})")
for name, report in (("draft_a", report_a), ("draft_b", report_b), ("draft_c", report_c)):
    review = report.review
    print(f"{name}: {len(review.findings)} int32 product(s) of a program id and a run-time size; "
          f"review {'ok' if review.ok else 'FAILS'}")

# %% [markdown]
# ### Exercise 1 · name and show the defects (3 points)
#
# For each draft, name the defects from the taxonomy it contains, and show each: map its id to
# the name of a case that shows it, one built to catch it that the draft fails the way the
# taxonomy says the defect fails (`verify.OFFSET_REVIEW` for the review). Draft A has four,
# draft B four, draft C three, eleven in all, each id used once, and each shows in the audit:
# read how a case fails, not only whether. Where two ids leave the same evidence in a case (no
# mask, and a fill of 0, where the loads past N give zeros), find a case that tells them apart,
# and read the code. A design choice that the audit does not catch and that gives right results
# is not a defect. Each draft is graded on its own: the visible test checks that its ids are
# known, as many as it has defects, each shown, and that together they account for every failure,
# each by an id the failing case does not rule out; the hidden test, that they are its defects.

# %% nbgrader={"grade_id": "defects-names", "solution": true}
DEFECTS = {
    "draft_a": {},  # {id: the name of the case that shows it}: ids from verify.TAXONOMY
    "draft_b": {},
    "draft_c": {},
}
### BEGIN SOLUTION
DEFECTS = {
    "draft_a": {
        "missing-mask": "ragged N=T+13",
        "causal-off-by-one": "causal one tile N=T",
        "assumes-contiguous": "strided views N=2T",
        "int32-offset": verify.OFFSET_REVIEW,
    },
    "draft_b": {
        "address-cache": "whole tiles N=2T",
        "uninit-read": "ragged N=T+13",
        "wrong-scale": "sm_scale=0.3 N=2T",
        "fp16-accum": "fp16 |V|~1000 flat N=3T",
    },
    "draft_c": {
        "torch-fallback": "N=1",
        "no-rescale": "rising scores N=3T",
        "zero-fill": "causal ragged N=T+7",
    },
}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test-defects-a", "points": 1}
named = verify.check_defects(DEFECTS, "draft_a", report_a, count=4)
print(f"draft_a: {len(named)} ids named, all known, as many as it has defects, each shown; "
      "graded against the planted set")
### BEGIN HIDDEN TESTS
_planted = {"missing-mask", "causal-off-by-one", "assumes-contiguous", "int32-offset"}
assert named == _planted, (
    f"draft_a: {len(named - _planted)} of the ids named are not defects of draft_a, and "
    f"{len(_planted - named)} of its defects are not named")
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test-defects-b", "points": 1}
named = verify.check_defects(DEFECTS, "draft_b", report_b, count=4)
print(f"draft_b: {len(named)} ids named, all known, as many as it has defects, each shown; "
      "graded against the planted set")
### BEGIN HIDDEN TESTS
_planted = {"address-cache", "uninit-read", "wrong-scale", "fp16-accum"}
assert named == _planted, (
    f"draft_b: {len(named - _planted)} of the ids named are not defects of draft_b, and "
    f"{len(_planted - named)} of its defects are not named")
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test-defects-c", "points": 1}
named = verify.check_defects(DEFECTS, "draft_c", report_c, count=3)
print(f"draft_c: {len(named)} ids named, all known, as many as it has defects, each shown; "
      "graded against the planted set")
### BEGIN HIDDEN TESTS
_planted = {"torch-fallback", "no-rescale", "zero-fill"}
assert named == _planted, (
    f"draft_c: {len(named - _planted)} of the ids named are not defects of draft_c, and "
    f"{len(_planted - named)} of its defects are not named")
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 2 · fix the most promising draft, then make it fast (9 points)
#
# Draft A is the one to keep: its structure is right and each defect is a local change. Starting
# from its code, write the three functions below; 6 points for correctness and integrity, 3 for
# speed on a GPU.
#
# **Fix** every defect you named in draft A. What must the score of a key at or past N be for it
# to take no weight, given that a zero key still scores 0? Which pairs (query i, key j) may a causal
# query see? Where must each tensor's strides enter the addresses for views to work, and what
# layout should the output you allocate have? In which integer type must the (batch, head) offset
# be before it meets a stride?
#
# On the interpreter, use 32 × 32 tiles (`q.is_cuda` tells the launcher where it runs).

# %% [markdown]
# **Make it fast.** Three things matter, in this order:
#
# - *Skip work the mask throws away.* With `causal=True`, key blocks wholly right of a query block
#   contribute nothing, and draft A stops there. Further: only blocks that straddle the diagonal
#   (or the ragged end) need a mask, so run the loop in two phases, unmasked then masked.
#   `attention_inner` is that loop, with `MASK` a `tl.constexpr` so each phase compiles apart.
# - *Tile sizes.* Each key/value tile is used by BLOCK_M query rows: 4·BLOCK_M·BLOCK_N·D FLOPs for
#   4·BLOCK_N·D bytes in fp16, about BLOCK_M FLOP per byte. 16-row tiles ask eight times as much
#   of memory per FLOP as 128-row ones, and cannot keep the tensor cores busy. Large tiles cost
#   registers and shared memory: 128 × 64 with 4 warps (8 for D = 128) and 3 stages is a
#   reasonable start on an H100 (Further exercise 4 sweeps it); fp32 needs smaller tiles.
# - *exp2.* `exp(x) = exp2(x · log2 e)`: fold log2 e into the scale once, as draft A does.

# %% nbgrader={"grade_id": "attention-fixed", "solution": true}
@triton.jit
def attention_inner(
    acc, l_i, m_i,  # running output (BLOCK_M, HEAD_DIM), sum (BLOCK_M,), max (BLOCK_M,)
    q,  # (BLOCK_M, HEAD_DIM) this program's queries
    k_ptrs, v_ptrs,  # (BLOCK_N, HEAD_DIM) pointers to key and value rows 0..BLOCK_N-1
    stride_kn, stride_vn,  # from one key row to the next, and one value row to the next
    offs_m, offs_n,  # (BLOCK_M,) this program's query rows, (BLOCK_N,) 0..BLOCK_N-1
    lo, hi,  # visit key rows lo..hi-1
    N, qk_scale,  # sequence length; sm_scale * log2(e)
    MASK: tl.constexpr,  # mask keys at or past N (and, if CAUSAL, keys after the query)
    CAUSAL: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    ### BEGIN SOLUTION
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n  # (BLOCK_N,) key rows of this step
        # -- load K and V: reads 2 * BLOCK_N * HEAD_DIM elements
        if MASK:
            k = tl.load(k_ptrs + start_n * stride_kn, mask=cols[:, None] < N, other=0.0)
            v = tl.load(v_ptrs + start_n * stride_vn, mask=cols[:, None] < N, other=0.0)
        else:
            k = tl.load(k_ptrs + start_n * stride_kn)  # (BLOCK_N, HEAD_DIM)
            v = tl.load(v_ptrs + start_n * stride_vn)  # (BLOCK_N, HEAD_DIM)
        # -- scores, masked where needed
        qk = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N)
        if MASK:
            keep = cols[None, :] < N  # (1, BLOCK_N)
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= cols[None, :])  # (BLOCK_M, BLOCK_N)
            qk = tl.where(keep, qk, float("-inf"))
        # -- online softmax: new max, rescale what came before, add this block
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)  # (BLOCK_M,)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.math.exp2(m_i - m_new)  # (BLOCK_M,)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)  # (BLOCK_M, HEAD_DIM)
        m_i = m_new
    ### END SOLUTION
    return acc, l_i, m_i


@triton.jit
def attention_kernel(
    # pointers to (batch, heads, N, HEAD_DIM) tensors, any strides
    Q, K, V, Out,
    # strides: batch, head, row, column of each tensor
    stride_qz, stride_qh, stride_qm, stride_qd,
    stride_kz, stride_kh, stride_kn, stride_kd,
    stride_vz, stride_vh, stride_vn, stride_vd,
    stride_oz, stride_oh, stride_om, stride_od,
    # sizes and scale
    H, N, sm_scale,
    # compile-time constants
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    ### BEGIN SOLUTION
    # -- which query rows, and which (batch, head): the head offset in int64
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    offs_d = tl.arange(0, HEAD_DIM)  # (HEAD_DIM,)

    # -- queries, loaded once: reads BLOCK_M * HEAD_DIM elements
    q_ptrs = (Q + off_z * stride_qz + off_h * stride_qh
              + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd)
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N, other=0.0)  # (BLOCK_M, HEAD_DIM)
    k_ptrs = (K + off_z * stride_kz + off_h * stride_kh
              + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd)  # (BLOCK_N, HEAD_DIM)
    v_ptrs = (V + off_z * stride_vz + off_h * stride_vh
              + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd)  # (BLOCK_N, HEAD_DIM)

    # -- online-softmax state
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # log2(e): exp(x) = exp2(x * log2(e))

    # -- the key loop in two phases: blocks that need no mask, then those that do
    if CAUSAL:
        lo = start_m * BLOCK_M  # keys before this block: all visible, all inside N
        acc, l_i, m_i = attention_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                        offs_m, offs_n, 0, lo, N, qk_scale,
                                        False, True, BLOCK_N)
        acc, l_i, m_i = attention_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                        offs_m, offs_n, lo, tl.minimum(lo + BLOCK_M, N), N,
                                        qk_scale, True, True, BLOCK_N)
    else:
        full = (N // BLOCK_N) * BLOCK_N  # whole key blocks; the ragged tail is masked
        acc, l_i, m_i = attention_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                        offs_m, offs_n, 0, full, N, qk_scale,
                                        False, False, BLOCK_N)
        acc, l_i, m_i = attention_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                        offs_m, offs_n, full, N, N, qk_scale,
                                        True, False, BLOCK_N)

    # -- normalize and store: writes BLOCK_M * HEAD_DIM elements
    acc = acc / l_i[:, None]
    o_ptrs = (Out + off_z * stride_oz + off_h * stride_oh
              + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od)
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=offs_m[:, None] < N)
    ### END SOLUTION


def attention(q, k, v, causal=False, sm_scale=None):
    """softmax(q kᵀ · sm_scale) v for (batch, heads, N, head_dim) tensors, by attention_kernel."""
    ### BEGIN SOLUTION
    batch, heads, n, head_dim = q.shape
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)
    out = torch.empty((batch, heads, n, head_dim), dtype=q.dtype, device=q.device)
    if not q.is_cuda:  # the interpreter: few, large tiles keep the Python loop short
        block_m, block_n, num_warps, num_stages = 32, 32, 4, 1
    elif q.element_size() == 4:  # fp32 (TF32 on the tensor cores): twice the bytes per tile
        block_m, block_n, num_warps, num_stages = 64, 32, 4, 2
    else:
        block_m, block_n, num_warps, num_stages = 128, 64, 4 if head_dim <= 64 else 8, 3
    grid = (triton.cdiv(n, block_m), batch * heads)
    attention_kernel[grid](
        q, k, v, out,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        heads, n, sm_scale,
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal,
        num_warps=num_warps, num_stages=num_stages,
    )
    return out
    ### END SOLUTION


# %% [markdown]
# ### Tests
#
# - **Visible: the audit**, the sweep that took the drafts apart, and the offset review at 2^32
#   elements; `verify.audit(...).explain(case_name)` prints a failed case's full message.
# - **Hidden: fuzz.** At grading, the audit runs on random shapes it has not shown you: ragged N,
#   causal and not, head dims 16, 32 and 64 on the interpreter (64 and 128 on a GPU), batch and
#   heads above 1, fp32 and fp16 (and bf16 on a GPU), contiguous and transposed.
# - **Integrity.** The graded call must launch your kernel and not call the reference: while
#   `attention` runs, a counting stand-in replaces `attention_kernel` in this notebook's namespace,
#   and a `torch.overrides.TorchFunctionMode` records calls to softmax, matmul or
#   `scaled_dot_product_attention`.

# %% nbgrader={"grade": true, "grade_id": "test-attention-visible", "points": 2}
review = verify.offset_review(attention_kernel, attn.LARGE_SHAPES)
verify.audit(attention, attn.reference, CASES, review=review).check()

# %% nbgrader={"grade": true, "grade_id": "test-attention-hidden", "points": 3}
verify.audit(attention, attn.reference, attn.fuzz_cases(count=1), show=False).check()
### BEGIN HIDDEN TESTS
fuzz = verify.audit(attention, attn.reference, attn.fuzz_cases(count=FUZZ_CASES), show=False)
fuzz.check()
print(f"hidden fuzz: {len(fuzz.results)} random cases pass")
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test-attention-integrity", "points": 1}
gen = checks.generator(checks.new_seed())
n_check = DEVICE.pick(gpu=1000, interpreter=70)
q, k, v = (checks.randn((2, 2, n_check, 64), gen=gen, dtype=torch.float16) for _ in "qkv")
rtol, atol = attn.tolerance(torch.float16)
for causal in (False, True):
    out = integrity.checked_call(attention, q, k, v, kernels=["attention_kernel"], causal=causal)
    checks.compare(out, attn.reference(q, k, v, causal), rtol=rtol, atol=atol)
print("launched attention_kernel, called no reference, right for causal and not")

# %% [markdown]
# ## Speed
#
# Speed is timed as every speed cell of the course times it (`perf.grade`): fresh float16 inputs
# at B=4, H=16, N=4096, D=64 before every timed call, outputs checked, and every GPU kernel of
# every timed call recorded (each must launch `attention_kernel`, and nothing else may run).
#
# The thresholds: on an H100 with torch 2.11, the course measured eager attention at 8-46 TFLOP/s
# and SDPA's FlashAttention backend at about 240-350, depending on shape; a good Triton forward
# kernel belongs with the second. The cells ask for 0.6x SDPA flash (non-causal and causal) and 3x
# eager: 0.6 x 240 = 144 TFLOP/s, above 3 x 46 = 138, so the bars agree with a margin. The course's
# tests check on a GPU that 16 x 16 tiles, or one launch per head, score none of these points.

# %%
def speed_case(causal: bool, baseline: str, at_least: float) -> perf.Case:
    """`attention` on fresh float16 inputs of SPEED_SHAPE, timed against `baseline`: eager
    PyTorch ("naive") or SDPA's FlashAttention backend ("flash")."""
    problem = attn.SpeedProblem(**SPEED_SHAPE)
    q, k, v = problem.inputs(checks.generator(checks.new_seed()))
    result = []

    def run():  # it returns its output: kept, for the check after a timed call
        result[:] = [attention(q, k, v, causal=causal)]
        return result[0]

    def verify():
        problem.compare(result[0], problem.reference(q, k, v, causal=causal))

    library = {"naive": attn.naive, "flash": attn.flash}[baseline]
    return perf.Case(run, kernels=["attention_kernel"], inputs=(q, k, v), out=None,
                     verify=verify, name=f"{'causal' if causal else 'non-causal'}",
                     flops=problem.flops("causal" if causal else "non-causal"),
                     dtype=torch.float16,
                     baselines=[perf.Baseline(f"{baseline} ({'causal' if causal else 'non-causal'})",
                                              lambda: library(q, k, v, causal=causal), at_least)])


# %% nbgrader={"grade": true, "grade_id": "speed-attention-naive", "points": 1}
perf.grade(speed_case(False, "naive", at_least=3.0), points=1)

# %% nbgrader={"grade": true, "grade_id": "speed-attention-flash", "points": 1}
perf.grade(speed_case(False, "flash", at_least=0.6), points=1)

# %% nbgrader={"grade": true, "grade_id": "speed-attention-flash-causal", "points": 1}
perf.grade(speed_case(True, "flash", at_least=0.6), points=1)

# %% [markdown]
# ## Optional: ask your own model
#
# This cell sends `MY_PROMPT` to an OpenAI-compatible chat endpoint named by environment
# variables: `COURSE_LLM_BASE_URL` (e.g. `http://localhost:8080/v1` for llama.cpp's
# `llama-server`, `http://localhost:8000/v1` for vLLM, or a hosted service), `COURSE_LLM_MODEL`,
# and `COURSE_LLM_API_KEY` if the server wants one, with Python's standard library only
# (`grader/runtime/llm.py`). The reply is saved as `my_draft.py` and printed. Importing it runs
# a model's code on your machine: read it first, then set `AUDIT_MY_DRAFT = True` in the
# parameters cell to audit it.

# %%
MY_PROMPT = PROMPT
try:
    endpoint = llm.config_from_env()
except llm.LLMError as problem:
    endpoint = None
    print(f"The endpoint is not usable: {problem}")
else:
    if endpoint is None:
        print(llm.not_configured())
if endpoint is not None:
    try:
        print(f"asking {endpoint.model} at {endpoint.base_url} ...")
        code = llm.extract_code(llm.chat(MY_PROMPT, config=endpoint))
        Path("my_draft.py").write_text(code)
        print(f"saved my_draft.py ({len(code.splitlines())} lines):\n\n{code}")
        if AUDIT_MY_DRAFT:
            mine = verify.load_module("my_draft.py")
            verify.audit(mine.attention, attn.reference, CASES, name="my_draft")
    except Exception as problem:  # the endpoint or the model's code: report it, go on
        print(f"{type(problem).__name__}: {problem}")

# %% [markdown]
# ## Your roofline
#
# Every notebook that times one of your kernels on a GPU keeps the measurement with
# `grader.runtime.results.record`. Here they all are on one roofline: ceilings measured now on a
# GPU, or the H100 datasheet's (labelled so) elsewhere.

# %%
with recorded.cell("08_verify/course-roofline"):
    entries = results.load(DEVICE.name) if DEVICE.is_gpu else results.load()
    if DEVICE.supports("timing") and RUN_BENCHMARKS:
        ceilings = roofline.measure_ceilings(precisions=("fp16", "tf32", "fp32"))
    else:
        ceilings = roofline.datasheet_h100()
    points = [
        roofline.Point(f"{e.notebook[:2]} {e.kernel}", e.flops, e.bytes_moved, e.seconds,
                       style={"color": f"C{int(e.notebook[:2]) % 10}"})
        for e in entries
    ]
    for e, p in zip(entries, points, strict=True):
        roof = ceilings.attainable(p.intensity, e.precision if e.precision in ceilings.flops else "fp16")
        print(f"{p.label:36s} {e.precision:5s} {p.intensity:8.2f} FLOP/B {p.achieved / 1e12:8.2f} "
              f"TFLOP/s, {p.achieved / roof:6.1%} of its roof ({e.device})")
    if not entries:
        print("No measurements recorded yet. The notebooks that time your kernels on a GPU record "
              "them: run 02 · First kernels to 07 · FlashAttention, and this one, on a GPU, then "
              "run this cell again.")
    roofline.show(ceilings, points, title=f"Your kernels: {ceilings.source}")
if not (DEVICE.supports("timing") and RUN_BENCHMARKS):
    print("\nThe course's reference kernels, measured on a GPU:")
    recorded.show("08_verify/course-roofline")

# %% [markdown]
# ## Summary
#
# - A passing test says little until you know what it could not catch: zeros, tile-multiple sizes,
#   one seed, unpoisoned memory and a low-precision reference each hide a class of bugs.
# - The audit sweeps sizes relative to the tile, dtypes, views, flags and extreme values, two seeds
#   in the same memory, with poisoned allocations and a watch on reference calls, against float64.
# - Defects leave signatures: wrong values only on ragged N (a mask), NaN in causal row 0 (an
#   off-by-one), inf on large fp16 sums (the accumulator), poison on ragged N (memory read before
#   written), an old output for new inputs (a cache), PyTorch calls (a fallback).
# - 32-bit offsets wrap past 2^31 elements, which no small run shows: review the arithmetic and
#   widen the (batch, head) offset to int64.
# - Speed counts only for your own code: one launch per call, no reference calls, output checked
#   after timing, fresh inputs for every timed call.
# - A fast forward kernel skips fully masked blocks, masks only the blocks that need it, and uses
#   tiles large enough that each key/value load feeds many queries.

# %% [markdown]
# ## Further exercises
#
# 1. Plant one defect at a time in your fixed kernel (a `0.0` for `-inf`, a `>` for `>=`, a missing
#    `* alpha`) and predict which audit cases fail before you run it.
# 2. Write a case the audit lacks, e.g. causal with N a multiple of BLOCK_N but not of BLOCK_M.
#    Which draft's defect does it expose first?
# 3. On a GPU with at least 40 GB, run draft A at B=64, H=64, N=8192, D=128 in a separate process
#    (`subprocess`) and compare its last head with the reference. Then run your kernel there.
# 4. Sweep BLOCK_M, BLOCK_N, num_warps and num_stages at N=4096 for D=64 and D=128, and plot
#    TFLOP/s. Where does the best configuration change, and why?
# 5. Send your model the audit's table for its draft and ask for a fix. How many rounds until it
#    passes, and does the fix pass the cases it was not shown?
