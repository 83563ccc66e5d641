"""Kernels for a future notebook 09 (Hopper): notebook 05's matmul taken one step at a time
towards what an H100 rewards, then 07's attention loop with the same tools.

    v1  matmul_persistent   one program per SM, walking the output tiles in grouped order
    v2  matmul_tma          v1, with A, B and C moved through tensor descriptors (TMA)
    v3  matmul_tma_ws       v2, with the K loop warp-specialized where this Triton and GPU allow
    v4  matmul_fp8          v2 on float8 e4m3 inputs with per-tensor scales (quantize_e4m3)
        attention_tma_ws    07's forward loop, Q, K and V through descriptors, warp-specialized

Each kernel has a launcher that checks the layout and takes a `Config` (tile sizes and compiler
settings); without one it takes a default for the device (small tiles in the interpreter).

Set TRITON_INTERPRET=1 before importing this module to run the kernels in Triton's interpreter on
CPU tensors. The module imports and runs with Triton 3.6 and 3.9; where their APIs differ the code
says so in a comment (see NOTES.md).
"""

from __future__ import annotations

import inspect
import math
import os
from dataclasses import asdict, dataclass

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E)
E4M3_MAX = 448.0  # the largest finite float8 e4m3 value, torch.finfo(torch.float8_e4m3fn).max
INTERPRETER_SMS = 3  # programs of a persistent grid in the interpreter: several tiles each


# -- what this Triton and this device can do ----------------------------------------------------


def interpreted() -> bool:
    """True when Triton runs kernels in its interpreter (TRITON_INTERPRET=1, CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _capability() -> tuple[int, int] | None:
    """The GPU's compute capability, None without one (or in the interpreter)."""
    if interpreted() or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability()


def supports_tma() -> bool:
    """Tensor descriptors: this Triton has `tl.make_tensor_descriptor` and the device has a
    Tensor Memory Accelerator (sm_90 or newer), or the interpreter emulates them."""
    if not hasattr(tl, "make_tensor_descriptor"):
        return False
    cap = _capability()
    return interpreted() or (cap is not None and cap >= (9, 0))


def supports_warp_specialize() -> bool:
    """`tl.range(..., warp_specialize=True)`: the device is sm_90 or newer and this Triton's
    `tl.range` takes the keyword. False on the CPU: the interpreter has no warps to split."""
    cap = _capability()
    if cap is None or cap < (9, 0):
        return False
    return "warp_specialize" in inspect.signature(tl.range.__init__).parameters


def num_sms() -> int:
    """Streaming multiprocessors of the current GPU; a small stand-in in the interpreter."""
    if interpreted() or not torch.cuda.is_available():
        return INTERPRETER_SMS
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


_scratch: dict = {}  # (device, stream) -> the latest scratch buffer handed out for it


def _allocate(size: int, alignment: int, stream):
    """Triton's allocator protocol: global memory for the descriptors a kernel builds on the
    device (128 bytes each). Launches on one stream run in order, so one buffer per stream,
    grown when too small, serves them all and a launch allocates nothing in the steady state."""
    device = torch.cuda.current_device()
    buffer = _scratch.get((device, stream))
    if buffer is None or buffer.numel() < size:
        buffer = torch.empty(max(size, 1 << 14), dtype=torch.int8, device=f"cuda:{device}")
        _scratch[(device, stream)] = buffer
    return buffer


def install_allocator() -> None:
    """Give Triton the scratch memory that `tl.make_tensor_descriptor` needs on a GPU. Triton
    keeps the allocator in a context variable, so each thread that launches must install it; a
    launcher below calls this before every launch on a GPU (setting it costs next to nothing).
    The interpreter builds its descriptors on the host and needs none."""
    if not interpreted():
        triton.set_allocator(_allocate)


