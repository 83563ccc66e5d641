"""Wrong and slow kernels for 02 · First kernels, and wrong counts of its profiled bytes."""

from tests.known_wrong import WithGiven, swapped

NOTEBOOK = "02_first_kernels"


def _swap(grade_id: str, *pairs: tuple[str, str]) -> str:
    return swapped(NOTEBOOK, grade_id, *pairs)


ADD_HEADER = """
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
"""

ADD_BODY = """
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
"""

FUSED_HEADER = """
@triton.jit
def bias_gelu_scale_kernel(x_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_om, scale,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_m = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
"""

MASKS = """
    mask_n = offs_n < N
    mask = (offs_m[:, None] < M) & mask_n[None, :]
"""

LOADS = """
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_n[None, :], mask=mask).to(tl.float32)
    bias = tl.load(bias_ptr + offs_n, mask=mask_n).to(tl.float32)
    z = x + bias[None, :]
"""

GELU = """
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    y = z * tl.sigmoid(2.0 * u) * scale
"""

STORE = """
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
             y.to(out_ptr.dtype.element_ty), mask=mask)
"""

DEFAULT_TILE = "block_m=1, block_n=8192, num_warps=16"  # the launcher's defaults, as written
LAUNCHER = """

def bias_gelu_scale(x, bias, scale, out, block_m=1, block_n=8192, num_warps=16):
    M, N = x.shape
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    bias_gelu_scale_kernel[grid](
        x, bias, out, M, N, x.stride(0), out.stride(0), scale, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=num_warps,
    )
    return out
"""

CORRECT_FUSED = FUSED_HEADER + MASKS + LOADS + GELU + STORE
TORCH_FUSED = "    out.copy_(bias_gelu_scale_reference(x.float(), bias.float(), scale))\n"
ADD_LAUNCH = "    add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)\n"  # given


def fused(body: str) -> str:
    """A fused-kernel cell: the kernel's shared opening, `body`, and the given launcher."""
    return FUSED_HEADER + body + LAUNCHER


