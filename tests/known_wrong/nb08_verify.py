"""Wrong answers for 08 · Trust, but verify: defect sets that do not match the planted ones, and
fixed kernels that keep (or add) one defect each, made by editing the solution cell so that each
differs from the reference in exactly the way its name says. SLOW: correct but clearly slower."""

import re
from pathlib import Path

from grader.authoring import build

NOTEBOOK = "08_verify"
SOURCE = Path(__file__).resolve().parents[2] / "solutions" / NOTEBOOK / "verify.py"
CELLS = {c.id: c.source for c in build.to_notebook(SOURCE).cells}


def edit(grade_id: str, *pairs: tuple[str, str]) -> str:
    """The solution cell `grade_id` with each `old` (which must occur exactly once) replaced."""
    source = CELLS[grade_id]
    for old, new in pairs:
        assert source.count(old) == 1, f"{old!r} occurs {source.count(old)} times in {grade_id}"
        source = source.replace(old, new)
    return source


def stubbed(grade_id: str) -> str:
    """The cell as a student receives it: every solution region replaced by the stub."""
    return re.sub(
        r"( *)### BEGIN SOLUTION\n.*?### END SOLUTION(\n|$)",
        lambda m: f"{m.group(1)}# YOUR CODE HERE\n{m.group(1)}raise NotImplementedError()\n",
        CELLS[grade_id],
        flags=re.S,
    )


A = """    "draft_a": {
        "missing-mask": "ragged N=T+13",
        "causal-off-by-one": "causal one tile N=T",
        "assumes-contiguous": "strided views N=2T",
        "int32-offset": verify.OFFSET_REVIEW,
    },"""
C = """    "draft_c": {
        "torch-fallback": "N=1",
        "no-rescale": "rising scores N=3T",
        "zero-fill": "causal ragged N=T+7",
    },"""

SOLUTION = CELLS["defects-names"].split("### BEGIN SOLUTION\n")[1].split("### END SOLUTION")[0]

LAUNCH = """\
    attention_kernel[grid](
        q, k, v, out,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        heads, n, sm_scale,
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal,
        num_warps=num_warps, num_stages=num_stages,
    )
"""
FP16_TILES = "block_m, block_n, num_warps, num_stages = 128, 64, 4 if head_dim <= 64 else 8, 3"

