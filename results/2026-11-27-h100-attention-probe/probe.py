"""Attention on descriptors on a Hopper GPU: correctness at small shapes, then speed vs cuDNN.

Run beside kernels.py of commit ebc292c (bench/hopper/kernels.py) with kernels.patch applied:
    python probe.py OUT.json
"""
import json, math, sys, time
import torch, triton
from torch.nn.attention import SDPBackend, sdpa_kernel
import kernels as K

out_path = sys.argv[1]
res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
       "checks": [], "speed": [], "baselines": {}}
def save():
    json.dump(res, open(out_path, "w"), indent=1)

def ref(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)

C = K.AttentionConfig
variants = {
  "ws 128x128 w4 s2": dict(config=C(128, 128, 4, 2), warp_specialize=True),
  "ws 128x128 w4 s2 even": dict(config=C(128, 128, 4, 2), warp_specialize=True, even_n=True),
  "ws 128x64 w4 s3": dict(config=C(128, 64, 4, 3), warp_specialize=True),
  "ws 128x64 w4 s2": dict(config=C(128, 64, 4, 2), warp_specialize=True),
  "ws 128x128 w4 s3": dict(config=C(128, 128, 4, 3), warp_specialize=True),
  "ws 128x128 w4 s3 even": dict(config=C(128, 128, 4, 3), warp_specialize=True, even_n=True),
  "2d 128x64 w8 s3": dict(config=C(128, 64, 8, 3), warp_specialize=False, flat=True),
  "2d 128x64 w4 s3": dict(config=C(128, 64, 4, 3), warp_specialize=False, flat=True),
  "2d 128x128 w8 s2": dict(config=C(128, 128, 8, 2), warp_specialize=False, flat=True),
  "2d 128x128 w8 s3": dict(config=C(128, 128, 8, 3), warp_specialize=False, flat=True),
  "2d 64x64 w4 s3": dict(config=C(64, 64, 4, 3), warp_specialize=False, flat=True),
  "2d 64x64 w4 s4": dict(config=C(64, 64, 4, 4), warp_specialize=False, flat=True),
  "4d 128x64 w8 s3": dict(config=C(128, 64, 8, 3), warp_specialize=False, flat=False),
  "4d 64x64 w4 s3": dict(config=C(64, 64, 4, 3), warp_specialize=False, flat=False),
}
t0 = time.time()
# -- correctness at small shapes (and a ragged N for the 4-D ones)
for name, kw in variants.items():
    for (b, h, n) in ((2, 3, 1024), (1, 2, 256), (4, 32, 4096)):
        for d in (64, 128):
            for causal in (False, True):
                if kw.get("even_n") and causal: continue
                g = torch.Generator(device="cuda").manual_seed(0)
                q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16, generator=g) for _ in "qkv")
                row = {"variant": name, "b": b, "h": h, "n": n, "d": d, "causal": causal}
                try:
                    o = K.attention_tma_ws(q, k, v, causal=causal, **kw)
                    torch.cuda.synchronize()
                    want = ref(q, k, v, causal)
                    err = (o.double() - want).abs().max().item()
                    row.update(err=err, nan=bool(torch.isnan(o).any()), compiled=K.last_compiled())
                except Exception as e:
                    row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                res["checks"].append(row)
    save()
print("checks", round(time.time() - t0), "s", flush=True)
for r in res["checks"]:
    if r.get("error") or r.get("nan") or (r.get("err") or 0) > 5e-3:
        print("BAD", r)
# -- speed at B 4, H 32, N 4096
b, h, n = 4, 32, 4096
bench = lambda f: triton.testing.do_bench(f, warmup=50, rep=300, return_mode="median")
for d in (64, 128):
    for causal in (False, True):
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in "qkv")
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        base = {}
        for be in ("CUDNN_ATTENTION", "FLASH_ATTENTION"):
            with sdpa_kernel(getattr(SDPBackend, be)):
                base[be] = bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal))
        res["baselines"][f"d{d} causal={causal}"] = {k_: flops / ms / 1e9 for k_, ms in base.items()}
        for name, kw in variants.items():
            if kw.get("even_n") and causal: continue
            try:
                out = torch.empty_like(q)
                ms = bench(lambda: K.attention_tma_ws(q, k, v, out, causal=causal, **kw))
                res["speed"].append({"variant": name, "d": d, "causal": causal, "tflops": flops / ms / 1e9,
                                     "vs_cudnn": base["CUDNN_ATTENTION"] / ms, "compiled": K.last_compiled()})
            except Exception as e:
                res["speed"].append({"variant": name, "d": d, "causal": causal, "error": str(e)[:300]})
        # cuDNN again at the end (drift)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            again = bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal))
        res["baselines"][f"d{d} causal={causal}"]["cudnn_again"] = flops / again / 1e9
        save()
        print(d, causal, res["baselines"][f"d{d} causal={causal}"], flush=True)
        for r in res["speed"]:
            if r["d"] == d and r["causal"] == causal:
                print("   ", r["variant"], round(r.get("tflops", 0)), round(r.get("vs_cudnn", 0), 3), r.get("error", ""), flush=True)
print("total", round(time.time() - t0), "s")
