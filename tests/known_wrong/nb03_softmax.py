"""Wrong and slow softmax kernels for 03 · Fused softmax.

Each source replaces the whole exercise cell (kernel, launch_config and launcher), so it is
built from the reference's pieces with one mistake put in.
"""

from tests.known_wrong import swapped

NOTEBOOK = "03_softmax"

KERNEL_HEAD = """
@triton.jit
def softmax_kernel(out_ptr, x_ptr, n_rows, n_cols, x_row_stride, out_row_stride,
                   BLOCK: tl.constexpr, ROWS: tl.constexpr):
    pid = tl.program_id(axis=0)
    rows = pid * ROWS + tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    mask = (rows < n_rows) & (cols < n_cols)
"""

LOAD = """
    x = tl.load(x_ptr + rows * x_row_stride + cols, mask=mask, other=-float("inf"))
    x = x.to(tl.float32)
"""

REDUCE = """
    row_max = tl.max(x, axis=1)
    numerator = tl.exp(x - row_max[:, None])
    denominator = tl.sum(numerator, axis=1)
    y = numerator / denominator[:, None]
"""

STORE = """
    tl.store(out_ptr + rows * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
"""

CONFIG = """

def launch_config(n_rows, n_cols):
    block = triton.next_power_of_2(n_cols)
    rows = max(1, min(2048 // block, 16, triton.next_power_of_2(n_rows)))
    num_warps = min(max(rows * block // (32 * 16), 1), 16)
    return rows, num_warps
"""

LAUNCHER = """

def softmax(x, out, *, num_warps=None, rows_per_program=None):
    n_rows, n_cols = x.shape
    rows, warps = launch_config(n_rows, n_cols)
    rows = rows_per_program or rows
    softmax_kernel[(triton.cdiv(n_rows, rows),)](
        out, x, n_rows, n_cols, x.stride(0), out.stride(0),
        BLOCK=triton.next_power_of_2(n_cols), ROWS=rows, num_warps=num_warps or warps)
    return out
"""


def cell(load=LOAD, reduce=REDUCE, store=STORE, config=CONFIG, launcher=LAUNCHER):
    """The exercise cell with one of its parts replaced."""
    return KERNEL_HEAD + load + reduce + store + config + launcher


_FETCHED = "return 32 * k.l1_load_sectors / used_bytes"
_UNCOALESCED = 'UNCOALESCED = {"B"}'


def _review(*pairs: tuple[str, str]) -> str:
    return swapped(NOTEBOOK, "review-coalesced", *pairs)