WRONG = {
    "defects-names": {
        "template left as it is": CELLS["defects-names"].split("### BEGIN SOLUTION")[0],
        "draft_a: int32 overflow missed": edit(
            "defects-names", ('        "int32-offset": verify.OFFSET_REVIEW,\n', "")
        ),
        "draft_a: the mask called zero-fill": edit(
            "defects-names", ('"missing-mask": "ragged N=T+13"', '"zero-fill": "ragged N=T+13"')
        ),
        "draft_a: the mask called zero-fill, shown by the causal case": edit(
            "defects-names",
            ('"missing-mask": "ragged N=T+13"', '"zero-fill": "causal one tile N=T"'),
        ),
        "draft_b: the padding called a missing mask": edit(
            "defects-names", ('"uninit-read": "ragged N=T+13"', '"missing-mask": "ragged N=T+13"')
        ),
        "draft_b: the scale called no-rescale": edit(
            "defects-names",
            ('"wrong-scale": "sm_scale=0.3 N=2T"', '"no-rescale": "rising scores N=3T"'),
        ),
        "draft_b: fp16 accumulation missed": edit(
            "defects-names", ('        "fp16-accum": "fp16 |V|~1000 flat N=3T",\n', "")
        ),
        "draft_b: the cache shown by a case it does not fail": edit(
            "defects-names", ('"address-cache": "whole tiles N=2T"', '"address-cache": "N=1"')
        ),
        "draft_c: the fill called a missing mask": edit(
            "defects-names",
            ('"zero-fill": "causal ragged N=T+7"', '"missing-mask": "ragged N=T+13"'),
        ),
        "draft_c: a missing mask added": edit(
            "defects-names",
            (
                '"zero-fill": "causal ragged N=T+7",',
                '"zero-fill": "causal ragged N=T+7",\n        "missing-mask": "ragged N=T+13",',
            ),
        ),
        "draft_a and draft_c swapped": edit(
            "defects-names",
            (A, A.replace("draft_a", "draft_x")),
            (C, C.replace("draft_c", "draft_a")),
            (A.replace("draft_a", "draft_x"), A.replace("draft_a", "draft_c")),
        ),
        "an id not in the taxonomy": edit(
            "defects-names", ('"causal-off-by-one": ', '"off-by-one": ')
        ),
        "a case named by its size, not in tiles": edit(
            "defects-names", ('"rising scores N=3T"', '"rising scores N=96"')
        ),
        "sets of ids, the cases left out": CELLS["defects-names"].split("### BEGIN SOLUTION")[0]
        + SOLUTION.replace("DEFECTS = {", "SHOWN = {")
        + "DEFECTS = {d: set(ids) for d, ids in SHOWN.items()}\n",
    },
    "attention-fixed": {
        "stub left in place": stubbed("attention-fixed"),
        "missing-mask: ragged tail not masked": edit(
            "attention-fixed", ("keep = cols[None, :] < N", "keep = cols[None, :] >= 0")
        ),
        "causal-off-by-one: query cannot see itself": edit(
            "attention-fixed",
            ("offs_m[:, None] >= cols[None, :]", "offs_m[:, None] > cols[None, :]"),
        ),
        "causal skipping stops a block early": edit(
            "attention-fixed",
            ("tl.minimum(lo + BLOCK_M, N)", "tl.minimum(lo + BLOCK_M - BLOCK_N, N)"),
        ),
        "zero-fill: masked scores set to 0": edit(
            "attention-fixed",
            ('qk = tl.where(keep, qk, float("-inf"))', "qk = tl.where(keep, qk, 0.0)"),
        ),
        "no-rescale: accumulator not rescaled": edit(
            "attention-fixed",
            ("acc = acc * alpha[:, None] + tl.dot(", "acc = acc + tl.dot("),
        ),
        "wrong-scale: exp2 without log2(e)": edit(
            "attention-fixed", ("qk_scale = sm_scale * 1.4426950408889634", "qk_scale = sm_scale")
        ),
        "wrong-scale: sm_scale argument ignored": edit(
            "attention-fixed",
            (
                "    if sm_scale is None:\n        sm_scale = 1.0",
                "    if True:\n        sm_scale = 1.0",
            ),
        ),
        "fp16-accum: accumulator in fp16": edit(
            "attention-fixed",
            (
                "acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)",
                "acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float16)",
            ),
            (
                "acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)",
                "acc = (acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)).to(tl.float16)",
            ),
        ),
        "assumes-contiguous: the output's strides for every input": edit(
            "attention-fixed",
            (
                "*q.stride(), *k.stride(), *v.stride(),",
                "*out.stride(), *out.stride(), *out.stride(),",
            ),
        ),
        "int32-offset: head offset left in int32": edit(
            "attention-fixed",
            ("off_z = (off_hz // H).to(tl.int64)", "off_z = off_hz // H"),
            ("off_h = (off_hz % H).to(tl.int64)", "off_h = off_hz % H"),
        ),
        "torch-fallback: ragged N handed to PyTorch": edit(
            "attention-fixed",
            (
                "    grid = (triton.cdiv(n, block_m), batch * heads)\n",
                "    if n % block_n:\n"
                "        scores = q.float() @ k.float().transpose(-2, -1) * sm_scale\n"
                "        if causal:\n"
                "            future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)\n"
                '            scores = scores.masked_fill(future, float("-inf"))\n'
                "        return (torch.softmax(scores, dim=-1) @ v.float()).to(q.dtype)\n"
                "    grid = (triton.cdiv(n, block_m), batch * heads)\n",
            ),
        ),
        "address-cache: results remembered by input address": edit(
            "attention-fixed",
            (
                "    batch, heads, n, head_dim = q.shape\n",
                "    key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), q.shape, causal, sm_scale)\n"
                "    if key in attention.__dict__.setdefault('cache', {}):\n"
                "        return attention.cache[key]\n"
                "    batch, heads, n, head_dim = q.shape\n",
            ),
            ("    return out\n", "    attention.cache[key] = out\n    return out\n"),
        ),
        "grid misses the ragged tail": edit(
            "attention-fixed",
            (
                "grid = (triton.cdiv(n, block_m), batch * heads)",
                "grid = (n // block_m, batch * heads)",
            ),
        ),
        "fp32 output for fp16 inputs": edit(
            "attention-fixed",
            ("head_dim), dtype=q.dtype, device=q.device)", "head_dim), device=q.device)"),
        ),
    },
}

# The hint each failure's message must carry (grader.runtime.hints): none. The defect names have
# messages of their own, and the audit's report leaves the checker's hints out, since their
# patterns are the taxonomy's ids that the exercise asks for.
HINTS = {grade_id: dict.fromkeys(variants) for grade_id, variants in WRONG.items()}

# Correct but clearly slower on a GPU. Tiles of 16 x 16 use each key/value load for 16 queries
# only and are too small for the tensor cores; one launch per (batch, head) pays a launch each and
# fills only cdiv(N, BLOCK_M) = 32 programs at N=4096, on a GPU with 132 SMs.
SLOW = {
    "attention-fixed": {
        "16 x 16 tiles": edit(
            "attention-fixed",
            (FP16_TILES, "block_m, block_n, num_warps, num_stages = 16, 16, 4, 2"),
        ),
        "one launch per (batch, head)": edit(
            "attention-fixed",
            (
                "    grid = (triton.cdiv(n, block_m), batch * heads)\n" + LAUNCH,
                "    grid = (triton.cdiv(n, block_m), 1)\n"
                "    for b in range(batch):\n"
                "        for h in range(heads):\n"
                "            one = (slice(b, b + 1), slice(h, h + 1))\n"
                "            attention_kernel[grid](\n"
                "                q[one], k[one], v[one], out[one],\n"
                "                *q.stride(), *k.stride(), *v.stride(), *out.stride(),\n"
                "                1, n, sm_scale,\n"
                "                HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n,\n"
                "                CAUSAL=causal, num_warps=num_warps, num_stages=num_stages,\n"
                "            )\n",
            ),
        ),
    },
}
