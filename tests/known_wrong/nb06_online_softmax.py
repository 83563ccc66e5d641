"""Wrong merges, chunked softmaxes and long-row kernels for 06 · Online softmax."""

from tests.known_wrong import WithGiven

NOTEBOOK = "06_online_softmax"

MERGE = """
def merge(m1, d1, m2, d2):
    m = torch.maximum(m1, m2)
"""

CHUNKED = """
def chunked_softmax(x, out, chunk=CHUNK):
    rows, n = x.shape
"""

KERNEL = """
@triton.jit
def softmax_online_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    out_row = out_ptr + row * stride_out
    cols = tl.arange(0, BLOCK)
"""

# the correct first pass, lane merge and second pass, for variants that change one of them
FIRST_PASS = """
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    d = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < n_cols, other=float("-inf"))
        m_new = tl.maximum(m, x.to(tl.float32))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        d = d * tl.exp(m - m_safe) + tl.exp(x.to(tl.float32) - m_safe)
        m = m_new
"""
LANE_MERGE = """
    m_row = tl.max(m, axis=0)
    d_row = tl.sum(d * tl.exp(m - m_row), axis=0)
"""
SECOND_PASS = """
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=float("-inf"))
        y = tl.exp(x.to(tl.float32) - m_row) / d_row
        tl.store(out_row + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
"""

WRONG = {
    "merge": {
        "stub left in place": "def merge(m1, d1, m2, d2):\n    raise NotImplementedError()\n",
        "forgets to rescale the second side": MERGE
        + """    m_safe = torch.where(m == -math.inf, torch.zeros_like(m), m)
    return m, d1 * torch.exp(m1 - m_safe) + d2
""",
        "no rescaling at all": MERGE + "    return m, d1 + d2\n",
        "NaN when both maxima are -inf": MERGE
        + "    return m, d1 * torch.exp(m1 - m) + d2 * torch.exp(m2 - m)\n",
        "absolute exponentials overflow": MERGE
        + "    return m, (d1 * torch.exp(m1) + d2 * torch.exp(m2)) / torch.exp(m)\n",
        "minimum instead of maximum": """
def merge(m1, d1, m2, d2):
    m = torch.minimum(m1, m2)
    m_safe = torch.where(m == -math.inf, torch.zeros_like(m), m)
    return m, d1 * torch.exp(m1 - m_safe) + d2 * torch.exp(m2 - m_safe)
""",
    },
    "chunked-softmax": {
        "stub left in place": CHUNKED + "    raise NotImplementedError()\n",
        "never rescales the running sum": CHUNKED
        + """    m = torch.full((rows, 1), -math.inf, dtype=torch.float32)
    d = torch.zeros((rows, 1), dtype=torch.float32)
    for s in range(0, n, chunk):
        part = x[:, s:s + chunk].float()
        m = torch.maximum(m, part.amax(dim=1, keepdim=True))
        m_safe = torch.where(m == -math.inf, torch.zeros_like(m), m)
        d = d + torch.exp(part - m_safe).sum(dim=1, keepdim=True)
    for s in range(0, n, chunk):
        out[:, s:s + chunk] = (torch.exp(x[:, s:s + chunk].float() - m) / d).to(out.dtype)
    return out
""",
        "each chunk normalised on its own": CHUNKED
        + """    for s in range(0, n, chunk):
        part = x[:, s:s + chunk].float()
        e = torch.exp(part - part.amax(dim=1, keepdim=True))
        out[:, s:s + chunk] = (e / e.sum(dim=1, keepdim=True)).to(out.dtype)
    return out
""",
        "no maximum subtracted": CHUNKED
        + """    d = torch.zeros((rows, 1), dtype=torch.float32)
    for s in range(0, n, chunk):
        d = d + torch.exp(x[:, s:s + chunk].float()).sum(dim=1, keepdim=True)
    for s in range(0, n, chunk):
        out[:, s:s + chunk] = (torch.exp(x[:, s:s + chunk].float()) / d).to(out.dtype)
    return out
""",
        "float16 statistics": CHUNKED
        + """    m = torch.full((rows, 1), -math.inf, dtype=x.dtype)
    d = torch.zeros((rows, 1), dtype=x.dtype)
    for s in range(0, n, chunk):
        part = x[:, s:s + chunk]
        m_part = part.amax(dim=1, keepdim=True)
        m_safe = torch.where(m_part == -math.inf, torch.zeros_like(m_part), m_part)
        m, d = merge(m, d, m_part, torch.exp(part - m_safe).sum(dim=1, keepdim=True))
    for s in range(0, n, chunk):
        out[:, s:s + chunk] = (torch.exp(x[:, s:s + chunk] - m) / d).to(out.dtype)
    return out
""",
        "calls torch.softmax": CHUNKED
        + "    out.copy_(torch.softmax(x.float(), dim=1))\n    return out\n",
    },
    "long-softmax-kernel": {
        "stub left in place": KERNEL + "    raise NotImplementedError()\n",
        # the kernel left blank, the given launcher rewritten to compute the softmax with torch
        "torch in the launcher": WithGiven(
            KERNEL + "    raise NotImplementedError()\n",
            {
                "    return launch_rows(softmax_online_kernel, x, out, block=block)": """\
    e = (x.float() - x.float().amax(dim=1, keepdim=True)).exp()
    return out.copy_(e / e.sum(dim=1, keepdim=True))"""
            },
        ),
        "last block not masked": KERNEL
        + """
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    d = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + cols)
        m_new = tl.maximum(m, x.to(tl.float32))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        d = d * tl.exp(m - m_safe) + tl.exp(x.to(tl.float32) - m_safe)
        m = m_new
"""
        + LANE_MERGE
        + SECOND_PASS,
        "pads the last block with 0": KERNEL
        + FIRST_PASS.replace('other=float("-inf"))\n        m_new', "other=0.0)\n        m_new")
        + LANE_MERGE
        + SECOND_PASS,
        "d not rescaled when the maximum grows": KERNEL
        + FIRST_PASS.replace("d = d * tl.exp(m - m_safe) +", "d = d +")
        + LANE_MERGE
        + SECOND_PASS,
        "NaN in lanes that saw only -inf": KERNEL
        + FIRST_PASS.replace("0.0, m_new)", "m_new, m_new)")
        + LANE_MERGE
        + SECOND_PASS,
        "lanes summed without rescaling": KERNEL
        + FIRST_PASS
        + "    m_row = tl.max(m, axis=0)\n    d_row = tl.sum(d, axis=0)\n"
        + SECOND_PASS,
        # the interpreter keeps `d` float16 only until the first iteration makes it float32, and
        # passes every test; the GPU compiler refuses a loop-carried variable that changes type
        "float16 running sum": KERNEL
        + FIRST_PASS.replace("tl.zeros((BLOCK,), tl.float32)", "tl.zeros((BLOCK,), tl.float16)")
        + LANE_MERGE
        + SECOND_PASS,
        "normalises with each lane's own state": KERNEL
        + FIRST_PASS
        + """
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=float("-inf"))
        y = tl.exp(x.to(tl.float32) - m) / d
        tl.store(out_row + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
""",
    },
}