# -- configurations -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """One launch configuration of a matmul kernel. `num_sms`: the persistent grid's size (None:
    the device's SM count). `flatten` and `ws_on_tiles` shape the loops of v3 (see its kernel)."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3
    num_sms: int | None = None
    flatten: bool = True
    ws_on_tiles: bool = False

    def label(self) -> str:
        extra = "" if self.num_sms is None else f" sms{self.num_sms}"
        extra += "" if self.flatten else " noflat"
        extra += " ws-tiles" if self.ws_on_tiles else ""
        return (
            f"{self.block_m}x{self.block_n}x{self.block_k} G{self.group_m} "
            f"w{self.num_warps} s{self.num_stages}{extra}"
        )

    def record(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class AttentionConfig:
    """One launch configuration of the attention kernel; block_n divides block_m (the causal
    diagonal is walked in block_n steps)."""

    block_m: int = 128
    block_n: int = 64
    num_warps: int = 8
    num_stages: int = 3

    def label(self) -> str:
        return f"{self.block_m}x{self.block_n} w{self.num_warps} s{self.num_stages}"

    def record(self) -> dict:
        return asdict(self)


def default_config(kernel: str = "matmul") -> Config:
    """A sensible starting point: the shapes of 05's reference space on a GPU; small tiles in
    the interpreter, so that small problems still have several tiles per program."""
    if interpreted():
        k = 32 if kernel == "fp8" else 16
        return Config(block_m=32, block_n=32, block_k=k, group_m=2, num_warps=4, num_stages=1)
    if kernel == "fp8":  # one byte per element: twice the depth for the same shared memory
        return Config(block_m=128, block_n=128, block_k=128, num_warps=8, num_stages=3)
    if kernel == "tma_ws":  # see matmul_tma_ws_kernel: 4 warps, the nest not flattened
        return Config(num_warps=4, flatten=False)
    return Config()


def default_attention_config(head_dim: int, warp_specialize: bool = False) -> AttentionConfig:
    """07's GPU tiles (128 x 64, 8 warps, 3 stages, for D = 64 and 128), with 4 warps when
    warp-specialized (the only count Triton specializes for sm_90); small ones in the
    interpreter."""
    if interpreted():
        return AttentionConfig(block_m=32, block_n=16, num_warps=4, num_stages=1)
    return AttentionConfig(num_warps=4 if warp_specialize else 8)


# -- the tile order -----------------------------------------------------------------------------


@triton.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of output tile number `tile` in grouped order: the tiles are numbered down
    a band of GROUP_M tile rows, one column of the band after another, then the next band. Tiles
    worked on at the same time then share a few rows of A and columns of B, which stay in L2."""
    tiles_per_band = GROUP_M * num_pid_n
    band = tile // tiles_per_band
    first_m = band * GROUP_M
    rows = tl.minimum(num_pid_m - first_m, GROUP_M)  # the last band may be shorter
    in_band = tile % tiles_per_band
    return first_m + in_band % rows, in_band // rows


# -- v1: persistent, pointers -------------------------------------------------------------------


@triton.jit
def matmul_persistent_kernel(
    # pointers
    a_ptr,  # A, (M, K)
    b_ptr,  # B, (K, N)
    c_ptr,  # C, (M, N), written
    # sizes
    M,
    N,
    K,
    # strides (elements)
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    # compile-time constants
    BLOCK_M: tl.constexpr,  # rows of C per tile
    BLOCK_N: tl.constexpr,  # columns of C per tile
    BLOCK_K: tl.constexpr,  # depth of one step along K
    GROUP_M: tl.constexpr,  # tile rows per band of the grouped order
    NUM_SMS: tl.constexpr,  # programs in the grid, and the stride of each one's walk
):
    # -- this program's tiles: start, start + NUM_SMS, start + 2 NUM_SMS, ... below num_tiles
    start = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    offs_k = tl.arange(0, BLOCK_K)  # (BLOCK_K,)
    # The store keeps a tile counter of its own: with the loop nest flattened, the compiler's
    # pipeliner handles a value shared by the first loads and the last store badly (Triton's
    # persistent-matmul tutorial does the same).
    tile_c = start - NUM_SMS
    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
        # -- the K loop of 04, masks at every edge
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # (BLOCK_M, BLOCK_N)
        for k in range(0, k_tiles):
            k_left = K - k * BLOCK_K
            # keyword arguments after the mask: Triton 3.9 made them keyword-only
            a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
            # acc given: its float32 sets the product's type (3.6's default out_dtype, and what
            # 3.9 derives from acc)
            acc = tl.dot(a, b, acc)  # (BLOCK_M, BLOCK_N) float32
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        # -- epilogue: the tile, in the output's dtype
        tile_c += NUM_SMS
        pid_m_c, pid_n_c = _tile_coords(tile_c, num_pid_m, num_pid_n, GROUP_M)
        offs_cm = pid_m_c * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
        offs_cn = pid_n_c * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


# -- v2: persistent, tensor descriptors ---------------------------------------------------------


@triton.jit
def matmul_tma_kernel(
    # pointers: rows contiguous, rows and base 16-byte aligned (the launcher checks)
    a_ptr,  # A, (M, K)
    b_ptr,  # B, (K, N)
    c_ptr,  # C, (M, N), written
    # sizes
    M,
    N,
    K,
    # row strides (elements); the last stride is 1
    stride_am,
    stride_bk,
    stride_cm,
    # compile-time constants
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
):
    # -- descriptors, made once per program: the TMA unit computes the addresses of a whole
    #    block, fills zeros past the edges on loads and drops what falls outside on stores. The
    #    block shape is the shared-memory buffer each copy fills. The last stride must be the
    #    literal 1: Triton checks it when compiling.
    a_desc = tl.make_tensor_descriptor(
        a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K]
    )
    b_desc = tl.make_tensor_descriptor(
        b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N]
    )
    c_desc = tl.make_tensor_descriptor(
        c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N]
    )
    # -- this program's tiles, as in v1
    start = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    tile_c = start - NUM_SMS
    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        # -- the K loop: no pointers, no masks
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # (BLOCK_M, BLOCK_N)
        for k in range(0, k_tiles):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])  # (BLOCK_M, BLOCK_K)
            b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])  # (BLOCK_K, BLOCK_N)
            acc = tl.dot(a, b, acc)  # (BLOCK_M, BLOCK_N) float32
        # -- epilogue: one descriptor store, clipped at the edges
        tile_c += NUM_SMS
        pid_m_c, pid_n_c = _tile_coords(tile_c, num_pid_m, num_pid_n, GROUP_M)
        c_desc.store([pid_m_c * BLOCK_M, pid_n_c * BLOCK_N], acc.to(c_ptr.dtype.element_ty))


# -- v3: v2 with a warp-specialized K loop ------------------------------------------------------


@triton.jit
def matmul_tma_ws_kernel(
    # pointers, as in v2
    a_ptr,  # A, (M, K)
    b_ptr,  # B, (K, N)
    c_ptr,  # C, (M, N), written
    # sizes
    M,
    N,
    K,
    # row strides (elements); the last stride is 1
    stride_am,
    stride_bk,
    stride_cm,
    # compile-time constants
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
    WS_K: tl.constexpr,  # warp-specialize the K loop (v3's step)
    WS_TILES: tl.constexpr,  # warp-specialize the tile loop instead (a variant to measure)
    FLATTEN: tl.constexpr,  # flatten the loop nest into one loop, as v1 and v2 do
):
    a_desc = tl.make_tensor_descriptor(
        a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K]
    )
    b_desc = tl.make_tensor_descriptor(
        b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N]
    )
    c_desc = tl.make_tensor_descriptor(
        c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N]
    )
    start = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    tile_c = start - NUM_SMS
    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=FLATTEN, warp_specialize=WS_TILES):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # (BLOCK_M, BLOCK_N)
        # -- warp specialization: the compiler gives the TMA loads to a producer warp group and
        #    the tensor-core work to consumer warp groups, which hand buffers over through
        #    barriers, instead of one warp group issuing both in a software pipeline. For sm_90,
        #    Triton 3.6 and 3.9 do so only with num_warps=4 (they add two consumer groups: 12
        #    warps in all) and a loop nest that is not flattened; otherwise they compile the
        #    ordinary pipelined loop without a word (compiled for sm_90 and read back: see
        #    check_cpu.py's table and NOTES.md)
        for k in tl.range(0, k_tiles, warp_specialize=WS_K):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])  # (BLOCK_M, BLOCK_K)
            b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])  # (BLOCK_K, BLOCK_N)
            acc = tl.dot(a, b, acc)  # (BLOCK_M, BLOCK_N) float32
        tile_c += NUM_SMS
        pid_m_c, pid_n_c = _tile_coords(tile_c, num_pid_m, num_pid_n, GROUP_M)
        c_desc.store([pid_m_c * BLOCK_M, pid_n_c * BLOCK_N], acc.to(c_ptr.dtype.element_ty))


# -- v4: FP8 ------------------------------------------------------------------------------------


@triton.jit
def matmul_fp8_kernel(
    # pointers
    a_ptr,  # A, (M, K) float8 e4m3, rows contiguous
    b_ptr,  # B, (K, N) float8 e4m3 stored column by column: the rows of Bᵀ, (N, K), contiguous
    c_ptr,  # C, (M, N) bfloat16 or float16, written
    a_scale_ptr,  # A's scale, one float32: A's true values are a_scale * A
    b_scale_ptr,  # B's scale, one float32
    # sizes
    M,
    N,
    K,
    # row strides (elements) of A, Bᵀ and C; the last stride is 1
    stride_am,
    stride_btn,
    stride_cm,
    # compile-time constants
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
    FAST_ACC: tl.constexpr,  # False: promote the tensor cores' sum to float32 every BLOCK_K
    WARP_SPECIALIZE: tl.constexpr,  # warp-specialize the K loop, as v3
    FLATTEN: tl.constexpr,  # flatten the loop nest (v2); not with WARP_SPECIALIZE (v3)
):
    a_desc = tl.make_tensor_descriptor(
        a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K]
    )
    # B comes K-major (as torch._scaled_mm takes it): Hopper's FP8 tensor-core instructions read
    # both operands K-major from shared memory, so each block is loaded as (BLOCK_N, BLOCK_K)
    # and transposed in the dot, a change of view rather than a copy
    b_desc = tl.make_tensor_descriptor(
        b_ptr, shape=[N, K], strides=[stride_btn, 1], block_shape=[BLOCK_N, BLOCK_K]
    )
    c_desc = tl.make_tensor_descriptor(
        c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N]
    )
    # -- the two scales multiply every product alike: applied once, to the finished sum
    scale = tl.load(a_scale_ptr) * tl.load(b_scale_ptr)
    start = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    tile_c = start - NUM_SMS
    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=FLATTEN):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # (BLOCK_M, BLOCK_N)
        for k in tl.range(0, k_tiles, warp_specialize=WARP_SPECIALIZE):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])  # (BLOCK_M, BLOCK_K) e4m3
            b = b_desc.load([pid_n * BLOCK_N, k * BLOCK_K])  # (BLOCK_N, BLOCK_K) e4m3
            if FAST_ACC:
                # Triton's default on sm_90: the whole K loop summed in the tensor cores' own
                # accumulator, which keeps fewer bits than float32
                acc = tl.dot(a, b.T, acc)  # (BLOCK_M, BLOCK_N) float32
            else:
                # each step's BLOCK_K products summed in the tensor cores, then added to acc
                # in full float32 (max_num_imprecise_acc counts the elements of K summed before
                # such a promotion; it matters on sm_90 only)
                acc = tl.dot(a, b.T, acc, max_num_imprecise_acc=BLOCK_K)
        tile_c += NUM_SMS
        pid_m_c, pid_n_c = _tile_coords(tile_c, num_pid_m, num_pid_n, GROUP_M)
        c = (acc * scale).to(c_ptr.dtype.element_ty)  # (BLOCK_M, BLOCK_N)
        c_desc.store([pid_m_c * BLOCK_M, pid_n_c * BLOCK_N], c)


# -- attention: 07's loop, through descriptors --------------------------------------------------


@triton.jit
def _load_rows(
    desc,  # a descriptor of (B * H * N, D) (FLAT) or of (B, H, N, D)
    off_b,
    off_h,
    head_row,  # FLAT: the row of this head's position 0 in the (B * H * N, D) view
    row,  # the first position of the block in the sequence
    BLOCK: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    FLAT: tl.constexpr,
):
    """Rows row .. row + BLOCK - 1 of one head, (BLOCK, HEAD_DIM). The four-dimensional
    descriptor fills zeros past the sequence's end; the flat one would read the next head, so it
    is used only when N is a multiple of every block."""
    if FLAT:
        return desc.load([head_row + row, 0])
    else:
        return desc.load([off_b, off_h, row, 0]).reshape(BLOCK, HEAD_DIM)


@triton.jit
def _attn_tma_blocks(
    acc,  # (BLOCK_M, HEAD_DIM) float32, the running output, unnormalized
    m_i,  # (BLOCK_M,) float32, the running max in base-2 units
    l_i,  # (BLOCK_M,) float32, the running sum
    q,  # (BLOCK_M, HEAD_DIM), the resident query tile
    k_desc,
    v_desc,
    off_b,
    off_h,
    head_row,
    lo,  # the key rows this call covers: [lo, hi), lo a multiple of BLOCK_N
    hi,
    key_limit,  # (BLOCK_M,) with MASKED, query row r sees the keys j < key_limit[r]
    qk_scale,  # (1 / sqrt(HEAD_DIM)) * log2(e)
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    FLAT: tl.constexpr,
    MASKED: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
):
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        # -- scores, in registers: K rows past N arrive as zeros, and are masked below
        k = _load_rows(k_desc, off_b, off_h, head_row, start_n, BLOCK_N, HEAD_DIM, FLAT)
        qk = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N) float32
        if MASKED:
            cols = start_n + offs_n  # (BLOCK_N,)
            qk = tl.where(cols[None, :] < key_limit[:, None], qk, float("-inf"))
        # -- online softmax in base 2, as in 07
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)  # (BLOCK_M,)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.math.exp2(m_i - m_ij)  # (BLOCK_M,), 0 on the first block
        l_i = l_i * alpha + tl.sum(p, 1)
        # -- values, and the accumulator brought to the new max
        v = _load_rows(v_desc, off_b, off_h, head_row, start_n, BLOCK_N, HEAD_DIM, FLAT)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)  # (BLOCK_M, HEAD_DIM) float32
        m_i = m_ij
    return acc, m_i, l_i


@triton.jit
def attention_tma_kernel(
    # pointers: (B, H, N, HEAD_DIM) float16 or bfloat16, the last dimension contiguous
    Q,
    K,
    V,
    Out,
    # strides (elements) of batch, head and row
    stride_qb,
    stride_qh,
    stride_qn,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_ob,
    stride_oh,
    stride_on,
    # sizes
    B,
    H,
    N,
    qk_scale,  # (1 / sqrt(HEAD_DIM)) * log2(e)
    # compile-time constants
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,  # query rows per program
    BLOCK_N: tl.constexpr,  # key rows per loop iteration; divides BLOCK_M
    CAUSAL: tl.constexpr,
    FLAT: tl.constexpr,  # contiguous (B, H, N, D) and N a multiple of BLOCK_M: 2-D descriptors
    WARP_SPECIALIZE: tl.constexpr,  # one warp-specialized loop over the key blocks (needs FLAT)
):
    # -- which query tile (causal: the last first, it has the most key blocks), batch and head
    if CAUSAL:
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = off_bh // H
    off_h = off_bh % H
    head_row = off_bh * N  # FLAT only; int32, as the descriptors' coordinates are
    # -- descriptors: either one row per (batch, head, position), or the tensors as they are
    if FLAT:
        rows = B * H * N
        q_desc = tl.make_tensor_descriptor(
            Q, shape=[rows, HEAD_DIM], strides=[stride_qn, 1], block_shape=[BLOCK_M, HEAD_DIM]
        )
        k_desc = tl.make_tensor_descriptor(
            K, shape=[rows, HEAD_DIM], strides=[stride_kn, 1], block_shape=[BLOCK_N, HEAD_DIM]
        )
        v_desc = tl.make_tensor_descriptor(
            V, shape=[rows, HEAD_DIM], strides=[stride_vn, 1], block_shape=[BLOCK_N, HEAD_DIM]
        )
        o_desc = tl.make_tensor_descriptor(
            Out, shape=[rows, HEAD_DIM], strides=[stride_on, 1], block_shape=[BLOCK_M, HEAD_DIM]
        )
    else:
        q_desc = tl.make_tensor_descriptor(
            Q,
            shape=[B, H, N, HEAD_DIM],
            strides=[stride_qb, stride_qh, stride_qn, 1],
            block_shape=[1, 1, BLOCK_M, HEAD_DIM],
        )
        k_desc = tl.make_tensor_descriptor(
            K,
            shape=[B, H, N, HEAD_DIM],
            strides=[stride_kb, stride_kh, stride_kn, 1],
            block_shape=[1, 1, BLOCK_N, HEAD_DIM],
        )
        v_desc = tl.make_tensor_descriptor(
            V,
            shape=[B, H, N, HEAD_DIM],
            strides=[stride_vb, stride_vh, stride_vn, 1],
            block_shape=[1, 1, BLOCK_N, HEAD_DIM],
        )
        o_desc = tl.make_tensor_descriptor(
            Out,
            shape=[B, H, N, HEAD_DIM],
            strides=[stride_ob, stride_oh, stride_on, 1],
            block_shape=[1, 1, BLOCK_M, HEAD_DIM],
        )
    # -- the resident query tile and the state
    first = start_m * BLOCK_M
    q = _load_rows(q_desc, off_b, off_h, head_row, first, BLOCK_M, HEAD_DIM, FLAT)
    offs_m = first + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running max, base-2 units
    l_i = tl.zeros((BLOCK_M,), tl.float32)  # running sum
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)  # (BLOCK_M, HEAD_DIM)
    if WARP_SPECIALIZE:
        # -- one loop over every key block the tile sees, each block masked. For sm_90, Triton
        #    3.6 and 3.9 warp-specialize one loop whose results nothing else in the kernel
        #    loops over; with a second loop after it (07's split) or a branch inside it, they
        #    fail to compile or quietly do not specialize. The mask costs a compare and a
        #    select per score in every block instead of in the last ones only.
        if CAUSAL:
            acc, m_i, l_i = _attn_tma_blocks(
                acc, m_i, l_i, q, k_desc, v_desc, off_b, off_h, head_row, 0,
                tl.minimum(first + BLOCK_M, N), offs_m + 1, qk_scale, BLOCK_N, HEAD_DIM, FLAT,
                True, True,
            )  # fmt: skip
        else:
            every_key = tl.zeros((BLOCK_M,), tl.int32) + N
            acc, m_i, l_i = _attn_tma_blocks(
                acc, m_i, l_i, q, k_desc, v_desc, off_b, off_h, head_row, 0, N, every_key,
                qk_scale, BLOCK_N, HEAD_DIM, FLAT, True, True,
            )  # fmt: skip
    elif CAUSAL:
        # -- 07's split: key blocks before the tile without a mask; the diagonal blocks with
        #    one (row i sees j < i + 1); the blocks after the tile never visited
        own_key = offs_m + 1
        acc, m_i, l_i = _attn_tma_blocks(
            acc, m_i, l_i, q, k_desc, v_desc, off_b, off_h, head_row, 0, first, own_key,
            qk_scale, BLOCK_N, HEAD_DIM, FLAT, False, False,
        )  # fmt: skip
        acc, m_i, l_i = _attn_tma_blocks(
            acc, m_i, l_i, q, k_desc, v_desc, off_b, off_h, head_row, first,
            tl.minimum(first + BLOCK_M, N), own_key, qk_scale, BLOCK_N, HEAD_DIM, FLAT, True,
            False,
        )  # fmt: skip
    else:
        # -- 07's split: the whole key blocks without a mask, then the ragged tail (if any)
        full = (N // BLOCK_N) * BLOCK_N
        every_key = tl.zeros((BLOCK_M,), tl.int32) + N
        acc, m_i, l_i = _attn_tma_blocks(
            acc, m_i, l_i, q, k_desc, v_desc, off_b, off_h, head_row, 0, full, every_key,
            qk_scale, BLOCK_N, HEAD_DIM, FLAT, False, False,
        )  # fmt: skip
        acc, m_i, l_i = _attn_tma_blocks(
            acc, m_i, l_i, q, k_desc, v_desc, off_b, off_h, head_row, full, N, every_key,
            qk_scale, BLOCK_N, HEAD_DIM, FLAT, True, False,
        )  # fmt: skip
    # -- normalize and store: the descriptor drops the rows past N
    o = (acc / l_i[:, None]).to(Out.dtype.element_ty)  # (BLOCK_M, HEAD_DIM)
    if FLAT:
        o_desc.store([head_row + first, 0], o)
    else:
        o_desc.store([off_b, off_h, first, 0], o.reshape(1, 1, BLOCK_M, HEAD_DIM))


# -- launchers ----------------------------------------------------------------------------------

_last: dict = {}  # the compiled kernel of the latest launch (None in the interpreter)


def last_compiled() -> dict | None:
    """What the compiler made of the latest launch on a GPU: total warps, shared memory in bytes,
    and whether the kernel was warp-specialized (the TTGIR holds a warp_specialize op). None in
    the interpreter, which compiles nothing."""
    compiled = _last.get("kernel")
    if compiled is None:
        return None
    try:
        ttgir = compiled.asm["ttgir"]
    except (KeyError, AttributeError):  # no TTGIR kept: say nothing about specialization
        ttgir = None
    return {
        "num_warps": compiled.metadata.num_warps,
        "shared": compiled.metadata.shared,
        "warp_specialized": None if ttgir is None else "ttg.warp_specialize" in ttgir,
    }


def _launched(compiled) -> None:
    """Keep the launch's compiled kernel: `kernel[grid](...)` returns it (None in the
    interpreter)."""
    _last["kernel"] = compiled


def _tma_layout_problem(name: str, t: torch.Tensor) -> str | None:
    """Why `t` cannot be read through a tensor descriptor, None when it can: the last dimension
    must be contiguous, the other strides and the base address 16-byte aligned."""
    size = t.element_size()
    if t.stride(-1) != 1:
        return f"{name}: the last dimension is not contiguous (strides {tuple(t.stride())})"
    if any((s * size) % 16 for s in t.stride()[:-1]):
        return f"{name}: a stride of {tuple(t.stride())} elements is not a multiple of 16 bytes"
    if t.data_ptr() % 16:
        return f"{name}: the base address is not 16-byte aligned"
    return None


def _check_tma(**tensors: torch.Tensor) -> None:
    if not supports_tma():
        raise RuntimeError("tensor descriptors need sm_90 or newer (or the interpreter)")
    problems = [p for name, t in tensors.items() if (p := _tma_layout_problem(name, t))]
    if problems:
        raise ValueError("; ".join(problems) + " (matmul_persistent takes any layout)")


def _matmul_shapes(a, b, out, out_dtype):
    M, K = a.shape
    K_b, N = b.shape
    assert K == K_b, f"inner sizes differ: A is {tuple(a.shape)}, B is {tuple(b.shape)}"
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype or a.dtype, device=a.device)
    assert tuple(out.shape) == (M, N), f"out is {tuple(out.shape)}, not {(M, N)}"
    return M, N, K, out


def _persistent_grid(M: int, N: int, config: Config) -> tuple[int, int]:
    """(programs, NUM_SMS): one program per SM, fewer when there are fewer tiles."""
    sms = config.num_sms or num_sms()
    tiles = triton.cdiv(M, config.block_m) * triton.cdiv(N, config.block_n)
    return min(sms, tiles), sms


def _meta(config: Config) -> dict:
    return dict(
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        GROUP_M=config.group_m,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )


def matmul_persistent(a, b, out=None, *, config: Config | None = None):
    """v1: out = a @ b for float16 or bfloat16 matrices of any strides, one program per SM."""
    assert a.dtype == b.dtype and a.dtype in (torch.float16, torch.bfloat16), "fp16 or bf16"
    M, N, K, out = _matmul_shapes(a, b, out, None)
    config = config or default_config()
    programs, sms = _persistent_grid(M, N, config)
    compiled = matmul_persistent_kernel[(programs,)](
        a, b, out, M, N, K, *a.stride(), *b.stride(), *out.stride(),
        NUM_SMS=sms, **_meta(config),
    )  # fmt: skip
    _launched(compiled)
    return out


def matmul_tma(a, b, out=None, *, config: Config | None = None):
    """v2: out = a @ b through tensor descriptors; rows contiguous and 16-byte aligned."""
    assert a.dtype == b.dtype and a.dtype in (torch.float16, torch.bfloat16), "fp16 or bf16"
    M, N, K, out = _matmul_shapes(a, b, out, None)
    _check_tma(a=a, b=b, out=out)
    config = config or default_config()
    programs, sms = _persistent_grid(M, N, config)
    install_allocator()
    compiled = matmul_tma_kernel[(programs,)](
        a, b, out, M, N, K, a.stride(0), b.stride(0), out.stride(0),
        NUM_SMS=sms, **_meta(config),
    )  # fmt: skip
    _launched(compiled)
    return out


def matmul_tma_ws(
    a, b, out=None, *, config: Config | None = None, warp_specialize: bool | None = None
):
    """v3: v2 with the K loop warp-specialized; `warp_specialize=None` turns it on where
    `supports_warp_specialize()` says so (off in the interpreter, which accepts and ignores it).
    `config.ws_on_tiles` moves it to the tile loop, `config.flatten` flattens the loop nest."""
    assert a.dtype == b.dtype and a.dtype in (torch.float16, torch.bfloat16), "fp16 or bf16"
    M, N, K, out = _matmul_shapes(a, b, out, None)
    _check_tma(a=a, b=b, out=out)
    config = config or default_config("tma_ws")
    ws = supports_warp_specialize() if warp_specialize is None else warp_specialize
    programs, sms = _persistent_grid(M, N, config)
    install_allocator()
    compiled = matmul_tma_ws_kernel[(programs,)](
        a, b, out, M, N, K, a.stride(0), b.stride(0), out.stride(0),
        NUM_SMS=sms, WS_K=ws and not config.ws_on_tiles, WS_TILES=ws and config.ws_on_tiles,
        FLATTEN=config.flatten, **_meta(config),
    )  # fmt: skip
    _launched(compiled)
    return out


def quantize_e4m3(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_fp8, scale) with x ≈ scale * x_fp8: one float32 scale for the whole tensor,
    scale = amax / 448, so that the largest |x| lands on e4m3's largest finite value. The scale
    is a 0-d float32 tensor on x's device, as torch._scaled_mm takes it."""
    amax = x.detach().abs().amax().float()
    scale = torch.clamp(amax, min=torch.finfo(torch.float32).tiny) / E4M3_MAX
    x_fp8 = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return x_fp8, scale