WRONG = {
    "review-coalesced": {
        "used over fetched": _review((_FETCHED, "return used_bytes / (32 * k.l1_load_sectors)")),
        "DRAM's bytes": _review((_FETCHED, "return k.dram_bytes_read / used_bytes")),
        "sectors per request for the ratio": _review(
            (_FETCHED, "return k.l1_sectors_per_load / 4")
        ),
        "the most sectors per request called uncoalesced": _review(
            (_UNCOALESCED, 'UNCOALESCED = {"B", "C"}')
        ),
        "the tiled copy called uncoalesced": _review((_UNCOALESCED, 'UNCOALESCED = {"A", "B"}')),
        "none": _review((_UNCOALESCED, "UNCOALESCED = set()")),
        "a list of labels": _review((_UNCOALESCED, 'UNCOALESCED = ["B"]')),
    },
    "softmax-kernel": {
        "stub left in place": KERNEL_HEAD + "    raise NotImplementedError()\n" + CONFIG + LAUNCHER,
        "never stores": cell(store="\n"),
        # a blank kernel launched on a placeholder; the softmax from torch's softmin, which the
        # list of refused torch functions does not name
        "dummy launch, softmin from torch": cell(
            reduce="    y = x\n",
            launcher="""

def softmax(x, out, *, num_warps=None, rows_per_program=None):
    spare = torch.zeros(1, 1, device=x.device, dtype=x.dtype)
    softmax_kernel[(1,)](torch.empty_like(spare), spare, 1, 1, 1, 1, BLOCK=1, ROWS=1)
    out.copy_(torch.nn.functional.softmin(-x.float(), dim=1))
    return out
""",
        ),
        "no max subtraction (overflows on large scores)": cell(
            reduce=REDUCE.replace("tl.exp(x - row_max[:, None])", "tl.exp(x)")
        ),
        "masked lanes filled with 0 instead of -inf": cell(
            load=LOAD.replace('other=-float("inf")', "other=0.0")
        ),
        "sum over the wrong axis": cell(
            reduce=REDUCE.replace("tl.sum(numerator, axis=1)", "tl.sum(numerator, axis=0)").replace(
                "denominator[:, None]", "denominator[None, :]"
            )
        ),
        "max over the whole tile, across rows": cell(
            reduce=REDUCE.replace("tl.max(x, axis=1)", "tl.max(tl.max(x, axis=1), axis=0)").replace(
                "row_max[:, None]", "row_max"
            )
        ),
        "divides by the max instead of the sum": cell(
            reduce=REDUCE.replace(
                "numerator / denominator[:, None]", "numerator / row_max[:, None]"
            )
        ),
        "all--inf row gives 0 instead of NaN (a 'safe' softmax)": cell(
            reduce="""
    row_max = tl.max(x, axis=1)
    row_max = tl.where(row_max == -float("inf"), 0.0, row_max)
    numerator = tl.exp(x - row_max[:, None])
    denominator = tl.sum(numerator, axis=1)
    y = tl.where(denominator[:, None] > 0, numerator / denominator[:, None], 0.0)
"""
        ),
        "computes in float16 (precision dropped)": cell(
            load=LOAD.replace("x.to(tl.float32)", "x.to(tl.float16)")
        ),
        "fp16 output written through an fp32 buffer, then rebound": cell()
        + """

_fp32_softmax = softmax


def softmax(x, out, **kwargs):
    if x.dtype == torch.float32:
        return _fp32_softmax(x, out, **kwargs)
    buffer = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    _fp32_softmax(x, buffer, **kwargs)
    out = buffer.to(x.dtype)  # rebinds the name: the caller's tensor is never written
    return out
""",
        "only handles rows up to BLOCK = 1024": cell(
            launcher=LAUNCHER.replace(
                "BLOCK=triton.next_power_of_2(n_cols)",
                "BLOCK=min(triton.next_power_of_2(n_cols), 1024)",
            )
        ),
        "assumes contiguous rows (stride = n_cols)": cell(
            load=LOAD.replace("rows * x_row_stride", "rows * n_cols"),
        ),
        "a grid of one program": cell(
            launcher=LAUNCHER.replace("(triton.cdiv(n_rows, rows),)", "(1,)")
        ),
        "calls torch.softmax": cell()
        + """

def softmax(x, out, **kwargs):
    out.copy_(torch.softmax(x.float(), dim=1))
    return out
""",
        # Triton's tutorial kernel (python/tutorials/02-fused-softmax.py), renamed to the
        # exercise's arguments, pasted below the given lines: its row loop reassigns `mask`
        # with the shape of one row. The interpreter runs it right; the GPU compiler refuses it.
        "Triton's tutorial softmax pasted below the given lines": KERNEL_HEAD
        + """
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step):
        row_start_ptr = x_ptr + row_idx * x_row_stride
        col_offsets = tl.arange(0, BLOCK)
        input_ptrs = row_start_ptr + col_offsets
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float("inf"))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = out_ptr + row_idx * out_row_stride
        output_ptrs = output_row_start_ptr + col_offsets
        tl.store(output_ptrs, softmax_output, mask=mask)
"""
        + CONFIG
        + LAUNCHER,
        "eager softmax in the launcher": cell()
        + """

def softmax(x, out, **kwargs):
    out.copy_(softmax_eager(x.float()))
    return out
""",
    },
}

# The hint each failure's message must carry ("Likely cause [pattern]", grader.runtime.hints);
# None: the bug fits no pattern (or its failure has a message of its own), and no hint may appear.
HINTS = {
    "review-coalesced": dict.fromkeys(WRONG["review-coalesced"]),
    "softmax-kernel": {
        "stub left in place": None,
        "never stores": None,
        "dummy launch, softmin from torch": None,
        "no max subtraction (overflows on large scores)": "non-finite",
        "masked lanes filled with 0 instead of -inf": "row-normalisation",
        # the rows past n_rows in the last tile are all -inf: their -inf - (-inf) is NaN, and the
        # column sums carry it into every row
        "sum over the wrong axis": "non-finite",
        "max over the whole tile, across rows": "non-finite",
        "divides by the max instead of the sum": "row-normalisation",
        "all--inf row gives 0 instead of NaN (a 'safe' softmax)": "expected-nan",
        "computes in float16 (precision dropped)": "low-precision",
        "fp16 output written through an fp32 buffer, then rebound": None,
        "only handles rows up to BLOCK = 1024": "coverage",
        "assumes contiguous rows (stride = n_cols)": "assumes-contiguous",
        "a grid of one program": "coverage",
        "calls torch.softmax": None,
        "Triton's tutorial softmax pasted below the given lines": "loop-carried",
        "eager softmax in the launcher": None,
    },
}

