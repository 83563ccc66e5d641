"""Wrong and slow backward kernels for 10 · FlashAttention backward.

Each variant is a reference exercise cell (read from the notebook's source through `swapped`, so
that the two never drift apart) with one planted change. Exercise 1 (`DELTA`) is delta's kernel;
Exercise 2 (`DKDV`) the dK/dV loop with the non-causal kernel; Exercise 3 (`CAUSAL`) the causal
dK/dV kernel, which calls that loop; Exercise 4 (`DQ`) the dQ loop and kernel. The launchers are
given code, so every variant is an edit of a kernel.
"""

import re

from tests.known_wrong import Partial, _reference_cells, swapped

NOTEBOOK = "10_flash_backward"
DELTA, DKDV, CAUSAL, DQ = "bwd-delta", "bwd-dkdv", "bwd-dkdv-causal", "bwd-dq"


def _stub(grade_id: str) -> str:
    """The cell as nbgrader releases it: each solution region replaced by the stub."""
    return re.sub(
        r"( *)### BEGIN SOLUTION\n.*?### END SOLUTION\n",
        lambda m: f"{m.group(1)}raise NotImplementedError()\n",
        _reference_cells(NOTEBOOK)[grade_id],
        flags=re.S,
    )


def _region(grade_id: str) -> str:
    """The solution region of a cell with one, markers excluded."""
    source = _reference_cells(NOTEBOOK)[grade_id]
    begin = source.index("### BEGIN SOLUTION\n") + len("### BEGIN SOLUTION\n")
    return source[begin : source.index("    ### END SOLUTION")]


# the causal kernel's part written as the non-causal kernel's: every query of every key
NON_CAUSAL = """\
    full = (N // BLOCK_M) * BLOCK_M
    every_query = tl.zeros((BLOCK_N,), tl.int32)
    dk, dv = _attn_bwd_dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs,
                                   stride_qn, stride_don, offs_m, 0, full, N, every_query,
                                   qk_scale, BLOCK_M, False)
    dk, dv = _attn_bwd_dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs,
                                   stride_qn, stride_don, offs_m, full, N, N, every_query,
                                   qk_scale, BLOCK_M, True)
"""
DQ_MASK = """\
        if MASKED:
            qk = tl.where(cols[None, :] < key_limit[:, None], qk, float("-inf"))
        p = tl.math.exp2(qk * qk_scale - lse[:, None])  # (BLOCK_M, BLOCK_N)
"""