def matmul_fp8(
    a,
    b,
    a_scale,
    b_scale,
    out=None,
    *,
    out_dtype: torch.dtype = torch.bfloat16,
    config: Config | None = None,
    fast_accum: bool = True,
    warp_specialize: bool = False,
):
    """v4: out = (a_scale * b_scale) * (a @ b) for float8 e4m3 `a` (M, K), row-major, and `b`
    (K, N), column-major (b.t() contiguous), as torch._scaled_mm takes them; the scales are
    one-element float32 tensors (quantize_e4m3's). `fast_accum` as _scaled_mm's use_fast_accum:
    True sums all of K in the tensor cores' accumulator (Triton's default on sm_90)."""
    e4m3 = torch.float8_e4m3fn
    assert a.dtype == b.dtype == e4m3, f"float8 e4m3 inputs, not {a.dtype} and {b.dtype}"
    assert out_dtype in (torch.bfloat16, torch.float16), "bfloat16 or float16 output"
    assert a_scale.numel() == 1 and b_scale.numel() == 1, "per-tensor scales: one value each"
    M, N, K, out = _matmul_shapes(a, b, out, out_dtype)
    b_t = b.t()  # (N, K), rows contiguous
    _check_tma(a=a, b_transposed=b_t, out=out)
    config = config or default_config("fp8")
    programs, sms = _persistent_grid(M, N, config)
    a_scale = a_scale.reshape(1).to(device=a.device, dtype=torch.float32)
    b_scale = b_scale.reshape(1).to(device=a.device, dtype=torch.float32)
    install_allocator()
    compiled = matmul_fp8_kernel[(programs,)](
        a, b_t, out, a_scale, b_scale, M, N, K, a.stride(0), b_t.stride(0), out.stride(0),
        NUM_SMS=sms, FAST_ACC=fast_accum, WARP_SPECIALIZE=warp_specialize,
        FLATTEN=config.flatten and not warp_specialize, **_meta(config),
    )  # fmt: skip
    _launched(compiled)
    return out


