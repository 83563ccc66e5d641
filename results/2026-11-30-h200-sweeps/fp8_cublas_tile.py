"""float8: cuBLAS's tile (128x128x128, 6 stages, as nvjet_sm90_qqtst_128x128_128x6_2x1 runs it)
in the notebook's kernel and the warp-specialized one, against _scaled_mm fast."""
import json
import os
import sys

sys.path.insert(0, os.getcwd())
import torch
import triton
import triton.language as tl

from bench import hopper_gemm
from grader.runtime import checks, perf

OUT = os.environ.get("OUT", "/tmp")
rg = hopper_gemm.load()
tile_coords = rg.tile_coords
rows = []


@triton.jit
def fp8_ws_kernel(a_ptr, bt_ptr, c_ptr, a_scale_ptr, b_scale_ptr, M, N, K, stride_am, stride_btn,
                  stride_cm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, WS: tl.constexpr,
                  FLATTEN: tl.constexpr, SUBTILE: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(
        a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    bt_desc = tl.make_tensor_descriptor(
        bt_ptr, shape=[N, K], strides=[stride_btn, 1], block_shape=[BLOCK_N, BLOCK_K])
    if SUBTILE:
        c_desc = tl.make_tensor_descriptor(
            c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N // 2])
    else:
        c_desc = tl.make_tensor_descriptor(
            c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
    start = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    tile_c = start - NUM_SMS
    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=FLATTEN, warp_specialize=WS):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            bt = bt_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
            acc = tl.dot(a, bt.T, acc)
        tile_c += NUM_SMS
        pid_m_c, pid_n_c = tile_coords(tile_c, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m_c * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n_c * BLOCK_N + tl.arange(0, BLOCK_N)
        a_scale = tl.load(a_scale_ptr + offs_m, mask=offs_m < M, other=0.0)
        b_scale = tl.load(b_scale_ptr + offs_n, mask=offs_n < N, other=0.0)
        c = acc * a_scale[:, None] * b_scale[None, :]
        if SUBTILE:
            c = tl.reshape(c, (BLOCK_M, 2, BLOCK_N // 2))
            c = tl.permute(c, (0, 2, 1))
            c0, c1 = tl.split(c)
            c_desc.store([pid_m_c * BLOCK_M, pid_n_c * BLOCK_N], c0.to(c_ptr.dtype.element_ty))
            c_desc.store([pid_m_c * BLOCK_M, pid_n_c * BLOCK_N + BLOCK_N // 2],
                         c1.to(c_ptr.dtype.element_ty))
        else:
            c_desc.store([pid_m_c * BLOCK_M, pid_n_c * BLOCK_N], c.to(c_ptr.dtype.element_ty))


def fp8_ws(a8, bt8, sa, sb, out, **kw):
    meta = {**rg.TILES["v4"], "WS": True, "FLATTEN": False, "SUBTILE": False, **kw}
    M, K = a8.shape
    N = bt8.shape[0]
    tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
    programs = min(rg.gemm.num_sms(), tiles)
    triton.set_allocator(rg.gemm._allocate)
    fp8_ws_kernel[(programs,)](a8, bt8, out, sa, sb, M, N, K, a8.stride(0), bt8.stride(0),
                               out.stride(0), NUM_SMS=programs, **meta)
    return out



V = {
    "notebook": lambda o, d: rg.matmul_fp8(*d, o),
    "nb 128x128x128 w8 s5": lambda o, d: rg.matmul_fp8(*d, o, BLOCK_N=128, num_stages=5),
    "nb 128x128x128 w8 s6": lambda o, d: rg.matmul_fp8(*d, o, BLOCK_N=128, num_stages=6),
    "nb 128x128x128 w8 s6 G16": lambda o, d: rg.matmul_fp8(*d, o, BLOCK_N=128, num_stages=6,
                                                           GROUP_M=16),
    "nb 128x256x128 w8 s4": lambda o, d: rg.matmul_fp8(*d, o, num_stages=4),
    "ws 128x128x128 w8 s5": lambda o, d: fp8_ws(*d, o, BLOCK_N=128, num_stages=5),
    "ws 128x128x128 w8 s6": lambda o, d: fp8_ws(*d, o, BLOCK_N=128, num_stages=6),
    "ws sub 128x128x128 w8 s6": lambda o, d: fp8_ws(*d, o, BLOCK_N=128, num_stages=6,
                                                    SUBTILE=True),
    "ws sub 128x256x128 w8 s4": lambda o, d: fp8_ws(*d, o, num_stages=4, SUBTILE=True),
    "flat sub 128x128x128 w8 s6": lambda o, d: fp8_ws(*d, o, BLOCK_N=128, num_stages=6, WS=False,
                                                      FLATTEN=True, SUBTILE=True),
}
import triton.testing as tt
for n in (4096, 8192):
    d = rg.fp8_inputs(n, n, n)(checks.generator(2))
    exact = rg.fp8_reference(*(t.double() for t in d))
    fast = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
    base = lambda: rg.scaled_mm(*d, fast_accum=True, out=fast)  # noqa: E731
    for name, fn in V.items():
        mine = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
        try:
            fn(mine, d)
            torch.cuda.synchronize()
            err = rg.relative(mine, exact)
            ts = [(tt.do_bench(base, warmup=50, rep=200), tt.do_bench(lambda: fn(mine, d), warmup=50, rep=200)) for _ in range(5)]
            b, m = sorted(t[0] for t in ts)[2], sorted(t[1] for t in ts)[2]
            row = dict(n=n, variant=name, err=err, ratio=round(b / m, 4), ms=round(m, 4), base_ms=round(b, 4))
        except Exception as e:  # noqa: BLE001
            row = dict(n=n, variant=name, error=str(e).splitlines()[0][:200])
        rows.append(row)
        print(json.dumps(row), flush=True)
with open(f"{OUT}/fp8-cublas-tile.json", "w") as f:
    json.dump(rows, f, indent=1)