_EAGER = "return 4 * (M * N + N) + 4 * M * N + 4 * M * N"
_FUSED = "    return 4 * (M * N + N)\n"
WRONG = {
    "fused-bytes": {
        "writes counted as reads": _swap(
            "fused-bytes", (_FUSED, "    return 4 * (M * N + N) + 4 * M * N\n")
        ),
        "eager reads x only once": _swap("fused-bytes", (_EAGER, "return 4 * (M * N + N)")),
        "float16 bytes": _swap("fused-bytes", (_FUSED, "    return 2 * (M * N + N)\n")),
        "the bias forgotten": _swap(
            "fused-bytes", (_FUSED, "    return 4 * M * N\n"), (_EAGER, "return 12 * M * N")
        ),
    },
    "add-kernel": {
        "stub left in place": ADD_HEADER + "    raise NotImplementedError()\n",
        # the kernel left blank, the given launcher rewritten to add with torch
        "torch in the launcher": WithGiven(
            ADD_HEADER + "    raise NotImplementedError()\n",
            {ADD_LAUNCH: "    torch.add(x, y, out=out)\n"},
        ),
        "never stores": ADD_HEADER
        + ADD_BODY
        + """
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
""",
        "missing mask": ADD_HEADER
        + ADD_BODY
        + """
    x = tl.load(x_ptr + offsets)
    y = tl.load(y_ptr + offsets)
    tl.store(out_ptr + offsets, x + y)
""",
        "off-by-one mask": ADD_HEADER
        + """
    offsets = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets <= n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)
""",
        "mask on the loads only": ADD_HEADER
        + ADD_BODY
        + """
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y)
""",
        "adds x to itself": ADD_HEADER
        + ADD_BODY
        + """
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + x, mask=mask)
""",
        "offsets forget the block": ADD_HEADER
        + """
    offsets = tl.program_id(axis=0) + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)
""",
        "float16 arithmetic": ADD_HEADER
        + ADD_BODY
        + """
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float16)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float16)
    tl.store(out_ptr + offsets, x + y, mask=mask)
""",
        "writes the input": ADD_HEADER
        + ADD_BODY
        + """
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(x_ptr + offsets, x + y, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)
""",
    },
    "fused-kernel": {
        "stub left in place": fused("    raise NotImplementedError()\n"),
        "never stores": fused(MASKS + LOADS + GELU),
        "missing mask": fused(
            """
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_n[None, :]).to(tl.float32)
    bias = tl.load(bias_ptr + offs_n).to(tl.float32)
    z = x + bias[None, :]
"""
            + GELU
            + """
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
             y.to(out_ptr.dtype.element_ty))
"""
        ),
        "off-by-one mask": fused(
            """
    mask_n = offs_n <= N
    mask = (offs_m[:, None] <= M) & mask_n[None, :]
"""
            + LOADS
            + GELU
            + STORE
        ),
        "column mask only": fused(
            """
    mask_n = offs_n < N
    mask = mask_n[None, :] & (offs_m[:, None] >= 0)
"""
            + LOADS
            + GELU
            + STORE
        ),
        "forgets the bias": fused(
            MASKS
            + """
    z = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_n[None, :], mask=mask).to(tl.float32)
"""
            + GELU
            + STORE
        ),
        "forgets the scale": fused(
            MASKS
            + LOADS
            + """
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    y = z * tl.sigmoid(2.0 * u)
"""
            + STORE
        ),
        "erf's 1/sqrt(2) in the tanh form": fused(
            MASKS
            + LOADS
            + """
    u = 0.7071067811865476 * (z + 0.044715 * z * z * z)
    y = z * tl.sigmoid(2.0 * u) * scale
"""
            + STORE
        ),
        "sigmoid(u) instead of sigmoid(2u)": fused(
            MASKS
            + LOADS
            + """
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    y = z * tl.sigmoid(u) * scale
"""
            + STORE
        ),
        "float16 arithmetic on float32 inputs": fused(
            MASKS
            + """
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_n[None, :], mask=mask).to(tl.float16)
    bias = tl.load(bias_ptr + offs_n, mask=mask_n).to(tl.float16)
    z = x + bias[None, :]
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    s = tl.sigmoid((2.0 * u).to(tl.float32)).to(tl.float16)
    y = (z * s).to(tl.float16) * scale
"""
            + STORE
        ),
        "bias broadcast along the wrong axis": fused(
            MASKS
            + """
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_n[None, :], mask=mask).to(tl.float32)
    bias = tl.load(bias_ptr + offs_m, mask=offs_m < M).to(tl.float32)
    z = x + bias[:, None]
"""
            + GELU
            + STORE
        ),
        "N used as the row stride": fused(
            MASKS
            + """
    x = tl.load(x_ptr + offs_m[:, None] * N + offs_n[None, :], mask=mask).to(tl.float32)
    bias = tl.load(bias_ptr + offs_n, mask=mask_n).to(tl.float32)
    z = x + bias[None, :]
"""
            + GELU
            + STORE
        ),
        "tanh as an exp ratio overflows": fused(
            MASKS
            + LOADS
            + """
    e = tl.exp(2.0 * 0.7978845608028654 * (z + 0.044715 * z * z * z))
    y = 0.5 * z * (1.0 + (e - 1.0) / (e + 1.0)) * scale
"""
            + STORE
        ),
        # a kernel that never stores, launched once on a placeholder; the result from torch
        "dummy launch, result from torch": FUSED_HEADER
        + MASKS
        + LOADS
        + GELU
        + """

def bias_gelu_scale(x, bias, scale, out, block_m=1, block_n=8192, num_warps=16):
    spare = torch.zeros(1, 1, device=x.device, dtype=x.dtype)
    bias_gelu_scale_kernel[(1, 1)](spare, spare[0], torch.empty_like(spare), 1, 1, 1, 1, scale,
                                   BLOCK_M=1, BLOCK_N=16)
"""
        + TORCH_FUSED
        + """    return out
""",
        # a kernel that forgets the scale, launched on the real tensors; torch then writes out
        "overwritten by torch after the kernel": fused(
            MASKS
            + LOADS
            + """
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    y = z * tl.sigmoid(2.0 * u)
"""
            + STORE
        ).replace(
            "    return out\n",
            TORCH_FUSED + "    return out\n",
        ),
        "PyTorch called from the launcher": CORRECT_FUSED
        + """

def bias_gelu_scale(x, bias, scale, out, block_m=1, block_n=8192, num_warps=16):
    out.copy_(bias_gelu_scale_reference(x, bias, scale))
    return out
""",
    },
}