def attention_tma_ws(
    q,
    k,
    v,
    out=None,
    *,
    causal: bool = False,
    config: AttentionConfig | None = None,
    warp_specialize: bool | None = None,
    flat: bool | None = None,
):
    """softmax(q kᵀ / sqrt(D)) v for (B, H, N, D) float16 or bfloat16 tensors, D in {64, 128}
    on a GPU (16 to 128 in the interpreter); causal: query i sees the keys j <= i. Q, K and V
    are read through tensor descriptors. `flat=None` uses two-dimensional descriptors where the
    layout allows (contiguous tensors, N a multiple of the query block), four-dimensional ones
    elsewhere. `warp_specialize=None` warp-specializes the loop over key blocks where
    supported and the descriptors are flat: Triton 3.6 and 3.9 fail to compile the
    four-dimensional ones in a warp-specialized loop for sm_90."""
    B, H, N, D = q.shape
    assert k.shape == v.shape == q.shape, "q, k and v must have one shape"
    assert q.dtype == k.dtype == v.dtype and q.dtype in (torch.float16, torch.bfloat16)
    assert D in (16, 32, 64, 128), f"head dim {D}: 16, 32, 64 or 128"
    out = torch.empty_like(q) if out is None else out
    assert out.shape == q.shape and out.dtype == q.dtype
    _check_tma(q=q, k=k, v=v, out=out)
    block_m = (config or default_attention_config(D)).block_m
    contiguous = all(t.is_contiguous() for t in (q, k, v, out))
    can_flat = contiguous and N % block_m == 0
    flat = can_flat if flat is None else flat
    if flat and not can_flat:
        raise ValueError("flat descriptors need contiguous tensors and N a multiple of block_m")
    ws = supports_warp_specialize() and flat if warp_specialize is None else warp_specialize
    if ws and not flat:
        raise ValueError(
            "warp specialization here needs the flat descriptors (contiguous tensors, N a "
            "multiple of block_m): with four-dimensional ones the compiler fails for sm_90"
        )
    config = config or default_attention_config(D, ws)
    assert config.block_m % config.block_n == 0, "block_n must divide block_m"
    install_allocator()
    compiled = attention_tma_kernel[(triton.cdiv(N, config.block_m), B * H)](
        q, k, v, out,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        B, H, N, LOG2E / math.sqrt(D),
        HEAD_DIM=D, BLOCK_M=config.block_m, BLOCK_N=config.block_n, CAUSAL=causal, FLAT=flat,
        WARP_SPECIALIZE=ws, num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    _launched(compiled)
    return out


__all__ = [
    "AttentionConfig",
    "Config",
    "E4M3_MAX",
    "attention_tma_ws",
    "default_attention_config",
    "default_config",
    "install_allocator",
    "interpreted",
    "last_compiled",
    "matmul_fp8",
    "matmul_persistent",
    "matmul_tma",
    "matmul_tma_ws",
    "num_sms",
    "quantize_e4m3",
    "supports_tma",
    "supports_warp_specialize",
]
