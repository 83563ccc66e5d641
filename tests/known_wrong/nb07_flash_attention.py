"""Wrong and slow FlashAttention kernels for 07 · FlashAttention.

Each variant is the reference exercise cell (read from the notebook's source, so that the two
never drift apart) with one planted change; `_edit` fails loudly if the text it changes is gone.
"""

import re

from grader.authoring import build

NOTEBOOK = "07_flash_attention"
GRADE_ID = "flash-attention-kernel"

_SOURCE = next(
    c.source
    for c in build.to_notebook(build.SOLUTIONS / NOTEBOOK / "flash_attention.py").cells
    if c.id == GRADE_ID
)


def _edit(*pairs: tuple[str, str]) -> str:
    source = _SOURCE
    for old, new in pairs:
        assert old in source, f"known-wrong edit no longer applies: {old!r}"
        source = source.replace(old, new)
    return source


def _stub() -> str:
    """The cell as nbgrader releases it: each solution region replaced by the stub."""
    return re.sub(
        r"( *)### BEGIN SOLUTION\n.*?### END SOLUTION\n",
        lambda m: f"{m.group(1)}raise NotImplementedError()\n",
        _SOURCE,
        flags=re.S,
    )


CAUSAL_MASK = "visible = (offs_m[:, None] >= cols[None, :]) & (cols[None, :] < N)"
TAIL_MASK = """        elif MASK_N:
            qk = tl.where(cols[None, :] < N, qk, float("-inf"))
"""
LAUNCH = "    attn_fwd_kernel[grid](\n"
TORCH_ATTENTION = """\
    scores = (q.float()[..., :, None, :] * k.float()[..., None, :, :]).sum(-1) / math.sqrt(d)
    if causal:
        hidden = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(hidden, float("-inf"))
    p = (scores - scores.amax(-1, keepdim=True)).exp()
    p = p / p.sum(-1, keepdim=True)
    return out.copy_((p[..., :, :, None] * v.float()[..., None, :, :]).sum(-2))
"""

WRONG = {
    GRADE_ID: {
        "stub left in place": _stub(),
        "accumulator not rescaled": _edit(("        acc = acc * alpha[:, None]\n", "")),
        "exp2 without log2(e) in the scale": _edit(
            ("h, n, LOG2E / math.sqrt(d),", "h, n, 1.0 / math.sqrt(d),")
        ),
        "causal mask off by one": _edit((CAUSAL_MASK, CAUSAL_MASK.replace(">=", ">"))),
        "masked scores set to 0": _edit(
            ('qk = tl.where(visible, qk, float("-inf"))', "qk = tl.where(visible, qk, 0.0)"),
            (
                'qk = tl.where(cols[None, :] < N, qk, float("-inf"))',
                "qk = tl.where(cols[None, :] < N, qk, 0.0)",
            ),
        ),
        "keys past N left in the softmax": _edit((TAIL_MASK, "")),
        "float16 accumulator": _edit(
            (
                "acc = tl.dot(p.to(v.dtype), v, acc)",
                "acc = tl.dot(p.to(v.dtype), v, acc.to(tl.float16)).to(tl.float32)",
            )
        ),
        "allocates the N x N scores": _edit(
            (
                LAUNCH,
                "    scores = torch.empty((b, h, n, n), device=q.device, dtype=torch.float16)\n"
                "    scores.zero_()\n" + LAUNCH,
            )
        ),
        # the kernel left blank; attention from broadcasting, which calls no refused function
        "attention by broadcasting in the launcher": _stub().replace(
            LAUNCH, TORCH_ATTENTION + LAUNCH
        ),
        "calls SDPA": _edit(
            (
                LAUNCH,
                "    out.copy_(torch.nn.functional.scaled_dot_product_attention(\n"
                "        q, k, v, is_causal=causal))\n"
                "    return out\n" + LAUNCH,
            )
        ),
    },
}

_TWO_PASSES_BLOCK = _SOURCE[
    _SOURCE.index("    if CAUSAL:\n        # -- key blocks") : _SOURCE.index(
        "    # -- normalise and store"
    )
]

# Correct but slow, each for a reason the speed cell must catch on a GPU.
SLOW = {
    GRADE_ID: {
        # tiles too small for the tensor cores to pay off, and 8x more loop iterations
        "16 x 16 tiles": _edit(
            (
                "GPU_CONFIGS = {64: (128, 64, 8, 3), 128: (128, 64, 8, 3)}",
                "GPU_CONFIGS = {64: (16, 16, 4, 2), 128: (16, 16, 4, 2)}",
            )
        ),
        # the causal loop runs to N, masking the blocks it could have skipped: twice the work
        "no causal block skipping": _edit(
            ("tl.minimum(diagonal + BLOCK_M, N), N, qk_scale,", "N, N, qk_scale,")
        ),
        # a first pass over K/V for the final max, a second for the output
        "two passes over K/V": _edit(
            (
                _TWO_PASSES_BLOCK,
                _TWO_PASSES_BLOCK
                + "    l_i = tl.zeros((BLOCK_M,), tl.float32)\n"
                + "    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)\n"
                + _TWO_PASSES_BLOCK,
            )
        ),
    },
}
