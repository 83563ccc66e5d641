"""One run on an H100 or H200 for a future notebook 09: every kernel of kernels.py checked against
PyTorch, then timed with triton.testing.do_bench against the libraries it competes with.

    python bench/hopper/probe_gpu.py RESULTS.json

- matmul v1, v2, v3 in float16 and bfloat16 at 2048, 4096 and 8192 (square) against cuBLAS
  (torch.matmul): a small search over configs at 4096 (round-robin over kernels and dtypes, so
  that a short budget shortens every search alike), the three best re-timed at 2048 and 8192;
- v4 FP8 (e4m3, per-tensor scales) at 4096 and 8192 against torch._scaled_mm, with and without
  fast accumulation on both sides, and its error against the unquantized product;
- attention at B=4, H=32, N=4096, D in {64, 128}, causal and not, against SDPA's flash and
  cuDNN backends (torch.nn.attention.sdpa_kernel);
- where the course's own kernels import (05's gemm, 07's flash_attention), the same sizes for
  them too.

Each part runs in a process of its own, so that a kernel that faults the GPU costs its part,
not the run; every failure is caught and recorded, never fatal. Progress lines carry the time
since the start; each part stops at its deadline, and the whole run ends within 8 minutes.
RESULTS.json holds the environment, every figure (TFLOP/s, ratio to the baseline, max error,
config, every config tried) and every failure; the tables are printed at the end.

`--dry-run` runs the same parts on the CPU, in Triton's interpreter, at toy sizes and with a
wall-clock timer: a check of this script's own logic, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

# Seconds from the start by which each part must end (a child process each): the last at
# 460 s, then the tables are printed; a part still running GRACE_S past its deadline is killed.
PARTS = {"checks": 75, "matmul": 280, "fp8": 350, "attention": 460}
GRACE_S = 10
COMPILE_RESERVE_S = 8  # no new config is started with less time than this left
SIZES = (2048, 4096, 8192)
TUNE_SIZE = 4096
FP8_SIZES = (4096, 8192)
ATTENTION_BHN = (4, 32, 4096)
CHECK_MNK = (1000, 1000, 776)  # each 8 past a multiple of 16: ragged for every tile
CHECK_N = 1000  # the attention check's sequence length
DEV = "cuda"
DRY = False  # --dry-run: the CPU, the interpreter, toy sizes, a wall-clock timer


def dry_run() -> None:
    """Switch this process to the dry run (before Triton is imported)."""
    global DEV, DRY, SIZES, TUNE_SIZE, FP8_SIZES, ATTENTION_BHN, CHECK_MNK, CHECK_N
    os.environ["TRITON_INTERPRET"] = "1"
    DEV, DRY = "cpu", True
    SIZES, TUNE_SIZE, FP8_SIZES = (64, 128, 96), 128, (128, 96)
    ATTENTION_BHN, CHECK_MNK, CHECK_N = (1, 2, 128), (100, 72, 88), 100


WRONG_ABOVE = 1e-2  # a max error above this share of max|reference| marks a result wrong
TUNE_MS = dict(warmup=10, rep=40)  # do_bench budgets (milliseconds) while searching
FINAL_MS = dict(warmup=25, rep=100)  # and for the figures reported


# -- the parent: runs each part in a child process, merges, prints ------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="where to write the JSON of results")
    parser.add_argument("--part", choices=list(PARTS), help=argparse.SUPPRESS)
    parser.add_argument("--start", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--dry-run", action="store_true", help="check the logic on the CPU")
    args = parser.parse_args(argv)
    if args.dry_run:
        dry_run()
    else:
        os.environ.pop("TRITON_INTERPRET", None)  # a GPU run: never the interpreter
    if args.part:
        return run_part(args.part, Path(args.out), args.start)
    start = time.time()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    merged: dict = {"parts": {}, "failures": []}
    for part, deadline in PARTS.items():
        left = start + deadline - time.time()
        if left < 15:
            merged["failures"].append({"where": part, "error": "no time left for this part"})
            continue
        partial = out.with_name(f"{out.stem}.{part}.json")
        partial.unlink(missing_ok=True)
        command = [sys.executable, str(Path(__file__).resolve()), str(partial)]
        command += ["--part", part, "--start", str(start)] + (["--dry-run"] if DRY else [])
        print(f"[{time.time() - start:6.1f}s] {part}: starting, {left:.0f} s left", flush=True)
        try:
            proc = subprocess.run(command, timeout=left + GRACE_S, check=False)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = "killed at its deadline"
        try:
            record = json.loads(partial.read_text()) if partial.exists() else {}
        except ValueError as exc:
            record = {"failures": [{"where": part, "error": f"unreadable record: {exc}"}]}
        partial.unlink(missing_ok=True)
        if code != 0:
            merged["failures"].append({"where": part, "error": f"process ended: {code}"})
        merged["failures"] += record.pop("failures", [])
        merged["parts"][part] = record
        merged["elapsed_s"] = round(time.time() - start, 1)
        out.write_text(json.dumps(merged, indent=1))
    print_tables(merged)
    print(f"\nwrote {out} after {time.time() - start:.0f} s")
    return 0


def print_tables(merged: dict) -> None:
    parts = merged["parts"]
    env = parts.get("checks", {}).get("env", {})
    if env:
        print("\n" + ", ".join(f"{k}: {v}" for k, v in env.items()))
    checks = parts.get("checks", {}).get("checks", [])
    if checks:
        print("\nCorrectness (max |error| / max |reference|)")
        rows = [[c["kernel"], c["case"], fmt(c.get("rel_error")), c["verdict"]] for c in checks]
        print(table(["kernel", "case", "error", "verdict"], rows))
    for part, title, base in [
        ("matmul", "Matmul (square)", "cuBLAS"),
        ("fp8", "FP8 matmul (square)", "_scaled_mm"),
        ("attention", "Attention, (B, H, N) = (4, 32, 4096), float16", "SDPA"),
    ]:
        rows = parts.get(part, {}).get("results", [])
        if not rows:
            continue
        print(f"\n{title}")
        cells = [
            [
                r["kernel"], r["case"], fmt(r.get("tflops"), ".0f"), r.get("baseline", ""),
                fmt(r.get("baseline_tflops"), ".0f"), fmt(r.get("ratio"), ".2f"),
                fmt(r.get("rel_error")), r.get("config_label", ""),
            ]
            for r in rows
        ]  # fmt: skip
        headers = ["kernel", "case", "TFLOP/s", base, "TFLOP/s", "ratio", "error", "config"]
        print(table(headers, cells))
    if merged["failures"]:
        print(f"\nFailures ({len(merged['failures'])})")
        for f in merged["failures"]:
            print(f"  {f['where']}: {f['error']}")


def table(headers, rows) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=True)]
    lines = [headers, ["-" * w for w in widths], *rows]
    return "\n".join(
        "  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)).rstrip() for r in lines
    )


def fmt(x, spec=".1e") -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


# -- a child: one part --------------------------------------------------------------------------


class Part:
    """One part's record, written to its JSON after every change, and its clock."""

    def __init__(self, name: str, path: Path, start: float):
        self.name, self.path, self.start = name, path, start
        self.deadline = start + PARTS[name]
        self.record: dict = {"results": [], "failures": [], "skipped": []}
        self.save()

    def left(self) -> float:
        return self.deadline - time.time()

    def log(self, message: str) -> None:
        print(f"[{time.time() - self.start:6.1f}s] {self.name}: {message}", flush=True)

    def save(self) -> None:
        """Write the record whole, then move it into place: a process killed meanwhile leaves
        the previous record, never half of one."""
        fresh = self.path.with_suffix(".tmp")
        fresh.write_text(json.dumps(self.record, indent=1, default=str))
        fresh.replace(self.path)

    def fail(self, where: str, exc: BaseException) -> None:
        """Record a failure; a fault that leaves the GPU unusable ends the part (its process)."""
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        text = str(exc).strip().splitlines()
        error = f"{type(exc).__name__}: {text[0][:300] if text else ''}"
        self.record["failures"].append(
            {"where": f"{self.name}: {where}", "error": error, "trace": "".join(lines[-4:])}
        )
        self.log(f"FAILED {where}: {error}")
        self.save()
        fatal = ("illegal memory access", "unspecified launch failure", "misaligned address")
        if any(word in str(exc) for word in fatal):
            self.log("the GPU's context is lost: this part stops here")
            sys.exit(3)

    def skip(self, what: str) -> None:
        self.record["skipped"].append(what)
        self.save()


