"""Wrong and slow FlashAttention kernels for 07 · FlashAttention.

Each variant is a reference exercise cell (read from the notebook's source, so that the two never
drift apart) with one planted change; `_edit` fails loudly if the text it changes is gone.
Exercise 1 (`LOOP`) is the non-causal kernel with its loop; Exercise 2 (`CAUSAL`) the causal
kernel, which calls that loop. The launcher is given code (the Checks cell), so every variant is
an edit of a kernel; the mistakes a launcher alone can make (torch computing the output, an N x N
buffer allocated) run in no graded call (tests/hostile/flash_attention.py).
"""

import re

from grader.authoring import build
from tests.known_wrong import Partial, swapped

NOTEBOOK = "07_flash_attention"
LOOP = "flash-attention-kernel"
CAUSAL = "flash-attention-causal"

_CELLS = {
    c.id: c.source
    for c in build.to_notebook(build.SOLUTIONS / NOTEBOOK / "flash_attention.py").cells
    if c.id in (LOOP, CAUSAL)
}


def _edit(grade_id: str, *pairs: tuple[str, str]) -> str:
    source = _CELLS[grade_id]
    for old, new in pairs:
        assert old in source, f"known-wrong edit no longer applies: {old!r}"
        source = source.replace(old, new)
    return source


def _stub(grade_id: str) -> str:
    """The cell as nbgrader releases it: each solution region replaced by the stub."""
    return re.sub(
        r"( *)### BEGIN SOLUTION\n.*?### END SOLUTION\n",
        lambda m: f"{m.group(1)}raise NotImplementedError()\n",
        _CELLS[grade_id],
        flags=re.S,
    )


def _region(grade_id: str) -> str:
    """The solution region of a cell with one, markers included."""
    source = _CELLS[grade_id]
    return source[source.index("    ### BEGIN SOLUTION") : source.index("### END SOLUTION\n") + 17]


KEY_MASK = 'qk = tl.where(cols[None, :] < key_limit[:, None], qk, float("-inf"))'
# the causal kernel's part written as the non-causal kernel's: every key of every row
NON_CAUSAL = """\
    full = (N // BLOCK_N) * BLOCK_N
    every_key = tl.zeros((BLOCK_M,), tl.int32) + N
    acc, m_i, l_i = _attn_fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                     offs_n, 0, full, N, every_key, qk_scale, BLOCK_N, False)
    acc, m_i, l_i = _attn_fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                     offs_n, full, N, N, every_key, qk_scale, BLOCK_N, True)
"""
_DIAGONAL_CALL = _CELLS[CAUSAL][
    _CELLS[CAUSAL].index("    # -- the diagonal blocks") : _CELLS[CAUSAL].index(
        "    ### END SOLUTION"
    )
]

_BOUND = """    if max(memory, compute) < 60:
        return "latency"
    return "memory" if memory >= compute else "compute"
"""


def _bound(body: str) -> str:
    return swapped(NOTEBOOK, "attention-bound", (_BOUND, body))


WRONG = {
    "attention-bound": {
        "the smaller figure binds": _bound(
            '    if max(memory, compute) < 60:\n        return "latency"\n'
            '    return "memory" if memory < compute else "compute"\n'
        ),
        "never latency": _bound('    return "memory" if memory >= compute else "compute"\n'),
        "near its peak only at 95%": _bound(
            '    if max(memory, compute) < 95:\n        return "latency"\n'
            '    return "memory" if memory >= compute else "compute"\n'
        ),
        "the tensor pipe taken for compute": _bound(
            '    if max(memory, k.tensor_pipe_pct) < 60:\n        return "latency"\n'
            '    return "memory" if memory >= k.tensor_pipe_pct else "compute"\n'
        ),
    },
    LOOP: {
        "stub left in place": _stub(LOOP),
        "accumulator not rescaled": _edit(LOOP, ("        acc = acc * alpha[:, None]\n", "")),
        "running sum not rescaled": _edit(
            LOOP, ("l_i = l_i * alpha + tl.sum(p, 1)", "l_i = l_i + tl.sum(p, 1)")
        ),
        "running max not carried to the next block": _edit(LOOP, ("        m_i = m_ij\n", "")),
        # the scores are in base 2 (qk_scale holds log2(e)): e to their power is another softmax
        "exp on the base-2 scores": _edit(
            LOOP,
            ("p = tl.math.exp2(qk * qk_scale", "p = tl.exp(qk * qk_scale"),
            ("alpha = tl.math.exp2(m_i - m_ij)", "alpha = tl.exp(m_i - m_ij)"),
        ),
        "masked scores set to 0": _edit(LOOP, (KEY_MASK, KEY_MASK.replace('float("-inf")', "0.0"))),
        "keys past N left in the softmax": _edit(LOOP, (KEY_MASK, "pass")),
        "float16 accumulator": _edit(
            LOOP,
            (
                "acc = tl.dot(p.to(v.dtype), v, acc)",
                "acc = tl.dot(p.to(v.dtype), v, acc.to(tl.float16)).to(tl.float32)",
            ),
        ),
    },
    CAUSAL: {
        "stub left in place": _stub(CAUSAL),
        "non-causal attention": _edit(CAUSAL, (_region(CAUSAL), NON_CAUSAL)),
        "causal mask off by one": _edit(CAUSAL, ("own_key = offs_m + 1", "own_key = offs_m")),
        "the diagonal masks only keys past N": _edit(
            CAUSAL, ("own_key = offs_m + 1", "own_key = tl.zeros_like(offs_m) + N")
        ),
        "the diagonal's last block left out": _edit(
            CAUSAL, ("tl.minimum(diagonal + BLOCK_M, N)", "tl.minimum(diagonal + BLOCK_N, N)")
        ),
        "the diagonal left out": _edit(CAUSAL, (_DIAGONAL_CALL, "")),
    },
}