# The hint each failure's message must carry ("Likely cause [pattern]", grader.runtime.hints);
# None: the bug fits no pattern (or its failure has a message of its own), and no hint may appear.
HINTS = {
    "fused-bytes": dict.fromkeys(WRONG["fused-bytes"]),
    "add-kernel": {
        "stub left in place": None,
        "torch in the launcher": None,
        "never stores": None,
        "missing mask": "missing-mask",
        "off-by-one mask": "missing-mask",
        "mask on the loads only": "missing-mask",
        "adds x to itself": None,
        "offsets forget the block": "coverage",
        "float16 arithmetic": "low-precision",
        "writes the input": None,
    },
    "fused-kernel": {
        "stub left in place": None,
        "never stores": None,
        "missing mask": "missing-mask",
        "off-by-one mask": "missing-mask",
        "column mask only": "missing-mask",
        "forgets the bias": None,
        "forgets the scale": "wrong-scale",
        "erf's 1/sqrt(2) in the tanh form": None,
        "sigmoid(u) instead of sigmoid(2u)": None,
        "float16 arithmetic on float32 inputs": "low-precision",
        "bias broadcast along the wrong axis": None,
        "N used as the row stride": "assumes-contiguous",
        "tanh as an exp ratio overflows": "non-finite",
        "dummy launch, result from torch": None,
        "overwritten by torch after the kernel": None,
        "PyTorch called from the launcher": None,
    },
}

# Correct but slow: each moves far more than the ideal bytes, or keeps far too few in flight.
SLOW = {
    "fused-kernel": {
        # 16 elements per program: 4 Mi programs for 8192 x 8192, each with little in flight
        "tiles of 1 x 16": CORRECT_FUSED
        + LAUNCHER.replace(DEFAULT_TILE, "block_m=1, block_n=16, num_warps=4"),
        # tiles one column wide: neighbouring lanes read addresses a whole row apart, so every
        # lane's 4 bytes cost a 32-byte sector
        "tiles of 256 x 1 (uncoalesced)": CORRECT_FUSED
        + LAUNCHER.replace(DEFAULT_TILE, "block_m=256, block_n=1, num_warps=4"),
        # two kernels: x + bias goes to a float32 scratch tensor, then GELU and scale read it
        # back: 4 passes instead of 2
        "two kernels": CORRECT_FUSED
        + """

@triton.jit
def add_bias_kernel(x_ptr, bias_ptr, t_ptr, M, N, stride_xm, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr):
    offs_m = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_n[None, :], mask=mask)
    bias = tl.load(bias_ptr + offs_n, mask=offs_n < N)
    t = x.to(tl.float32) + bias.to(tl.float32)[None, :]
    tl.store(t_ptr + offs_m[:, None] * N + offs_n[None, :], t, mask=mask)


def bias_gelu_scale(x, bias, scale, out, block_m=1, block_n=8192, num_warps=16):
    M, N = x.shape
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    t = torch.empty(M, N, device=x.device, dtype=torch.float32)
    add_bias_kernel[grid](x, bias, t, M, N, x.stride(0), BLOCK_M=block_m, BLOCK_N=block_n)
    zero = torch.zeros(N, device=x.device, dtype=torch.float32)
    bias_gelu_scale_kernel[grid](
        t, zero, out, M, N, N, out.stride(0), scale, BLOCK_M=block_m, BLOCK_N=block_n
    )
    return out
""",
    },
}

# Errors of Triton's type checks: the message names the operation and what to do about it.
WRONG["fused-kernel"].update(
    {
        # float16 inputs reach tl.sigmoid, which takes float32 or float64 only
        "no float32 upcast": fused(
            MASKS
            + LOADS.replace(", mask=mask).to(tl.float32)", ", mask=mask)").replace(
                ", mask=mask_n).to(tl.float32)", ", mask=mask_n)"
            )
            + GELU
            + STORE
        ),
        # the bias as a column: z is (BLOCK_N, BLOCK_N), more elements than Triton allows
        "bias added as a column": fused(
            MASKS + LOADS.replace("bias[None, :]", "bias[:, None]") + GELU + STORE
        ),
    }
)
HINTS["fused-kernel"].update(
    {"no float32 upcast": "operand-dtype", "bias added as a column": "shape"}
)

