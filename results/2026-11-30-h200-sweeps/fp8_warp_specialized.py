"""The float8 kernel with its tile loop warp-specialized, and its epilogue in halves
(as Triton's persistent matmul tutorial does), against _scaled_mm(use_fast_accum=True)."""
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


if __name__ == "__main__":
    for n in (4096, 8192):
        a8, bt8, sa, sb = rg.fp8_inputs(n, n, n)(checks.generator(2))
        exact = rg.fp8_reference(a8.double(), bt8.double(), sa.double(), sb.double())
        fast = torch.empty(n, n, dtype=torch.bfloat16, device=a8.device)
        base = {"fast": lambda: rg.scaled_mm(a8, bt8, sa, sb, fast_accum=True, out=fast)}
        for name, fn in [
            ("notebook", lambda o: rg.matmul_fp8(a8, bt8, sa, sb, o)),
            ("flatten, subtile", lambda o: fp8_ws(a8, bt8, sa, sb, o, WS=False, FLATTEN=True,
                                                   SUBTILE=True)),
            ("ws", lambda o: fp8_ws(a8, bt8, sa, sb, o)),
            ("ws, subtile", lambda o: fp8_ws(a8, bt8, sa, sb, o, SUBTILE=True)),
            ("ws, subtile, 4 stages K64", lambda o: fp8_ws(a8, bt8, sa, sb, o, SUBTILE=True,
                                                            BLOCK_K=64, num_stages=4)),
            ("ws, subtile, w4", lambda o: fp8_ws(a8, bt8, sa, sb, o, SUBTILE=True, num_warps=4)),
            ("ws, subtile, G16", lambda o: fp8_ws(a8, bt8, sa, sb, o, SUBTILE=True, GROUP_M=16)),
        ]:
            mine = torch.empty(n, n, dtype=torch.bfloat16, device=a8.device)
            try:
                fn(mine)
                err = rg.relative(mine, exact)
                c, = perf.compare_all(lambda: fn(mine), base, name=name)
                row = dict(n=n, variant=name, err=err, ratio=round(c.speedup, 4), flags=c.flags)
            except Exception as e:  # noqa: BLE001
                row = dict(n=n, variant=name, error=str(e).splitlines()[0][:200])
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(f"{OUT}/sweep9b.json", "w") as f:
        json.dump(rows, f, indent=1)