# Correct but slow. Both read the matrix more than once from device memory or keep too few loads
# in flight; on the graded shape neither can reach 3x the eager version or 0.9x torch.softmax.
SLOW = {
    "softmax-kernel": {
        # max, sum and normalise as three kernels: three reads and one write of the matrix
        # (twice the traffic of one pass), so at best 2x the eager version's 8 trips. The last,
        # which writes the output, is the exercise's softmax_kernel, which the checks require
        # to have run.
        "three kernels (max, sum, normalise)": """
@triton.jit
def row_max_kernel(max_ptr, x_ptr, n_cols, x_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=-float("inf"))
    tl.store(max_ptr + row, tl.max(x.to(tl.float32), axis=0))


@triton.jit
def row_sum_kernel(sum_ptr, max_ptr, x_ptr, n_cols, x_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=-float("inf"))
    m = tl.load(max_ptr + row)
    tl.store(sum_ptr + row, tl.sum(tl.exp(x.to(tl.float32) - m), axis=0))


@triton.jit
def softmax_kernel(out_ptr, sum_ptr, max_ptr, x_ptr, n_cols, x_row_stride, out_row_stride,
                   BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))
    m = tl.load(max_ptr + row)
    s = tl.load(sum_ptr + row)
    y = tl.exp(x.to(tl.float32) - m) / s
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def launch_config(n_rows, n_cols):
    return 1, 8


def softmax(x, out, *, num_warps=None, rows_per_program=None):
    n_rows, n_cols = x.shape
    block = triton.next_power_of_2(n_cols)
    warps = num_warps or min(max(block // 512, 1), 16)
    row_max = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    row_sum = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    row_max_kernel[(n_rows,)](row_max, x, n_cols, x.stride(0), BLOCK=block, num_warps=warps)
    row_sum_kernel[(n_rows,)](row_sum, row_max, x, n_cols, x.stride(0), BLOCK=block,
                              num_warps=warps)
    softmax_kernel[(n_rows,)](out, row_sum, row_max, x, n_cols, x.stride(0), out.stride(0),
                              BLOCK=block, num_warps=warps)
    return out
""",
        # One warp per row and 16 elements per step: each program walks its row three times in
        # chunks of 64 bytes, so few loads are ever in flight.
        "one warp, a tiny block looping over the row three times": """
@triton.jit
def softmax_kernel(out_ptr, x_ptr, n_rows, n_cols, x_row_stride, out_row_stride,
                   BLOCK: tl.constexpr, ROWS: tl.constexpr):
    row = tl.program_id(axis=0)
    x_row = x_ptr + row * x_row_stride
    cols = tl.arange(0, BLOCK)
    running = tl.full((BLOCK,), -float("inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < n_cols, other=-float("inf"))
        running = tl.maximum(running, x.to(tl.float32))
    row_max = tl.max(running, axis=0)
    total = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < n_cols, other=-float("inf"))
        total += tl.exp(x.to(tl.float32) - row_max)
    denominator = tl.sum(total, axis=0)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=-float("inf"))
        y = tl.exp(x.to(tl.float32) - row_max) / denominator
        tl.store(out_ptr + row * out_row_stride + start + cols, y.to(out_ptr.dtype.element_ty),
                 mask=mask)


def launch_config(n_rows, n_cols):
    return 1, 1


def softmax(x, out, *, num_warps=None, rows_per_program=None):
    n_rows, n_cols = x.shape
    softmax_kernel[(n_rows,)](out, x, n_rows, n_cols, x.stride(0), out.stride(0),
                              BLOCK=16, ROWS=1, num_warps=1)
    return out
""",
    },
}

# Right, written other ways than the reference: each must pass every test of its exercise, in the
# interpreter as on a GPU (tests/test_known_wrong.py).
OTHER_WAYS = {
    "softmax-kernel": {
        "exp2, log2(e) folded": cell(
            reduce=REDUCE.replace(
                "tl.exp(x - row_max[:, None])",
                "tl.math.exp2((x - row_max[:, None]) * 1.4426950408889634)",
            )
        ),
        "libdevice.exp": "from triton.language.extra import libdevice\n"
        + cell(reduce=REDUCE.replace("tl.exp(", "libdevice.exp(")),
        "padded lanes set by tl.where": cell(
            load="""
    x = tl.load(x_ptr + rows * x_row_stride + cols, mask=mask, other=0.0)
    x = tl.where(mask, x.to(tl.float32), -float("inf"))
"""
        ),
        "a reciprocal of the sum": cell(
            reduce=REDUCE.replace(
                "numerator / denominator[:, None]", "numerator * (1.0 / denominator)[:, None]"
            )
        ),
        "the store converts to out's dtype": cell(
            store="    tl.store(out_ptr + rows * out_row_stride + cols, y, mask=mask)\n"
        ),
        # Triton's tutorial kernel (python/tutorials/02-fused-softmax.py) below the given lines,
        # with a row mask of its own (not the given `mask`, whose shape it would change) and the
        # arithmetic in float32
        "Triton's tutorial loop, rows strided across programs": KERNEL_HEAD
        + """
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step):
        col_offsets = tl.arange(0, BLOCK)
        row_mask = col_offsets < n_cols
        row = tl.load(x_ptr + row_idx * x_row_stride + col_offsets, mask=row_mask,
                      other=-float("inf")).to(tl.float32)
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        tl.store(out_ptr + row_idx * out_row_stride + col_offsets,
                 softmax_output.to(out_ptr.dtype.element_ty), mask=row_mask)
"""
        + CONFIG
        + LAUNCHER,
    },
}
