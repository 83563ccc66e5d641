"""float8: cuBLAS's tile (128x128x128, 6 stages, as nvjet_sm90_qqtst_128x128_128x6_2x1 runs it)
in the notebook's kernel and in fp8_warp_specialized.py's, against _scaled_mm fast."""
import json
import os
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import triton.testing as tt
from fp8_warp_specialized import OUT, fp8_ws, rg, rows

from grader.runtime import checks

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


def timed(n, name, fn, d, exact, base):
    """One variant's row: its error, and its median time of 5 against the baseline's."""
    mine = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
    try:
        fn(mine, d)
        torch.cuda.synchronize()
        pairs = [(tt.do_bench(base, warmup=50, rep=200),
                  tt.do_bench(lambda: fn(mine, d), warmup=50, rep=200)) for _ in range(5)]
    except Exception as e:  # noqa: BLE001
        return dict(n=n, variant=name, error=str(e).splitlines()[0][:200])
    b, m = (sorted(times)[2] for times in zip(*pairs))
    return dict(n=n, variant=name, err=rg.relative(mine, exact), ratio=round(b / m, 4),
                ms=round(m, 4), base_ms=round(b, 4))


for n in (4096, 8192):
    d = rg.fp8_inputs(n, n, n)(checks.generator(2))
    exact = rg.fp8_reference(*(t.double() for t in d))
    fast = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
    rows += [timed(n, name, fn, d, exact, lambda: rg.scaled_mm(*d, fast_accum=True, out=fast))
             for name, fn in V.items()]
    print(json.dumps(rows[-len(V):]), flush=True)
json.dump(rows, open(f"{OUT}/fp8-cublas-tile.json", "w"), indent=1)