# Mistakes that once passed every visible test and failed only the hidden ones (float32 only, the
# launcher's one-row tiles); tests/test_known_wrong.py now requires a visible test to fail. The
# plain form of "no float32 upcast" is above, with its hint.
VISIBLE_CLASSES = {
    "fused-kernel": {
        # float16 inputs computed in float16 but for the sigmoid: the cube loses precision
        "no float32 upcast but for the sigmoid": fused(
            MASKS
            + """
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_n[None, :], mask=mask)
    bias = tl.load(bias_ptr + offs_n, mask=mask_n)
    z = x + bias[None, :]
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    y = z * tl.sigmoid((2.0 * u).to(tl.float32)) * scale
"""
            + STORE
        ),
        # right with the launcher's tiles of one row and one program per row of columns
        "offsets forget the block": fused(
            """
    mask_n = offs_n < N
    mask = (offs_m[:, None] < M) & mask_n[None, :]
"""
            + LOADS
            + GELU
            + STORE
        )
        .replace(
            "offs_m = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)",
            "offs_m = tl.program_id(axis=0) + tl.arange(0, BLOCK_M)",
        )
        .replace(
            "offs_n = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)",
            "offs_n = tl.program_id(axis=1) + tl.arange(0, BLOCK_N)",
        ),
    },
}
for _grade_id, _variants in VISIBLE_CLASSES.items():
    WRONG[_grade_id].update(_variants)
HINTS["fused-kernel"].update(
    {
        "no float32 upcast but for the sigmoid": "low-precision",
        "offsets forget the block": None,
    }
)

LIBDEVICE = "from triton.language.extra import libdevice\n"
TANH_GELU = "    y = 0.5 * z * (1.0 + {tanh}) * scale\n"
U = "    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)\n"

# Right, written other ways than the reference: each must pass every test of its exercise, in the
# interpreter as on a GPU (tests/test_known_wrong.py).
OTHER_WAYS = {
    "add-kernel": {
        "int64 offsets, zeros past the end": ADD_HEADER
        + """
    offsets = tl.program_id(axis=0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = tl.load(y_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, x + y, mask=mask)
""",
    },
    "fused-kernel": {
        "tanh from libdevice": LIBDEVICE
        + fused(MASKS + LOADS + U + TANH_GELU.format(tanh="libdevice.tanh(u)") + STORE),
        "the cube by libdevice.pow": LIBDEVICE
        + fused(MASKS + LOADS + GELU.replace("z * z * z", "libdevice.pow(z, 3.0)") + STORE),
        "tanh through exp2, log2(e) folded into 2u": fused(
            MASKS
            + LOADS
            + U
            + "    e = tl.math.exp2(2.8853900817779268 * u)  # exp(2u); inf gives tanh = 1\n"
            + TANH_GELU.format(tanh="(1.0 - 2.0 / (e + 1.0))")
            + STORE
        ),
        "a sigmoid of its own, tl.where by sign": fused(
            MASKS
            + LOADS
            + U
            + """
    e = tl.exp(-2.0 * tl.abs(u))  # in (0, 1]: never overflows
    s = tl.where(u >= 0, 1.0 / (1.0 + e), e / (1.0 + e))  # sigmoid(2u)
    y = z * s * scale
"""
            + STORE
        ),
        "the store converts to out's dtype": fused(
            MASKS
            + LOADS
            + GELU
            + "    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], y, mask=mask)"
            + "\n"
        ),
        "a row at a time": FUSED_HEADER
        + """
    mask_n = offs_n < N
    bias = tl.load(bias_ptr + offs_n, mask=mask_n).to(tl.float32)
    for i in tl.static_range(BLOCK_M):
        m = tl.program_id(axis=0) * BLOCK_M + i
        if m < M:  # `mask_n & (m < M)` fails in the interpreter (docs/versions.md)
            x = tl.load(x_ptr + m * stride_xm + offs_n, mask=mask_n).to(tl.float32)
            z = x + bias
            u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
            y = (z * tl.sigmoid(2.0 * u) * scale).to(out_ptr.dtype.element_ty)
            tl.store(out_ptr + m * stride_om + offs_n, y, mask=mask_n)
"""
        + LAUNCHER,
    },
}
