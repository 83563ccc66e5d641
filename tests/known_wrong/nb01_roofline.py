"""Wrong counting, classification and prediction functions for 01 · The memory wall and the
roofline. Each is the reference exercise cell with one classic mistake swapped in, so that the
wrong versions follow the reference as it changes (a swap that no longer applies fails loudly)."""

import re

from grader.authoring import build

NOTEBOOK = "01_roofline"
_SOURCE = build.SOLUTIONS / NOTEBOOK / "roofline.py"
_CELLS = {c.id: c.source for c in build.to_notebook(_SOURCE).cells}


def _stub(grade_id: str) -> str:
    """The cell as nbgrader releases it: every solution region replaced by the stub."""
    return re.sub(
        r"( *)### BEGIN SOLUTION\n.*?### END SOLUTION",
        r"\1# YOUR CODE HERE\n\1raise NotImplementedError()",
        _CELLS[grade_id],
        flags=re.S,
    )


def _swap(grade_id: str, *pairs: tuple[str, str]) -> str:
    """The reference cell with each `old` (which must occur exactly once) replaced by `new`."""
    source = _CELLS[grade_id]
    for old, new in pairs:
        found = source.count(old)
        if found != 1:
            raise ValueError(f"{grade_id}: {old!r} occurs {found} times in the reference")
        source = source.replace(old, new)
    return source


WRONG = {
    "roofline-costs": {
        "stub left in place": _stub("roofline-costs"),
        "counts elements, not bytes": _swap(
            "roofline-costs", ("size = ELEMENT_BYTES[dtype]", "size = 1")
        ),
        "4 bytes for every dtype": _swap(
            "roofline-costs", ("size = ELEMENT_BYTES[dtype]", "size = 4")
        ),
        "forgets the output write": _swap(
            "roofline-costs",
            ("return 2 * math.prod(shape) * size", "return math.prod(shape) * size"),
            ("return 3 * math.prod(shape) * size", "return 2 * math.prod(shape) * size"),
            ("return (m * k + k * n + m * n) * size", "return (m * k + k * n) * size"),
            ("batch * heads * 4 * n * d * size", "batch * heads * 3 * n * d * size"),
        ),
        "matmul counts N^3, not 2N^3": _swap(
            "roofline-costs", ("return 2 * m * n * k", "return m * n * k")
        ),
        "matmul bytes as if square": _swap(
            "roofline-costs",
            ("return (m * k + k * n + m * n) * size", "return 3 * m * m * size"),
        ),
        "softmax without the exp": _swap(
            "roofline-costs", ("return 5 * math.prod(shape)", "return 4 * math.prod(shape)")
        ),
        "attention without the softmax's FLOPs": _swap(
            "roofline-costs", ("scores + probabilities + output", "scores + output")
        ),
        "attention forgets the heads": _swap(
            "roofline-costs",
            ("return batch * heads * (scores", "return batch * (scores"),
        ),
        "naive attention counted like tiled": _swap(
            "roofline-costs",
            ('if op == "attention_tiled":', 'if op in ("attention_tiled", "attention_naive"):'),
        ),
        "tiled attention counts S and P": _swap(
            "roofline-costs",
            ('if op == "attention_tiled":', 'if op == "attention_tiled, never":'),
            ('if op == "attention_naive":', 'if op in ("attention_naive", "attention_tiled"):'),
        ),
        "intensity upside down": _swap(
            "roofline-costs",
            (
                "return op_flops(op, shape) / op_bytes(op, shape, dtype)",
                "return op_bytes(op, shape, dtype) / op_flops(op, shape)",
            ),
        ),
    },
    "roofline-bound": {
        "stub left in place": _stub("roofline-bound"),
        "always the fp16 ridge": _swap(
            "roofline-bound",
            ("precision = compute_precision(op, dtype, tf32)", 'precision = "fp16"'),
        ),
        "ignores TF32": _swap(
            "roofline-bound",
            ("compute_precision(op, dtype, tf32)", "compute_precision(op, dtype)"),
        ),
        "memory and compute swapped": _swap(
            "roofline-bound",
            ('return "compute" if', 'return "memory" if'),
            ('else "memory"', 'else "compute"'),
        ),
        "the ridge itself counted as memory": _swap(
            "roofline-bound",
            ("op_intensity(op, shape, dtype) >= ridge", "op_intensity(op, shape, dtype) > ridge"),
        ),
        "compares FLOPs, not intensity": _swap(
            "roofline-bound",
            ("op_intensity(op, shape, dtype) >= ridge", "op_flops(op, shape) >= ridge"),
        ),
        "ridge upside down": _swap(
            "roofline-bound",
            (
                "ceilings.flops[precision] / ceilings.bandwidth",
                "ceilings.bandwidth / ceilings.flops[precision]",
            ),
        ),
        "compares with the peak rate, not the ridge": _swap(
            "roofline-bound",
            (
                "ridge = ceilings.flops[precision] / ceilings.bandwidth",
                "ridge = ceilings.flops[precision]",
            ),
        ),
    },
    "roofline-predict": {
        "stub left in place": _stub("roofline-predict"),
        "compute floor only": _swap(
            "roofline-predict", ("return max(compute, memory)", "return compute")
        ),
        "memory floor only": _swap(
            "roofline-predict", ("return max(compute, memory)", "return memory")
        ),
        "adds the floors": _swap(
            "roofline-predict", ("return max(compute, memory)", "return compute + memory")
        ),
        "the smaller floor": _swap(
            "roofline-predict", ("return max(compute, memory)", "return min(compute, memory)")
        ),
        "milliseconds": _swap(
            "roofline-predict",
            ("return max(compute, memory)", "return max(compute, memory) * 1e3"),
        ),
        "always the fp16 rate": _swap(
            "roofline-predict",
            ("precision = compute_precision(op, dtype, tf32)", 'precision = "fp16"'),
        ),
        "ignores TF32": _swap(
            "roofline-predict",
            ("compute_precision(op, dtype, tf32)", "compute_precision(op, dtype)"),
        ),
        "halves the bandwidth": _swap(
            "roofline-predict",
            ("/ ceilings.bandwidth", "/ (ceilings.bandwidth / 2)"),
        ),
    },
}

# The hint each failure's message must carry (grader.runtime.hints): none, since these are
# counting functions whose checks have messages of their own.
HINTS = {grade_id: dict.fromkeys(variants) for grade_id, variants in WRONG.items()}