WRONG = {
    DELTA: {
        "stub left in place": _stub(DELTA),
        "delta from the wrong product": swapped(
            NOTEBOOK,
            DELTA,
            ("delta = tl.sum(o * do, axis=1)", "delta = tl.sum(o, axis=1) * tl.sum(do, axis=1)"),
        ),
        "products in float16": swapped(
            NOTEBOOK,
            DELTA,
            (
                "o = tl.load(o_ptrs, mask=rows[:, None] < N, other=0.0).to(tl.float32)",
                "o = tl.load(o_ptrs, mask=rows[:, None] < N, other=0.0)",
            ),
            (
                "do = tl.load(do_ptrs, mask=rows[:, None] < N, other=0.0).to(tl.float32)",
                "do = tl.load(do_ptrs, mask=rows[:, None] < N, other=0.0)",
            ),
        ),
    },
    DKDV: {
        "stub left in place": _stub(DKDV),
        "a forgotten * sm_scale in dK": swapped(
            NOTEBOOK, DKDV, ("tl.store(dk_ptrs, (dk * sm_scale)", "tl.store(dk_ptrs, (dk)")
        ),
        "float16 accumulators": swapped(
            NOTEBOOK,
            DKDV,
            (
                "dv += tl.dot(pT.to(do.dtype), do)",
                "dv = (dv + tl.dot(pT.to(do.dtype), do)).to(tl.float16).to(dv.dtype)",
            ),
            (
                "dk += tl.dot(dsT.to(q.dtype), q)",
                "dk = (dk + tl.dot(dsT.to(q.dtype), q)).to(tl.float16).to(dk.dtype)",
            ),
        ),
        "P rebuilt without the log-sum-exp": swapped(
            NOTEBOOK,
            DKDV,
            (
                "pT = tl.math.exp2(qkT * qk_scale - lse[None, :])",
                "pT = tl.math.exp2(qkT * qk_scale)",
            ),
        ),
        "dS without delta": swapped(
            NOTEBOOK, DKDV, ("dsT = pT * (dpT - delta[None, :])", "dsT = pT * dpT")
        ),
    },
    CAUSAL: {
        "stub left in place": _stub(CAUSAL),
        "non-causal backward": swapped(NOTEBOOK, CAUSAL, (_region(CAUSAL), NON_CAUSAL)),
        "causal mask off by one": swapped(
            NOTEBOOK, CAUSAL, ("first_query = cols  #", "first_query = cols + 1  #")
        ),
    },
    DQ: {
        "stub left in place": _stub(DQ),
        "a missing scale in dS": swapped(
            NOTEBOOK, DQ, ("tl.store(dq_ptrs, (dq * sm_scale)", "tl.store(dq_ptrs, (dq)")
        ),
        "the mask applied after the exponent": swapped(
            NOTEBOOK,
            DQ,
            (
                DQ_MASK,
                "        p = tl.math.exp2(qk * qk_scale - lse[:, None])\n"
                "        if MASKED:  # a hidden key's probability times 0\n"
                "            p = p * (cols[None, :] < key_limit[:, None])\n",
            ),
        ),
        "dQ accumulated without the row statistics": swapped(
            NOTEBOOK,
            DQ,
            ("p = tl.math.exp2(qk * qk_scale - lse[:, None])", "p = tl.math.exp2(qk * qk_scale)"),
        ),
        "dS without delta": swapped(
            NOTEBOOK, DQ, ("ds = p * (dp - delta[:, None])", "ds = p * dp")
        ),
    },
}

# The likely cause each failure must name (grader.runtime.hints); None: the bug fits no pattern.
HINTS = {
    DELTA: {
        "stub left in place": None,
        "delta from the wrong product": "wrong-formula",
        # the GPU's checks meet the rounding at their larger sizes before the overflow
        "products in float16": ("non-finite", "low-precision"),
    },
    DKDV: {
        "stub left in place": None,
        "a forgotten * sm_scale in dK": "wrong-scale",
        "float16 accumulators": ("non-finite", "low-precision"),
        "P rebuilt without the log-sum-exp": "wrong-formula",
        "dS without delta": "wrong-formula",
    },
    CAUSAL: {
        "stub left in place": None,
        "non-causal backward": "wrong-formula",
        "causal mask off by one": "causal-off-by-one",
    },
    DQ: {
        "stub left in place": None,
        "a missing scale in dS": "wrong-scale",
        "the mask applied after the exponent": "non-finite",
        "dQ accumulated without the row statistics": "row-normalisation",
        "dS without delta": "wrong-formula",
    },
}

# Each exercise is checked with the reference's lse and delta, so a submission earns the points
# of the exercises it gets right whatever it did in the others.
PARTIAL = {
    "delta left blank": Partial({DELTA: _stub(DELTA)}, earns=(DKDV,), fails=(DELTA,)),
    "the causal dK/dV kernel left blank": Partial(
        {CAUSAL: _stub(CAUSAL)}, earns=(DKDV, DQ), fails=(CAUSAL,)
    ),
}

# Correct but slow, each for a reason the speed cell must catch on a GPU (it follows the dQ
# exercise, so the variants are of its cell).
SLOW = {
    DQ: {
        # dS K multiplied in float32 off the tensor cores (the tiles are the launcher's, given)
        "dQ's product in float32": swapped(
            NOTEBOOK,
            DQ,
            (
                "dq += tl.dot(ds.to(k.dtype), k)",
                'dq += tl.dot(ds, k.to(ds.dtype), input_precision="ieee")',
            ),
        ),
        # the masked loop runs to N, through the key blocks it could have skipped
        "no causal block skipping in dQ": swapped(
            NOTEBOOK, DQ, ("tl.minimum(first_row + BLOCK_M, N), N, seen", "N, N, seen")
        ),
    },
}