# The likely cause each failure must name (grader.runtime.hints); None: the bug fits no pattern.
HINTS = {
    "attention-bound": dict.fromkeys(WRONG["attention-bound"]),
    LOOP: {
        "stub left in place": None,
        "accumulator not rescaled": None,
        "running sum not rescaled": "row-normalisation",
        "running max not carried to the next block": None,
        "exp on the base-2 scores": None,
        "masked scores set to 0": "row-normalisation",
        "keys past N left in the softmax": "row-normalisation",
        # Triton 3.6 compiles no float16 accumulator for a GPU (gpu-compile); 3.9 runs it
        "float16 accumulator": ("non-finite", "gpu-compile"),
    },
    CAUSAL: {
        "stub left in place": None,
        "non-causal attention": None,
        "causal mask off by one": "causal-off-by-one",
        "the diagonal masks only keys past N": None,
        "the diagonal's last block left out": None,
        "the diagonal left out": "non-finite",
    },
}

# Right for Exercise 1, blank or wrong for Exercise 2: Exercise 1's tests must pass (its points
# do not depend on the causal kernel), and Exercise 2's must not.
PARTIAL = {
    name: Partial({CAUSAL: WRONG[CAUSAL][variant]}, earns=(LOOP,), fails=(CAUSAL,))
    for name, variant in (
        ("non-causal only, the causal kernel left blank", "stub left in place"),
        ("non-causal only, the causal kernel not causal", "non-causal attention"),
    )
}

_BOTH_STRETCHES = _CELLS[LOOP][
    _CELLS[LOOP].index("    # -- whole key blocks without a mask") : _CELLS[LOOP].index(
        "    # -- normalise and store"
    )
]

# Correct but slow, each for a reason the speed cells must catch on a GPU.
SLOW = {
    LOOP: {
        # P V multiplied in float32 off the tensor cores (the tiles are the launcher's, given)
        "P V in float32": _edit(
            LOOP,
            (
                "acc = tl.dot(p.to(v.dtype), v, acc)",
                'acc = tl.dot(p, v.to(p.dtype), acc, input_precision="ieee")',
            ),
        ),
        # a first pass over K/V for the final max, a second for the output
        "two passes over K/V": _edit(
            LOOP,
            (
                _BOTH_STRETCHES,
                _BOTH_STRETCHES
                + "    l_i = tl.zeros((BLOCK_M,), tl.float32)\n"
                + "    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)\n"
                + _BOTH_STRETCHES,
            ),
        ),
    },
    CAUSAL: {
        # the masked loop runs to N, through the blocks it could have skipped: twice the work
        "no causal block skipping": _edit(
            CAUSAL, ("tl.minimum(diagonal + BLOCK_M, N), N,", "N, N,")
        ),
    },
}

_STATE = _CELLS[LOOP][
    _CELLS[LOOP].index("        m_ij = tl.maximum(") : _CELLS[LOOP].index(
        "        ### END SOLUTION"
    )
]
_ACC = "        acc = acc * alpha[:, None]\n        acc = tl.dot(p.to(v.dtype), v, acc)"

# Right, written other ways than the reference: each must pass every test of its exercise, in the
# interpreter as on a GPU (tests/test_known_wrong.py).
OTHER_WAYS = {
    LOOP: {
        # python/tutorials/06-fused-attention.py: the scores scaled first, the max subtracted
        "Triton's tutorial order: scale, then subtract the max": _edit(
            LOOP,
            (
                _STATE,
                """        qk = qk * qk_scale
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        qk = qk - m_ij[:, None]
        p = tl.math.exp2(qk)
        l_ij = tl.sum(p, 1)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + l_ij
""",
            ),
        ),
        "natural exp, log2(e) taken back out of the scale": _edit(
            LOOP,
            (
                _STATE,
                """        scale = qk_scale * 0.6931471805599453  # ln(2) log2(e) / sqrt(D)
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * scale)
        p = tl.exp(qk * scale - m_ij[:, None])
        alpha = tl.exp(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
""",
            ),
        ),
        "libdevice.exp2": "from triton.language.extra import libdevice\n"
        + _edit(LOOP, (_STATE, _STATE.replace("tl.math.exp2(", "libdevice.exp2("))),
        "alpha by tl.where on the first block, P V added after the dot": _edit(
            LOOP,
            (
                "alpha = tl.math.exp2(m_i - m_ij)",
                'alpha = tl.where(m_i == float("-inf"), 0.0, tl.math.exp2(m_i - m_ij))',
            ),
            (_ACC, "        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)"),
        ),
    },
    CAUSAL: {
        # every block up to the diagonal's end masked, none left unmasked: right, and slower
        "one masked call up to the diagonal": _edit(
            CAUSAL,
            (
                _region(CAUSAL),
                """    own_key = offs_m + 1  # row i sees the keys j < i + 1
    hi = tl.minimum((start_m + 1) * BLOCK_M, N)
    acc, m_i, l_i = _attn_fwd_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, stride_kn, stride_vn,
                                     offs_n, 0, hi, N, own_key, qk_scale, BLOCK_N, True)
""",
            ),
        ),
    },
}
