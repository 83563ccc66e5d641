"""Wrong ReLU kernels for 00 · Setup."""

from tests.known_wrong import WithGiven

NOTEBOOK = "00_setup"

HEADER = """
@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
"""

STUB = HEADER + "    raise NotImplementedError()\n"
ZEROS = HEADER + "    tl.store(out_ptr + offsets, tl.zeros((BLOCK,), tl.float32), mask=mask)\n"
LAUNCH = "    relu_kernel[grid](x, out, n, BLOCK=block)\n"  # in the given launcher

WRONG = {
    "relu-kernel": {
        "stub left in place": STUB,
        # the kernel left blank, the given launcher rewritten to compute the result with torch
        "torch in the launcher": WithGiven(STUB, {LAUNCH: "    out.copy_(torch.relu(x))\n"}),
        # the kernel launched on a placeholder, so that a launch is seen; the result from torch
        "dummy launch, result from torch": WithGiven(
            ZEROS,
            {
                LAUNCH: "    spare = torch.empty(1, device=x.device)\n"
                "    relu_kernel[(1,)](spare, torch.empty_like(spare), 1, BLOCK=block)\n"
                "    out.copy_(x.clamp(min=0))\n"
            },
        ),
        # the kernel writes out, then torch writes it again
        "overwritten by torch after the kernel": WithGiven(
            ZEROS,
            {LAUNCH: LAUNCH + "    out.copy_(torch.relu(x))\n"},
        ),
        "never stores": HEADER + "    x = tl.load(x_ptr + offsets, mask=mask)\n",
        "identity": HEADER
        + """
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x, mask=mask)
""",
        "abs instead of relu": HEADER
        + """
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.abs(x), mask=mask)
""",
        "first block only": HEADER
        + """
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask & (pid == 0))
""",
        "fp16 arithmetic": HEADER
        + """
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float16)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask)
""",
        "writes the input": HEADER
        + """
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.where(x > 0, x, 0.0)
    tl.store(x_ptr + offsets, y, mask=mask)
    tl.store(out_ptr + offsets, y, mask=mask)
""",
    },
}

# The hint each failure's message must carry ("Likely cause [pattern]", grader.runtime.hints);
# None: the bug fits no pattern (or its failure has a message of its own), and no hint may appear.
HINTS = {
    "relu-kernel": {
        "stub left in place": None,
        "torch in the launcher": None,
        "dummy launch, result from torch": None,
        "overwritten by torch after the kernel": None,
        "never stores": None,
        "identity": None,
        "abs instead of relu": None,
        # coverage where Triton interprets `mask & (pid == 0)` right (3.6), none where not (3.9)
        "first block only": ("coverage", None),
        "fp16 arithmetic": "low-precision",
        "writes the input": None,
    },
}

# Correct but slow: every program handles one element, so the launch has n programs of one lane
# each and the memory system sees scattered 4-byte requests instead of wide coalesced ones.
SLOW = {
    "relu-kernel": {
        "one element per program": """
@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    for i in range(0, BLOCK):
        offset = pid * BLOCK + i
        x = tl.load(x_ptr + offset, mask=offset < n)
        tl.store(out_ptr + offset, tl.where(x > 0, x, 0.0), mask=offset < n)
""",
    },
}

# Mistakes that once passed every visible test and failed only the hidden ones (the visible test
# ran one program); tests/test_known_wrong.py now requires a visible test to fail.
VISIBLE_CLASSES = {
    "relu-kernel": {
        # the given offsets edited: every program starts at element pid, not pid * BLOCK
        "offsets forget the block": HEADER.replace("pid * BLOCK +", "pid +")
        + """
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask)
""",
    },
}
for _grade_id, _variants in VISIBLE_CLASSES.items():
    WRONG[_grade_id].update(_variants)
HINTS["relu-kernel"]["offsets forget the block"] = "coverage"

# A load without the mask: the store is masked, so the output is right, and on a GPU the read past
# the end goes unseen (compute-sanitizer's memcheck sees it: tests/test_bounds_gpu.py). The
# interpreter's bounds check (grader.runtime.bounds) rejects it, naming `x_ptr` and the mask.
WRONG["relu-kernel"]["unmasked load"] = (
    HEADER
    + """
    x = tl.load(x_ptr + offsets)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask)
"""
)
HINTS["relu-kernel"]["unmasked load"] = "missing-mask"
INTERPRETER_ONLY = {"relu-kernel": {"unmasked load"}}
