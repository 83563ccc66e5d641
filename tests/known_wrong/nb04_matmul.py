"""Wrong (and slow) solutions for 04 · The matmul ladder: the blocked matmul kernel and the
grouped program-id mapping."""

NOTEBOOK = "04_matmul"

SIGNATURE = """
@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = tl.swizzle2d(pid // num_pid_n, pid % num_pid_n, num_pid_m, num_pid_n, GROUP_M)
"""

OFFSETS = """
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
"""

POINTERS = """
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
"""

MASKED_LOADS = """
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
"""

ADVANCE = """
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
"""

STORE = """
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
"""

LOOP = "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
LOOP += "    for k in range(0, tl.cdiv(K, BLOCK_K)):\n"
DOT = "        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)\n"


def launcher(
    fp16_config="block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3",
    call=None,
):
    """The notebook's DEFAULT_CONFIG and launcher, with the float16 defaults or the call
    replaced."""
    call = (
        call
        or """
    matmul_kernel[grid](
        a, b, out, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], INPUT_PRECISION="tf32" if tf32 else "ieee",
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
"""
    )
    return f"""

DEFAULT_CONFIG = {{
    torch.float16: dict({fp16_config}),
    torch.bfloat16: dict({fp16_config}),
    torch.float32: dict(block_m=128, block_n=128, block_k=32, group_m=8, num_warps=8, num_stages=3),
}}


def matmul(a, b, out, *, tf32=False, **config):
    M, K = a.shape
    K_b, N = b.shape
    assert K == K_b and tuple(out.shape) == (M, N) and a.dtype == b.dtype
    cfg = {{**DEFAULT_CONFIG[a.dtype], **config}}
    grid = (triton.cdiv(M, cfg["block_m"]) * triton.cdiv(N, cfg["block_n"]),)
{call}
    return out
"""


def kernel(body):
    return SIGNATURE + body + launcher()


CORRECT_BODY = OFFSETS + POINTERS + LOOP + MASKED_LOADS + DOT + ADVANCE + STORE

WRONG = {
    "matmul-kernel": {
        "stub left in place": kernel("    raise NotImplementedError()\n"),
        "never stores": kernel(OFFSETS + POINTERS + LOOP + MASKED_LOADS + DOT + ADVANCE),
        # the kernel left blank; the launcher multiplies by broadcasting, which is no matmul call
        "broadcast product in the launcher": SIGNATURE
        + "    raise NotImplementedError()\n"
        + launcher(call="    out.copy_((a.float()[:, :, None] * b.float()[None]).sum(1))\n"),
        "missing K mask": kernel(
            OFFSETS
            + POINTERS
            + LOOP
            + """
        a = tl.load(a_ptrs, mask=offs_m[:, None] < M, other=0.0)
        b = tl.load(b_ptrs, mask=offs_n[None, :] < N, other=0.0)
"""
            + DOT
            + ADVANCE
            + STORE
        ),
        "missing M and N masks": kernel(
            OFFSETS
            + POINTERS
            + LOOP
            + """
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
"""
            + DOT
            + ADVANCE
            + """
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty))
"""
        ),
        "store masked on rows only": kernel(
            OFFSETS
            + POINTERS
            + LOOP
            + MASKED_LOADS
            + DOT
            + ADVANCE
            + """
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=offs_m[:, None] < M)
"""
        ),
        "strides ignored (assumes contiguous)": kernel(
            OFFSETS
            + """
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * N + offs_n[None, :]
"""
            + LOOP
            + MASKED_LOADS
            + DOT
            + """
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    c_ptrs = c_ptr + offs_m[:, None] * N + offs_n[None, :]
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
"""
        ),
        "accumulates in the output dtype (float16)": kernel(
            OFFSETS
            + POINTERS
            + "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=c_ptr.dtype.element_ty)\n"
            + "    for k in range(0, tl.cdiv(K, BLOCK_K)):\n"
            + MASKED_LOADS
            + "        acc += tl.dot(a, b, input_precision=INPUT_PRECISION).to(acc.dtype)\n"
            + ADVANCE
            + STORE
        ),
        "pointers never advance": kernel(OFFSETS + POINTERS + LOOP + MASKED_LOADS + DOT + STORE),
        "drops the last partial K block": kernel(
            OFFSETS
            + POINTERS
            + "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
            + "    for k in range(0, K // BLOCK_K):\n"
            + MASKED_LOADS
            + DOT
            + ADVANCE
            + STORE
        ),
        "rows and columns of the tile swapped": kernel(
            """
    offs_m = pid_n * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_m * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
"""
            + POINTERS
            + LOOP
            + MASKED_LOADS
            + DOT
            + ADVANCE
            + STORE
        ),
        "calls torch.matmul instead of the kernel": SIGNATURE
        + CORRECT_BODY
        + launcher(call="    out.copy_(torch.matmul(a, b))\n"),
    },
    "grouped-pid": {
        "stub left in place": """
def grouped_pid(pid, num_pid_m, num_pid_n, group_m):
    raise NotImplementedError()
""",
        "row-major (groups ignored)": """
def grouped_pid(pid, num_pid_m, num_pid_n, group_m):
    return pid // num_pid_n, pid % num_pid_n
""",
        "last group as tall as the others": """
def grouped_pid(pid, num_pid_m, num_pid_n, group_m):
    tiles_per_group = group_m * num_pid_n
    first_m = (pid // tiles_per_group) * group_m
    within = pid % tiles_per_group
    return first_m + within % group_m, within // group_m
""",
        "off by one in the last group's height": """
def grouped_pid(pid, num_pid_m, num_pid_n, group_m):
    tiles_per_group = group_m * num_pid_n
    first_m = (pid // tiles_per_group) * group_m
    rows = min(num_pid_m - first_m + 1, group_m)
    within = pid % tiles_per_group
    return first_m + within % rows, within // rows
""",
        "across the rows inside a group": """
def grouped_pid(pid, num_pid_m, num_pid_n, group_m):
    tiles_per_group = group_m * num_pid_n
    first_m = (pid // tiles_per_group) * group_m
    within = pid % tiles_per_group
    return first_m + within // num_pid_n, within % num_pid_n
""",
        "forgets the group's first row": """
def grouped_pid(pid, num_pid_m, num_pid_n, group_m):
    tiles_per_group = group_m * num_pid_n
    first_m = (pid // tiles_per_group) * group_m
    rows = min(num_pid_m - first_m, group_m)
    within = pid % tiles_per_group
    return within % rows, within // rows
""",
        "returns tensors": """
def grouped_pid(pid, num_pid_m, num_pid_n, group_m):
    tiles_per_group = group_m * num_pid_n
    first_m = (pid // tiles_per_group) * group_m
    rows = min(num_pid_m - first_m, group_m)
    within = pid % tiles_per_group
    return torch.tensor(first_m + within % rows), torch.tensor(within // rows)
""",
    },
}