def run_part(name: str, path: Path, start: float) -> int:
    import torch

    sys.path.insert(0, str(HERE))
    part = Part(name, path, start)
    if not DRY and not torch.cuda.is_available():
        part.fail("setup", RuntimeError("no CUDA device: this probe runs on a GPU"))
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 references in float32
    torch.manual_seed(0)
    run = {"checks": part_checks, "matmul": part_matmul, "fp8": part_fp8}
    run["attention"] = part_attention
    try:
        run[name](part)
    except Exception as exc:  # noqa: BLE001 - the rest of this part is lost, not the run
        part.fail("the part itself", exc)
        return 1
    part.save()
    return 0


def bench(fn, budget=FINAL_MS) -> float:
    """Median milliseconds of fn() by triton.testing.do_bench (L2 flushed before each call);
    in the dry run, one call's wall-clock time."""
    import triton

    if DRY:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    return triton.testing.do_bench(fn, return_mode="median", **budget)


def sync() -> None:
    import torch

    if not DRY:
        torch.cuda.synchronize()


def randn(*shape, dtype=None):
    import torch

    return torch.randn(*shape, device=DEV, dtype=dtype or torch.float32)


def rel_error(out, ref) -> float:
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max())


def verdict(err: float) -> str:
    return "ok" if err <= WRONG_ABOVE else "WRONG"


def ws_supported(kernels) -> bool:
    """Whether to try warp specialization: where supported, and in the dry run (which runs the
    same paths in the interpreter, where the keyword is accepted and ignored)."""
    return DRY or kernels.supports_warp_specialize()