# The hint each failure's message must carry ("Likely cause [pattern]", grader.runtime.hints);
# None: the bug fits no pattern (or its failure has a message of its own), and no hint may appear.
HINTS = {
    "merge": {
        "stub left in place": None,
        "forgets to rescale the second side": "rescale",
        "no rescaling at all": "rescale",
        "NaN when both maxima are -inf": "non-finite",
        "absolute exponentials overflow": "non-finite",
        "minimum instead of maximum": None,
    },
    "chunked-softmax": {
        "stub left in place": None,
        "never rescales the running sum": "rescale",
        "each chunk normalised on its own": None,
        "no maximum subtracted": "non-finite",
        "float16 statistics": "low-precision",
        "calls torch.softmax": None,
    },
    "long-softmax-kernel": {
        "stub left in place": None,
        "torch in the launcher": None,
        # unmasked loads past the row: the interpreter's bounds check (grader.runtime.bounds)
        # reports the read past the last row; on a GPU, the other numbers read into each row's
        # maximum and sum put every element off by the row's own factor
        "last block not masked": ("missing-mask", "row-normalisation", "non-finite"),
        # each row is off by a factor of its own, set by its maximum; when the few rows of a
        # test happen to have close maxima, their factors agree within 1e-4, one for all rows
        "pads the last block with 0": ("row-normalisation", "wrong-scale"),
        "d not rescaled when the maximum grows": "rescale",
        "NaN in lanes that saw only -inf": "non-finite",
        "lanes summed without rescaling": "row-normalisation",
        "float16 running sum": "loop-carried",
        "normalises with each lane's own state": None,
    },
}

# Correct but slow: the loops ignore BLOCK and read 64 columns at a time, so each program has
# 256 bytes in flight per iteration instead of BLOCK * 4, far too little to cover memory latency.
SLOW = {
    "long-softmax-kernel": {
        "64 columns per iteration": KERNEL.replace(
            "cols = tl.arange(0, BLOCK)", "cols = tl.arange(0, 64)"
        )
        + (FIRST_PASS + LANE_MERGE + SECOND_PASS)
        .replace("(BLOCK,)", "(64,)")
        .replace("range(0, n_cols, BLOCK)", "range(0, n_cols, 64)"),
    },
}