# The hint each failure's message must carry ("Likely cause [pattern]", grader.runtime.hints);
# None: the bug fits no pattern (or its failure has a message of its own), and no hint may appear.
# A wrong K loop spoils every element alike, which no pattern of the output shows; a missing mask
# is reported, in the interpreter, by grader.runtime.bounds (the load or store past the matrix),
# and on a GPU by the notebook's own guard or not at all (a read past A or B spoils the values).
HINTS = {
    "matmul-kernel": {
        "stub left in place": None,
        "never stores": None,
        "broadcast product in the launcher": None,
        "missing K mask": ("missing-mask", None),
        "missing M and N masks": ("missing-mask", None),
        "store masked on rows only": ("missing-mask", None),
        "strides ignored (assumes contiguous)": None,
        "accumulates in the output dtype (float16)": "low-precision",
        "pointers never advance": None,
        "drops the last partial K block": None,
        # tiles placed by (pid_n, pid_m): the rows past the last column tile are never written
        "rows and columns of the tile swapped": "coverage",
        "calls torch.matmul instead of the kernel": None,
    },
    "grouped-pid": {name: None for name in WRONG["grouped-pid"]},  # plain Python, own messages
}

# Correct but slow, for the speed cell at 4096^3 float16.
SLOW = {
    "matmul-kernel": {
        # tiny tiles: each element of A and B is requested 256 / 16 times more often, one warp and
        # no pipelining
        "16x16x16 tiles, one warp, one stage": SIGNATURE
        + CORRECT_BODY
        + launcher("block_m=16, block_n=16, block_k=16, group_m=1, num_warps=1, num_stages=1"),
        # float32 blocks into tl.dot with input_precision="ieee": the float16 tensor cores idle
        "blocks cast to float32 before tl.dot": kernel(
            OFFSETS
            + POINTERS
            + LOOP
            + MASKED_LOADS
            + "        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, "
            + "input_precision=INPUT_PRECISION)\n"
            + ADVANCE
            + STORE
        ),
    },
}

# Triton's tutorial rounds the float32 accumulator to float16 before the store
# (`c = accumulator.to(tl.float16)`): into a float32 output, the right result rounded once.
WRONG["matmul-kernel"]["the tutorial's float16 store into a float32 output"] = kernel(
    OFFSETS
    + POINTERS
    + LOOP
    + MASKED_LOADS
    + DOT
    + ADVANCE
    + STORE.replace("acc.to(c_ptr.dtype.element_ty)", "acc.to(tl.float16)")
)
HINTS["matmul-kernel"]["the tutorial's float16 store into a float32 output"] = "store-dtype"

# Block pointers, as Triton's block-pointer tutorial wrote the loop: Triton 3.6 (the grading
# image) runs them, 3.9 (the student kit) has removed them; refused everywhere, one verdict
# (grader.runtime.launches.refuse_block_pointers).
WRONG["matmul-kernel"]["block pointers"] = kernel(
    """
    a_block = tl.make_block_ptr(a_ptr, (M, K), (stride_am, stride_ak), (pid_m * BLOCK_M, 0),
                                (BLOCK_M, BLOCK_K), (1, 0))
    b_block = tl.make_block_ptr(b_ptr, (K, N), (stride_bk, stride_bn), (0, pid_n * BLOCK_N),
                                (BLOCK_K, BLOCK_N), (1, 0))
"""
    + LOOP
    + """
        a = tl.load(a_block, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_block, boundary_check=(0, 1), padding_option="zero")
"""
    + DOT
    + """
        a_block = tl.advance(a_block, (0, BLOCK_K))
        b_block = tl.advance(b_block, (BLOCK_K, 0))
"""
    + OFFSETS
    + STORE
)
HINTS["matmul-kernel"]["block pointers"] = None