def compiled_note(entry: dict) -> str:
    """What the compiler made of a launch, for a progress line: warps, and warp specialization."""
    c = entry.get("compiled")
    if not c:
        return ""
    ws = ", warp-specialized" if c["warp_specialized"] else ""
    return f" [{c['num_warps']} warps, {c['shared'] // 1024} KB shared{ws}]"


# -- part 1: the environment and correctness ----------------------------------------------------


def part_checks(part: Part) -> None:
    import kernels
    import torch
    import triton

    if DRY:
        name, capability, sms = "CPU (dry run, interpreter)", "none", kernels.num_sms()
    else:
        props = torch.cuda.get_device_properties(0)
        name, sms = props.name, props.multi_processor_count
        capability = "sm_{}{}".format(*torch.cuda.get_device_capability())
    part.record["env"] = {
        "device": name,
        "capability": capability,
        "SMs": sms,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "supports_tma": kernels.supports_tma(),
        "supports_warp_specialize": kernels.supports_warp_specialize(),
    }
    part.log(json.dumps(part.record["env"]))
    checks = part.record["checks"] = []

    def check(kernel, case, fn, ref):
        if part.left() < COMPILE_RESERVE_S:
            part.skip(f"check {kernel} {case}: no time left")
            return
        try:
            t0 = time.time()
            out = fn()
            sync()
            err = rel_error(out, ref)
        except Exception as exc:  # noqa: BLE001 - recorded, never fatal
            part.fail(f"check {kernel} {case}", exc)
            checks.append({"kernel": kernel, "case": case, "verdict": "failed"})
        else:
            first = time.time() - t0
            checks.append(
                {"kernel": kernel, "case": case, "rel_error": err, "verdict": verdict(err),
                 "first_call_s": round(first, 2)}
            )  # fmt: skip
            part.log(f"{kernel} {case}: error {err:.1e} ({verdict(err)}), first call {first:.1f} s")
        part.save()

    # -- matmul on ragged sizes (each dimension 8 past a multiple of 16), default configs
    M, N, K = CHECK_MNK
    for dtype in (torch.float16, torch.bfloat16):
        a, b = randn(M, K, dtype=dtype), randn(K, N, dtype=dtype)
        ref = a.float() @ b.float()
        case = f"{M}x{N}x{K} {str(dtype)[6:]}"
        check("v1 persistent", case, lambda a=a, b=b: kernels.matmul_persistent(a, b), ref)
        check("v2 tma", case, lambda a=a, b=b: kernels.matmul_tma(a, b), ref)
        check("v3 tma+ws", case, lambda a=a, b=b: kernels.matmul_tma_ws(a, b), ref)
    K8 = K + 8  # a multiple of 16: one-byte rows must be 16-byte aligned
    a8, sa = kernels.quantize_e4m3(randn(M, K8))
    w8, sb = kernels.quantize_e4m3(randn(N, K8))
    ref = (a8.float() * sa) @ (w8.float() * sb).t()
    for fast in (True, False):
        check(
            "v4 fp8", f"{M}x{N}x{K8} e4m3->bf16 fast_accum={fast}",
            lambda f=fast: kernels.matmul_fp8(a8, w8.t(), sa, sb, fast_accum=f), ref,
        )  # fmt: skip
    # -- attention: a ragged length (4-D descriptors), both head dims, causal and not
    for d in (64, 128):
        q, k, v = (randn(2, 3, CHECK_N, d, dtype=torch.float16) for _ in "qkv")
        for causal in (False, True):
            ref = torch.nn.functional.scaled_dot_product_attention(
                q.float(), k.float(), v.float(), is_causal=causal
            )
            check(
                "attention", f"B2 H3 N{CHECK_N} D{d} {'causal' if causal else 'full'}",
                lambda c=causal, q=q, k=k, v=v: kernels.attention_tma_ws(q, k, v, causal=c), ref,
            )  # fmt: skip
    if ws_supported(kernels):  # the warp-specialized loop needs a flat layout
        n = -(-CHECK_N // 128) * 128  # a multiple of the query block: 1024 on the GPU
        for d, causal in ((64, False), (128, True)):
            q, k, v = (randn(2, 3, n, d, dtype=torch.float16) for _ in "qkv")
            ref = torch.nn.functional.scaled_dot_product_attention(
                q.float(), k.float(), v.float(), is_causal=causal
            )
            check(
                "attention", f"B2 H3 N{n} D{d} {'causal' if causal else 'full'} ws",
                lambda c=causal, q=q, k=k, v=v: kernels.attention_tma_ws(
                    q, k, v, causal=c, warp_specialize=True),
                ref,
            )  # fmt: skip


# -- part 2: matmul against cuBLAS --------------------------------------------------------------


def smem_limit() -> int:
    import torch

    if DRY:
        return 227 * 1024
    props = torch.cuda.get_device_properties(0)
    return getattr(props, "shared_memory_per_block_optin", 227 * 1024)


def smem_needed(cfg, in_bytes: int, out_bytes: int, tma_store: bool) -> int:
    """The pipeline's A and B buffers, plus the output tile a descriptor store stages."""
    pipeline = cfg.num_stages * (cfg.block_m * cfg.block_k + cfg.block_k * cfg.block_n) * in_bytes
    return pipeline + (cfg.block_m * cfg.block_n * out_bytes if tma_store else 0)


def matmul_space(kernel: str):
    """The search: 128x128x64, 128x256x64, 256x128x64 tiles, 3 or 4 stages, 4 or 8 warps (the
    two larger tiles with 8 only: 4 warps would hold 256 float32 accumulators per thread). v3
    with 4 warps and the nest not flattened, the only setting in which Triton warp-specializes
    for sm_90 (it then adds two consumer warp groups: 12 warps)."""
    from kernels import Config

    if kernel == "v3 tma+ws":
        return [
            Config(128, 256, 64, num_warps=4, num_stages=3, flatten=False),
            Config(128, 128, 64, num_warps=4, num_stages=4, flatten=False),
            Config(256, 128, 64, num_warps=4, num_stages=3, flatten=False),
            Config(128, 128, 64, num_warps=4, num_stages=3, flatten=False),
        ]
    return [
        Config(128, 256, 64, num_warps=8, num_stages=3),
        Config(128, 128, 64, num_warps=8, num_stages=4),
        Config(256, 128, 64, num_warps=8, num_stages=3),
        Config(128, 128, 64, num_warps=4, num_stages=4),
        Config(128, 128, 64, num_warps=8, num_stages=3),
        Config(128, 128, 64, num_warps=4, num_stages=3),
        Config(128, 256, 64, num_warps=8, num_stages=4),
        Config(256, 128, 64, num_warps=8, num_stages=4),
    ]


def part_matmul(part: Part) -> None:
    import kernels
    import torch

    flops = {n: 2.0 * n**3 for n in SIZES}
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    launchers = {
        "v1 persistent": kernels.matmul_persistent,
        "v2 tma": kernels.matmul_tma,
        "v3 tma+ws": kernels.matmul_tma_ws,
    }
    tma_store = {"v1 persistent": False, "v2 tma": True, "v3 tma+ws": True}
    limit = smem_limit()
    sms = kernels.num_sms()
    problems, cublas = {}, {}
    for n in SIZES:
        for dname, dtype in dtypes.items():
            a, b = randn(n, n, dtype=dtype), randn(n, n, dtype=dtype)
            out = torch.empty(n, n, device=DEV, dtype=dtype)
            ref = a.float() @ b.float()
            problems[n, dname] = (a, b, out, ref)
            try:
                ms = bench(lambda a=a, b=b, out=out: torch.matmul(a, b, out=out))
                cublas[n, dname] = ms
                part.log(f"cuBLAS {dname} {n}: {ms:.3f} ms, {flops[n] / ms / 1e9:.0f} TFLOP/s")
            except Exception as exc:  # noqa: BLE001
                part.fail(f"cuBLAS {dname} {n}", exc)
    tried: dict = {(k, d): [] for k in launchers for d in dtypes}  # at TUNE_SIZE

    def attempt(kernel, dname, cfg, n, budget, ws=None):
        """Time one config; the entry (with ms None and why on failure) joins the record."""
        a, b, out, ref = problems[n, dname]
        entry = {"config": cfg.record(), "label": cfg.label(), "size": n, "ms": None}
        need = smem_needed(cfg, 2, 2, tma_store[kernel])
        if need > limit:
            entry["why"] = f"pruned: {need // 1024} KB of shared memory > {limit // 1024} KB"
            return entry
        extra = {} if ws is None else {"warp_specialize": ws}
        fn = launchers[kernel]

        def call():
            return fn(a, b, out, config=cfg, **extra)

        try:
            t0 = time.time()
            call()
            sync()
            entry["first_call_s"] = round(time.time() - t0, 2)
            entry["compiled"] = kernels.last_compiled()
            entry["rel_error"] = rel_error(out, ref)
            if entry["rel_error"] > WRONG_ABOVE:
                entry["why"] = "wrong result"
                return entry
            entry["ms"] = bench(call, budget)
            entry["tflops"] = flops[n] / entry["ms"] / 1e9
        except Exception as exc:  # noqa: BLE001
            entry["why"] = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
            if type(exc).__name__ != "OutOfResources":  # a config too large is not a failure
                part.fail(f"{kernel} {dname} {n} {cfg.label()}", exc)
        return entry

    def log_entry(kernel, dname, e):
        shown = f"{e['ms']:.3f} ms, {e['tflops']:.0f} TFLOP/s" if e["ms"] else e.get("why")
        part.log(f"{kernel} {dname} {e['size']} {e['label']}: {shown}{compiled_note(e)}")

    # -- 1. the search at TUNE_SIZE, one config of every (kernel, dtype) at a time
    reserve = 45  # seconds kept for the other sizes
    pairs = [(k, d) for k in launchers for d in dtypes]
    spaces = {kernel: matmul_space(kernel) for kernel in launchers}
    for i in range(max(len(space) for space in spaces.values())):
        for kernel, dname in pairs:
            if i >= len(spaces[kernel]):
                continue
            cfg = spaces[kernel][i]
            if part.left() < reserve + COMPILE_RESERVE_S:
                part.skip(f"{kernel} {dname} {cfg.label()}: no time left")
                continue
            e = attempt(kernel, dname, cfg, TUNE_SIZE, TUNE_MS)
            tried[kernel, dname].append(e)
            log_entry(kernel, dname, e)
            part.record["tried"] = {f"{k} {d}": v for (k, d), v in tried.items()}
            part.save()

    def best(kernel, dname, count=1):
        done = [e for e in tried[kernel, dname] if e["ms"]]
        return sorted(done, key=lambda e: e["ms"])[:count]

    # -- 2. variants of each winner: twice as many programs as SMs; for v3, the loop options
    #       and warp specialization off (the same kernel, as v2 with the nest not flattened)
    variants = []
    for kernel, dname in pairs:
        for e in best(kernel, dname):
            cfg = kernels.Config(**e["config"])
            variants.append((kernel, dname, replace(cfg, num_sms=2 * sms), None))
            if kernel == "v3 tma+ws":
                for change in ({"flatten": True}, {"ws_on_tiles": True}):
                    variants.append((kernel, dname, replace(cfg, **change), None))
                variants.append((kernel, dname, cfg, False))
    for kernel, dname, cfg, ws in variants:
        if part.left() < reserve + COMPILE_RESERVE_S:
            part.skip(f"{kernel} {dname} {cfg.label()} ws={ws}: no time left")
            continue
        e = attempt(kernel, dname, cfg, TUNE_SIZE, TUNE_MS, ws=ws)
        if ws is False:
            e["label"] += " ws off"
        e["variant"] = True
        tried[kernel, dname].append(e)
        log_entry(kernel, dname, e)
        part.record["tried"] = {f"{k} {d}": v for (k, d), v in tried.items()}
        part.save()

    # -- 3. the figures: the best three at every size, with the longer timing budget
    results = part.record["results"]
    for n in SIZES:
        for kernel, dname in pairs:
            top = [e for e in best(kernel, dname, 3) if "ws off" not in e["label"]]
            if not top:
                part.skip(f"{kernel} {dname} {n}: no config ran at {TUNE_SIZE}")
                continue
            a, b, out, ref = problems[n, dname]
            try:  # cuBLAS again, next to the figures it is compared with
                cublas[n, dname] = bench(lambda a=a, b=b, out=out: torch.matmul(a, b, out=out))
            except Exception as exc:  # noqa: BLE001
                part.fail(f"cuBLAS {dname} {n} (again)", exc)
            timed = []
            for e in top:
                if part.left() < 3:
                    part.skip(f"{kernel} {dname} {n} {e['label']}: no time left")
                    continue
                cfg = kernels.Config(**e["config"])
                timed.append(attempt(kernel, dname, cfg, n, FINAL_MS))
            timed = [t for t in timed if t["ms"]]
            if not timed:
                continue
            win = min(timed, key=lambda t: t["ms"])
            base = cublas.get((n, dname))
            results.append(
                {
                    "kernel": kernel, "case": f"{dname} {n}", "dtype": dname, "size": n,
                    "ms": win["ms"], "tflops": win["tflops"], "baseline": "cuBLAS",
                    "baseline_ms": base, "baseline_tflops": flops[n] / base / 1e9 if base else None,
                    "ratio": base / win["ms"] if base else None, "rel_error": win["rel_error"],
                    "config": win["config"], "config_label": win["label"], "timed": timed,
                }
            )  # fmt: skip
            part.log(
                f"{kernel} {dname} {n}: {win['tflops']:.0f} TFLOP/s, "
                f"{results[-1]['ratio'] or float('nan'):.2f}x cuBLAS ({win['label']})"
            )
            part.save()
    # -- 4. the course's own tuned matmul (05's gemm.py, persistent path), one config, if it loads
    course_matmul(part, problems, cublas, flops)


def course_matmul(part: Part, problems, cublas, flops) -> None:
    if part.left() < 20:
        part.skip("05's gemm: no time left")
        return
    try:
        sys.path[:0] = [str(ROOT), str(ROOT / "solutions" / "05_autotuning")]
        import gemm  # the course's, beside notebook 05
        import triton

        config = triton.Config(
            {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8,
            num_stages=3,
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001
        part.fail("05's gemm: import", exc)
        return
    for (n, dname), (a, b, out, ref) in problems.items():
        if part.left() < COMPILE_RESERVE_S:
            part.skip(f"05's gemm {dname} {n}: no time left")
            continue
        try:
            gemm.launch_config(config, a, b, out)
            sync()
            err = rel_error(out, ref)
            if err > WRONG_ABOVE:
                part.log(f"05's gemm {dname} {n}: wrong result (error {err:.1e})")
                continue
            ms = bench(lambda a=a, b=b, out=out: gemm.launch_config(config, a, b, out))
        except Exception as exc:  # noqa: BLE001
            part.fail(f"05's gemm {dname} {n}", exc)
            continue
        base = cublas.get((n, dname))
        part.record["results"].append(
            {
                "kernel": "05 gemm (course)", "case": f"{dname} {n}", "dtype": dname, "size": n,
                "ms": ms, "tflops": flops[n] / ms / 1e9, "baseline": "cuBLAS", "baseline_ms": base,
                "baseline_tflops": flops[n] / base / 1e9 if base else None,
                "ratio": base / ms if base else None, "rel_error": err,
                "config_label": "128x256x64 G8 w8 s3 (05's)",
            }
        )  # fmt: skip
        part.log(f"05's gemm {dname} {n}: {flops[n] / ms / 1e9:.0f} TFLOP/s")
        part.save()


# -- part 3: FP8 against torch._scaled_mm -------------------------------------------------------


def fp8_space():
    from kernels import Config

    return [
        Config(128, 256, 128, num_warps=8, num_stages=3),
        Config(128, 128, 128, num_warps=8, num_stages=4),
        Config(256, 128, 128, num_warps=8, num_stages=3),
        Config(128, 128, 128, num_warps=4, num_stages=4),
        Config(128, 256, 64, num_warps=8, num_stages=4),
        Config(128, 128, 64, num_warps=8, num_stages=4),
    ]


def part_fp8(part: Part) -> None:
    import kernels
    import torch

    limit = smem_limit()
    results = part.record["results"]
    tried = part.record["tried"] = []
    problems, baselines = {}, {}
    for n in FP8_SIZES:
        x, w = randn(n, n), randn(n, n)
        a8, sa = kernels.quantize_e4m3(x)
        w8, sb = kernels.quantize_e4m3(w)
        b8 = w8.t()  # (K, N), column-major
        dequant = (a8.float() * sa) @ (b8.float() * sb)
        exact = x @ w.t()
        out = torch.empty(n, n, device=DEV, dtype=torch.bfloat16)
        problems[n] = (a8, b8, sa, sb, out, dequant, exact)
        del x, w
        for fast in (False, True):
            try:

                def theirs(fast=fast, a8=a8, b8=b8, sa=sa, sb=sb):
                    return torch._scaled_mm(
                        a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                        use_fast_accum=fast,
                    )  # fmt: skip

                got = theirs()
                ms = bench(theirs)
                baselines[n, fast] = {
                    "ms": ms, "rel_error": rel_error(got, dequant),
                    "vs_unquantized": rel_error(got, exact),
                }  # fmt: skip
                part.log(
                    f"_scaled_mm {n} fast_accum={fast}: {2 * n**3 / ms / 1e9:.0f} TFLOP/s, error "
                    f"{baselines[n, fast]['rel_error']:.1e}, vs unquantized "
                    f"{baselines[n, fast]['vs_unquantized']:.1e}"
                )
            except Exception as exc:  # noqa: BLE001
                part.fail(f"_scaled_mm {n} fast_accum={fast}", exc)
    part.record["scaled_mm"] = {f"{n} fast_accum={f}": v for (n, f), v in baselines.items()}
    part.save()

    def attempt(cfg, n, budget, fast=True, ws=False):
        a8, b8, sa, sb, out, dequant, exact = problems[n]
        label = cfg.label() + ("" if fast else " slow-acc") + (" ws" if ws else "")
        entry = {"config": cfg.record(), "label": label, "size": n, "fast_accum": fast,
                 "warp_specialize": ws, "ms": None}  # fmt: skip
        need = smem_needed(cfg, 1, 2, True)
        if need > limit:
            entry["why"] = f"pruned: {need // 1024} KB of shared memory > {limit // 1024} KB"
            return entry

        def call():
            return kernels.matmul_fp8(
                a8, b8, sa, sb, out, config=cfg, fast_accum=fast, warp_specialize=ws
            )

        try:
            t0 = time.time()
            call()
            sync()
            entry["first_call_s"] = round(time.time() - t0, 2)
            entry["compiled"] = kernels.last_compiled()
            entry["rel_error"] = rel_error(out, dequant)
            entry["vs_unquantized"] = rel_error(out, exact)
            if entry["rel_error"] > WRONG_ABOVE:
                entry["why"] = "wrong result"
                return entry
            entry["ms"] = bench(call, budget)
            entry["tflops"] = 2 * n**3 / entry["ms"] / 1e9
        except Exception as exc:  # noqa: BLE001
            entry["why"] = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
            if type(exc).__name__ != "OutOfResources":
                part.fail(f"fp8 {n} {label}", exc)
        shown = f"{entry['tflops']:.0f} TFLOP/s" if entry["ms"] else entry.get("why")
        part.log(f"v4 fp8 {n} {label}: {shown}{compiled_note(entry)}")
        return entry

    # -- the search at 4096 (fast accumulation, as Triton's default), then the winner's variants
    for cfg in fp8_space():
        if part.left() < 30 + COMPILE_RESERVE_S:
            part.skip(f"fp8 {cfg.label()}: no time left")
            continue
        tried.append(attempt(cfg, TUNE_SIZE, TUNE_MS))
        part.save()
    ranked = sorted((e for e in tried if e["ms"]), key=lambda e: e["ms"])
    if not ranked:
        return
    win = kernels.Config(**ranked[0]["config"])
    variants = [(False, False)] + ([(True, True)] if ws_supported(kernels) else [])
    for fast, ws in variants:
        if part.left() < 25 + COMPILE_RESERVE_S:
            part.skip(f"fp8 variant fast={fast} ws={ws}: no time left")
            continue
        cfg = replace(win, num_warps=4) if ws else win  # specialized with 4 warps only
        tried.append(attempt(cfg, TUNE_SIZE, TUNE_MS, fast=fast, ws=ws))
        part.save()
    # -- the figures at each size: the best two configs, and the winner with slow accumulation
    fastest = [kernels.Config(**e["config"]) for e in ranked[:2]]
    ws_won = any(e["ms"] and e["warp_specialize"] and e["ms"] < ranked[0]["ms"] for e in tried)
    if ws_won:
        fastest = [replace(c, num_warps=4) for c in fastest]
    for n in FP8_SIZES:
        for fast in (True, False):
            if part.left() < 3:
                part.skip(f"fp8 {n} fast={fast}: no time left")
                continue
            configs = fastest if fast else fastest[:1]
            timed = [attempt(c, n, FINAL_MS, fast=fast, ws=ws_won) for c in configs]
            timed = [t for t in timed if t["ms"]]
            if not timed:
                continue
            best = min(timed, key=lambda t: t["ms"])
            base = baselines.get((n, fast), {}).get("ms")
            results.append(
                {
                    "kernel": "v4 fp8", "case": f"e4m3->bf16 {n} fast_accum={fast}", "size": n,
                    "fast_accum": fast, "ms": best["ms"], "tflops": best["tflops"],
                    "baseline": f"_scaled_mm fast_accum={fast}", "baseline_ms": base,
                    "baseline_tflops": 2 * n**3 / base / 1e9 if base else None,
                    "ratio": base / best["ms"] if base else None,
                    "rel_error": best["rel_error"], "vs_unquantized": best["vs_unquantized"],
                    "config": best["config"], "config_label": best["label"], "timed": timed,
                }
            )  # fmt: skip
            part.save()


# -- part 4: attention against SDPA -------------------------------------------------------------


def attention_space(d: int):
    """(BLOCK_M, BLOCK_N, warps, stages) to try per head dim, 07's default first."""
    from kernels import AttentionConfig

    if d == 64:
        return [AttentionConfig(128, 64, 8, 3), AttentionConfig(128, 128, 8, 3),
                AttentionConfig(128, 64, 4, 3), AttentionConfig(64, 64, 4, 3)]  # fmt: skip
    return [AttentionConfig(128, 64, 8, 3), AttentionConfig(128, 128, 8, 2),
            AttentionConfig(128, 64, 4, 3), AttentionConfig(64, 64, 4, 3)]  # fmt: skip


def part_attention(part: Part) -> None:
    import kernels
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, H, N = ATTENTION_BHN
    sdpa = torch.nn.functional.scaled_dot_product_attention
    backends = {"SDPA flash": SDPBackend.FLASH_ATTENTION, "SDPA cuDNN": SDPBackend.CUDNN_ATTENTION}
    ws_ok = ws_supported(kernels)
    cases, baselines = {}, {}
    for d in (64, 128):
        q, k, v = (randn(B, H, N, d, dtype=torch.float16) for _ in "qkv")
        for causal in (False, True):
            flops = 4.0 * B * H * N * N * d / (2 if causal else 1)
            ref = None
            for name, backend in backends.items():

                def call(backend=backend, q=q, k=k, v=v, causal=causal):
                    with sdpa_kernel(backend):
                        return sdpa(q, k, v, is_causal=causal)

                try:
                    got = call()
                    ref = got if ref is None else ref
                    ms = bench(call)
                    baselines[d, causal, name] = ms
                    part.log(f"{name} D{d} causal={causal}: {flops / ms / 1e9:.0f} TFLOP/s")
                except Exception as exc:  # noqa: BLE001
                    part.fail(f"{name} D{d} causal={causal}", exc)
            out = torch.empty_like(q)
            cases[d, causal] = (q, k, v, out, ref, flops)
    part.record["baselines"] = {f"D{d} causal={c} {n}": ms for (d, c, n), ms in baselines.items()}
    tried = part.record["tried"] = []

    def attempt(d, causal, cfg, ws, flat, budget=TUNE_MS):
        q, k, v, out, ref, flops = cases[d, causal]
        label = f"{cfg.label()} {'ws' if ws else 'no-ws'} {'2-D' if flat else '4-D'}"
        entry = {"d": d, "causal": causal, "config": cfg.record(), "label": label,
                 "warp_specialize": ws, "flat": flat, "ms": None}  # fmt: skip

        def call():
            return kernels.attention_tma_ws(
                q, k, v, out, causal=causal, config=cfg, warp_specialize=ws, flat=flat
            )

        try:
            t0 = time.time()
            call()
            sync()
            entry["first_call_s"] = round(time.time() - t0, 2)
            entry["compiled"] = kernels.last_compiled()
            if ref is not None:
                entry["rel_error"] = rel_error(out, ref)
                if entry["rel_error"] > WRONG_ABOVE:
                    entry["why"] = "wrong result"
                    part.log(f"attention D{d} causal={causal} {label}: wrong result")
                    return entry
            entry["ms"] = bench(call, budget)
            entry["tflops"] = flops / entry["ms"] / 1e9
            part.log(
                f"attention D{d} causal={causal} {label}: {entry['tflops']:.0f} TFLOP/s"
                f"{compiled_note(entry)}"
            )
        except Exception as exc:  # noqa: BLE001
            entry["why"] = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
            if type(exc).__name__ != "OutOfResources":
                part.fail(f"attention D{d} causal={causal} {label}", exc)
        return entry

    # -- rounds over the four cases, so that a short budget cuts every case alike: 07's tiles
    #    with warp specialization (where supported) and without, the 4-D descriptors, then the
    #    other tiles with whichever setting won
    keys = list(cases)

    def winner(d, causal):
        done = [e for e in tried if e["d"] == d and e["causal"] == causal and e["ms"]]
        return min(done, key=lambda e: e["ms"]) if done else None

    def as_ws(cfg, ws):  # Triton warp-specializes for sm_90 with 4 warps only
        return replace(cfg, num_warps=4) if ws else cfg

    def won_ws(d, c):
        win = winner(d, c)
        return bool(win and win["warp_specialize"])

    rounds = [lambda d, c: (attention_space(d)[0], False, True)]  # 07's split, 2-D descriptors
    if ws_ok:  # one warp-specialized loop, 2-D descriptors
        rounds.append(lambda d, c: (as_ws(attention_space(d)[0], True), True, True))
    rounds.append(lambda d, c: (attention_space(d)[0], False, False))  # 07's split, 4-D
    for i in range(1, 4):  # the other tiles, with whichever loop won
        rounds.append(
            lambda d, c, i=i: (as_ws(attention_space(d)[i], won_ws(d, c)), won_ws(d, c), True)
        )
    for make in rounds:
        for d, causal in keys:
            if part.left() < 25 + COMPILE_RESERVE_S:
                part.skip(f"attention D{d} causal={causal}: a round skipped, no time left")
                continue
            cfg, ws, flat = make(d, causal)
            tried.append(attempt(d, causal, cfg, ws, flat))
            part.save()
    # -- the figures: each case's winner with the longer budget, against both backends
    results = part.record["results"]
    for d, causal in keys:
        win = winner(d, causal)
        if win is None or part.left() < 2:
            continue
        final = attempt(
            d, causal, kernels.AttentionConfig(**win["config"]), win["warp_specialize"],
            win["flat"], FINAL_MS,
        )  # fmt: skip
        if not final["ms"]:
            continue
        for name in backends:
            base = baselines.get((d, causal, name))
            flops = cases[d, causal][5]
            results.append(
                {
                    "kernel": "attention tma", "case": f"D{d} {'causal' if causal else 'full'}",
                    "d": d, "causal": causal, "ms": final["ms"], "tflops": final["tflops"],
                    "baseline": name, "baseline_ms": base,
                    "baseline_tflops": flops / base / 1e9 if base else None,
                    "ratio": base / final["ms"] if base else None,
                    "rel_error": final.get("rel_error"), "config": final["config"],
                    "config_label": final["label"],
                }
            )  # fmt: skip
        part.save()
    course_attention(part, cases, baselines)


def course_attention(part: Part, cases, baselines) -> None:
    """07's reference kernel (pointers, no warp specialization), its default tiles, if it loads."""
    if part.left() < 15:
        part.skip("07's flash_attention: no time left")
        return
    try:
        sys.path.insert(0, str(ROOT))
        from bench import attention as bench_attention

        reference = bench_attention.load_reference(Path(tempfile.mkdtemp(prefix="probe07-")))
    except Exception as exc:  # noqa: BLE001
        part.fail("07's flash_attention: import", exc)
        return
    for (d, causal), (q, k, v, out, ref, flops) in cases.items():
        if part.left() < COMPILE_RESERVE_S:
            part.skip(f"07's flash_attention D{d} causal={causal}: no time left")
            continue
        try:

            def call(q=q, k=k, v=v, out=out, causal=causal):
                return reference.flash_attention(q, k, v, out, causal=causal)

            call()
            sync()
            err = rel_error(out, ref) if ref is not None else None
            if err is not None and err > WRONG_ABOVE:
                part.log(f"07's flash_attention D{d} causal={causal}: wrong result ({err:.1e})")
                continue
            ms = bench(call)
        except Exception as exc:  # noqa: BLE001
            part.fail(f"07's flash_attention D{d} causal={causal}", exc)
            continue
        base = baselines.get((d, causal, "SDPA flash"))
        part.record["results"].append(
            {
                "kernel": "07 flash_attention (course)",
                "case": f"D{d} {'causal' if causal else 'full'}", "d": d, "causal": causal,
                "ms": ms, "tflops": flops / ms / 1e9, "baseline": "SDPA flash", "baseline_ms": base,
                "baseline_tflops": flops / base / 1e9 if base else None,
                "ratio": base / ms if base else None, "rel_error": err,
                "config_label": "07's GPU_CONFIGS",
            }
        )  # fmt: skip
        part.log(f"07's flash_attention D{d} causal={causal}: {flops / ms / 1e9:.0f} TFLOP/s")
        part.save()


if __name__ == "__main__":
    sys.exit(main())