# Mistakes that once passed every visible test and failed only the hidden ones (float32 rows of
# normal scores); tests/test_known_wrong.py now requires a visible test to fail.
VISIBLE_CLASSES = {
    "chunked-softmax": {
        # a chunk of nothing but -inf has m_part = -inf, and -inf - (-inf) is NaN
        "no guard for a chunk of -inf": CHUNKED
        + """    m = torch.full((rows, 1), -math.inf, dtype=torch.float32, device=x.device)
    d = torch.zeros((rows, 1), dtype=torch.float32, device=x.device)
    for s in range(0, n, chunk):
        part = x[:, s:s + chunk].float()
        m_part = part.amax(dim=1, keepdim=True)
        m, d = merge(m, d, m_part, torch.exp(part - m_part).sum(dim=1, keepdim=True))
    for s in range(0, n, chunk):
        out[:, s:s + chunk] = (torch.exp(x[:, s:s + chunk].float() - m) / d).to(out.dtype)
    return out
""",
    },
}
for _grade_id, _variants in VISIBLE_CLASSES.items():
    WRONG[_grade_id].update(_variants)
HINTS["chunked-softmax"]["no guard for a chunk of -inf"] = "non-finite"

LOG2E = "1.4426950408889634"

# Right, written other ways than the reference: each must pass every test of its exercise, in the
# interpreter as on a GPU (tests/test_known_wrong.py).
OTHER_WAYS = {
    "merge": {
        "each side's factor by torch.where": MERGE
        + """    f1 = torch.where(m1 == -math.inf, 0.0, torch.exp(m1 - m))  # an empty side adds 0
    f2 = torch.where(m2 == -math.inf, 0.0, torch.exp(m2 - m))
    return m, d1 * f1 + d2 * f2
""",
    },
    "chunked-softmax": {
        "the state updated in place of merge": CHUNKED
        + """    m = torch.full((rows, 1), -math.inf, dtype=torch.float32, device=x.device)
    d = torch.zeros((rows, 1), dtype=torch.float32, device=x.device)
    for s in range(0, n, chunk):
        part = x[:, s:s + chunk].float()
        m_new = torch.maximum(m, part.amax(dim=1, keepdim=True))
        m_safe = torch.where(m_new == -math.inf, 0.0, m_new)
        d = d * torch.exp(m - m_safe) + torch.exp(part - m_safe).sum(dim=1, keepdim=True)
        m = m_new
    for s in range(0, n, chunk):
        out[:, s:s + chunk] = (torch.exp(x[:, s:s + chunk].float() - m) / d).to(out.dtype)
    return out
""",
    },
    "long-softmax-kernel": {
        "exp2, log2(e) folded": KERNEL
        + (FIRST_PASS + LANE_MERGE + SECOND_PASS)
        .replace("tl.exp(m - m_safe)", f"tl.math.exp2((m - m_safe) * {LOG2E})")
        .replace(
            "tl.exp(x.to(tl.float32) - m_safe)",
            f"tl.math.exp2((x.to(tl.float32) - m_safe) * {LOG2E})",
        )
        .replace("tl.exp(m - m_row)", f"tl.math.exp2((m - m_row) * {LOG2E})")
        .replace(
            "tl.exp(x.to(tl.float32) - m_row)",
            f"tl.math.exp2((x.to(tl.float32) - m_row) * {LOG2E})",
        ),
        "tl.where at -inf in place of a safe maximum": KERNEL
        + """
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    d = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < n_cols, other=float("-inf"))
        x = x.to(tl.float32)
        m_new = tl.maximum(m, x)
        empty = m_new == float("-inf")  # -inf - (-inf) is NaN: the lane has nothing yet
        alpha = tl.where(empty, 1.0, tl.exp(m - m_new))
        d = d * alpha + tl.where(empty, 0.0, tl.exp(x - m_new))
        m = m_new
"""
        + LANE_MERGE
        + SECOND_PASS,
        "one state per row, not per lane": KERNEL
        + """
    m_row = tl.max(tl.full((BLOCK,), float("-inf"), tl.float32), axis=0)
    d_row = tl.sum(tl.zeros((BLOCK,), tl.float32), axis=0)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < n_cols, other=float("-inf"))
        x = x.to(tl.float32)
        m_new = tl.maximum(m_row, tl.max(x, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        d_row = d_row * tl.exp(m_row - m_safe) + tl.sum(tl.exp(x - m_safe), axis=0)
        m_row = m_new
"""
        + SECOND_PASS,
        "libdevice.exp": "from triton.language.extra import libdevice\n"
        + (KERNEL + FIRST_PASS + LANE_MERGE + SECOND_PASS).replace("tl.exp(", "libdevice.exp("),
    },
}
