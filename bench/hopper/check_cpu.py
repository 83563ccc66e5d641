"""Run every kernel of kernels.py in Triton's interpreter, on the CPU, against a float64 PyTorch
reference, and say which of the Hopper features the interpreter runs; then compile the kernels
for sm_90 (no GPU needed: Triton's compiler and ptxas run on the CPU) and say what the compiler
made of them: warp specialization applied or not, shared memory, TMA and wgmma instructions.

    python bench/hopper/check_cpu.py [--no-compile]

TRITON_INTERPRET=1 is set here, before Triton loads; the compiling runs in a child process
without it (`--sm90`). Small shapes, most of them not multiples of the blocks; outputs start as
NaN, so a tile that is never written fails. A case the interpreter cannot run is caught and
reported with its error, never hidden: the notebook then says so and shows figures recorded on a
GPU. About 5 s of one CPU core for the interpreter, 20 to 40 s for the compiles. Exit status 1
when a case other than a bfloat16 one fails.
"""

from __future__ import annotations

import os
import sys

SURVEY = "--sm90" in sys.argv  # the child: compile for sm_90, print JSON
if SURVEY:
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # 3.9 warns when it is unset
else:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (kernels imports it)

import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernels  # noqa: E402

F16, BF16, FP8 = torch.float16, torch.bfloat16, torch.float8_e4m3fn
NAMES = {F16: "fp16", BF16: "bf16", FP8: "e4m3"}
ULP = {F16: 2.0**-10, BF16: 2.0**-7}  # spacing of the output's values just above 1
ATTENTION_TOL = 2e-3  # 07's 1e-3, doubled: fp16 output rounding plus P rounded to fp16


@dataclass
class Row:
    kernel: str
    case: str
    status: str  # "ok", "WRONG", "refused" (said no, as it should) or "error"
    error: float = math.nan  # max |out - reference|
    bound: float = math.nan  # the largest error allowed
    note: str = ""


ROWS: list[Row] = []


def short(exc: BaseException) -> str:
    """The error in one line: its type and the start of its message's first line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:90] if text else ''}"


def run(kernel, case, reference, bound, fn, *args, note="", **kwargs) -> Row:
    """out = fn(*args, **kwargs), compared with `reference` (float64) within `bound` (a float,
    or a tensor of per-element bounds); the row is recorded and returned."""
    try:
        out = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - reported, never hidden
        row = Row(kernel, case, "error", note=short(exc))
    else:  # NaN compares False: an element never written fails the bound
        diff = (out.double() - reference).abs()
        error = float(diff.max()) if diff.numel() else 0.0
        allowed = float(bound) if isinstance(bound, float) else float(bound.max())
        within = bool((diff <= bound).all())
        row = Row(kernel, case, "ok" if within else "WRONG", error, allowed, note)
    ROWS.append(row)
    return row


def refused(kernel, case, fn, *args, expect=ValueError, says="", **kwargs) -> Row:
    """A call that must fail with `expect` (and `says` in its message)."""
    try:
        fn(*args, **kwargs)
    except expect as exc:
        ok = says.lower() in str(exc).lower()
        row = Row(kernel, case, "refused" if ok else "error", note=short(exc))
    except Exception as exc:  # noqa: BLE001
        row = Row(kernel, case, "error", note=f"not a {expect.__name__}: {short(exc)}")
    else:
        row = Row(kernel, case, "WRONG", note="accepted a layout that TMA cannot address")
    ROWS.append(row)
    return row


# -- matmul -------------------------------------------------------------------------------------


def matmul_bound(a, b, out_dtype):
    """Per element: the output's rounding plus that of a K-term float32 sum,
    4 sqrt(K) 2^-24 (|A| @ |B|), 05's tolerance."""
    mag = a.double().abs() @ b.double().abs()
    return ULP[out_dtype] * mag + 4 * math.sqrt(a.shape[1]) * 2.0**-24 * mag + 1e-6


def nan_out(M, N, dtype):
    return torch.full((M, N), float("nan"), dtype=dtype)


def check_matmul_kernels(kernel_names, a, b, label, note="", **kwargs):
    """Each named launcher on a @ b, written into a NaN-filled output."""
    M, N = a.shape[0], b.shape[1]
    ref, bound = a.double() @ b.double(), matmul_bound(a, b, a.dtype)
    for name in kernel_names:
        fn = LAUNCHERS[name]
        out = nan_out(M, N, a.dtype)
        run(name, label, ref, bound, fn, a, b, out, note=note, **kwargs)


LAUNCHERS = {
    "v1 persistent": kernels.matmul_persistent,
    "v2 tma": kernels.matmul_tma,
    "v3 tma+ws": kernels.matmul_tma_ws,
}


def check_matmul(gen):
    every = list(LAUNCHERS)
    for dtype in (F16, BF16):
        shapes = [(100, 72, 88), (64, 64, 64), (33, 40, 56)] if dtype == F16 else [(100, 72, 88)]
        for M, N, K in shapes:  # one bfloat16 shape shows what the interpreter does with it
            a = torch.randn(M, K, generator=gen).to(dtype)
            b = torch.randn(K, N, generator=gen).to(dtype)
            check_matmul_kernels(every, a, b, f"{M}x{N}x{K} {NAMES[dtype]}")
    # -- v1 takes any strides; the descriptors refuse what TMA cannot address
    M, N, K = 45, 30, 50
    a = torch.randn(M, K, generator=gen).half()
    b = torch.randn(N, K, generator=gen).half().t()  # a transposed view
    check_matmul_kernels(["v1 persistent"], a, b, f"{M}x{N}x{K} fp16, B a transposed view")
    refused("v2 tma", f"{M}x{N}x{K} fp16, rows of 100 bytes", kernels.matmul_tma, a, b)
    # -- the persistent walk: one program for every tile; the grouped order with a short last
    #    band (5 tile rows in bands of 2)
    M, N, K = 150, 72, 40
    a = torch.randn(M, K, generator=gen).half()
    b = torch.randn(K, N, generator=gen).half()
    small = kernels.default_config()
    for label, cfg in [
        ("1 program", replace(small, num_sms=1)),
        ("7 programs, bands of 2", replace(small, num_sms=7, group_m=2)),
    ]:
        check_matmul_kernels(every[:2], a, b, f"{M}x{N}x{K} fp16, {label}", config=cfg)
    # -- v3's loop options, warp specialization forced on: does the interpreter accept it?
    ws = kernels.default_config("tma_ws")
    for label, cfg in [
        ("warp_specialize on the K loop", ws),
        ("warp_specialize on the tile loop", replace(ws, ws_on_tiles=True)),
        ("K loop, flattened nest", replace(ws, flatten=True)),
    ]:
        check_matmul_kernels(
            ["v3 tma+ws"], a, b, f"{M}x{N}x{K} fp16, {label}", config=cfg, warp_specialize=True
        )
    # -- the GPU's default tiles (128 x 128 x 64): two tiles each way, ragged on every side
    M, N, K = 200, 136, 200
    a = torch.randn(M, K, generator=gen).half()
    b = torch.randn(K, N, generator=gen).half()
    for name in every:
        v3 = name == "v3 tma+ws"  # with v3's own setting: 4 warps, the nest not flattened
        cfg = kernels.Config(num_sms=2, num_warps=4 if v3 else 8, flatten=not v3)
        check_matmul_kernels([name], a, b, f"{M}x{N}x{K} fp16, GPU tiles {cfg.label()}", config=cfg)
    # -- past the launcher: does the interpreter itself check TMA's 16-byte rule?
    M, N, K = 32, 32, 50  # rows of A: 100 bytes
    a = torch.randn(M, K, generator=gen).half()
    b = torch.randn(K, N, generator=gen).half()
    out = torch.empty(M, N, dtype=F16)
    c = kernels.default_config()
    kernel = kernels.matmul_tma_kernel[(1,)]
    refused(
        "v2 tma", "the kernel itself, rows of 100 bytes", kernel,
        a, b, out, M, N, K, a.stride(0), b.stride(0), out.stride(0),
        BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k, GROUP_M=c.group_m, NUM_SMS=1,
        expect=Exception, says="align",
    )  # fmt: skip


# -- FP8 ----------------------------------------------------------------------------------------


def fp8_problem(M, N, K, gen, w_scale=1.0):
    """Quantized inputs (a (M, K) row-major, b (K, N) column-major), their scales, the reference
    on the dequantized inputs, the exact product of the unquantized ones, and |A| @ |B|."""
    x = torch.randn(M, K, generator=gen)
    w = torch.randn(N, K, generator=gen) * w_scale
    a8, sa = kernels.quantize_e4m3(x)
    w8, sb = kernels.quantize_e4m3(w)
    b8 = w8.t()  # (K, N), column-major, as torch._scaled_mm takes it
    a_true, b_true = a8.double() * sa.double(), b8.double() * sb.double()
    return a8, b8, sa, sb, a_true @ b_true, x.double() @ w.double().t(), a_true.abs() @ b_true.abs()


def check_fp8(gen):
    for M, N, K in [(100, 72, 96), (64, 48, 160)]:
        a8, b8, sa, sb, ref, exact, mag = fp8_problem(M, N, K, gen, w_scale=0.05)
        sum_bound = 4 * math.sqrt(K) * 2.0**-24 * mag
        for out_dtype, fast_options in [(BF16, (True, False)), (F16, (True,))]:
            for fast in fast_options:
                row = run(
                    "v4 fp8", f"{M}x{N}x{K} e4m3->{NAMES[out_dtype]}, fast_accum={fast}",
                    ref, ULP[out_dtype] * mag + sum_bound,
                    kernels.matmul_fp8, a8, b8, sa, sb, nan_out(M, N, out_dtype),
                    out_dtype=out_dtype, fast_accum=fast,
                )  # fmt: skip
                if row.status == "ok":  # FP8's own cost: against the unquantized inputs
                    out = kernels.matmul_fp8(a8, b8, sa, sb, out_dtype=out_dtype, fast_accum=fast)
                    rel = float((out.double() - exact).abs().max() / exact.abs().max())
                    row.note = f"vs unquantized inputs: {rel:.1e} of max|C|"
        run(
            "v4 fp8", f"{M}x{N}x{K} e4m3->bf16, warp_specialize forced",
            ref, ULP[BF16] * mag + sum_bound,
            kernels.matmul_fp8, a8, b8, sa, sb, nan_out(M, N, BF16), warp_specialize=True,
        )  # fmt: skip
    # -- the GPU's default FP8 tiles, 128 x 128 x 128, ragged in M and N
    M, N, K = 160, 136, 272
    a8, b8, sa, sb, ref, exact, mag = fp8_problem(M, N, K, gen)
    cfg = kernels.Config(block_k=128, num_sms=2)
    run(
        "v4 fp8", f"{M}x{N}x{K} e4m3->bf16, GPU tiles {cfg.label()}",
        ref, ULP[BF16] * mag + 4 * math.sqrt(K) * 2.0**-24 * mag,
        kernels.matmul_fp8, a8, b8, sa, sb, nan_out(M, N, BF16), config=cfg,
    )  # fmt: skip
    # -- the same arguments as torch._scaled_mm, which has a CPU version: same layout, same scales
    M, N, K = 64, 48, 96
    a8, b8, sa, sb, ref, exact, mag = fp8_problem(M, N, K, gen)
    try:
        theirs = torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=BF16)
    except Exception as exc:  # noqa: BLE001
        ROWS.append(Row("v4 fp8", "vs torch._scaled_mm on the CPU", "error", note=short(exc)))
    else:
        run(
            "v4 fp8", f"{M}x{N}x{K} e4m3->bf16 vs torch._scaled_mm (CPU)",
            theirs.double(), 2 * ULP[BF16] * mag + 1e-6,
            kernels.matmul_fp8, a8, b8, sa, sb, nan_out(M, N, BF16),
            note=f"_scaled_mm's own error: {float((theirs.double() - ref).abs().max()):.1e}",
        )  # fmt: skip
    # -- the quantizer: a round trip costs at most half a step of e4m3's 3 mantissa bits
    x = torch.randn(256, 256, generator=gen) * 3
    x8, s = kernels.quantize_e4m3(x)
    back = x8.double() * s.double()
    normal = x.double().abs().clamp(min=2.0**-6 * float(s))  # e4m3's normal range, scaled
    rel = float(((back - x.double()).abs() / normal).max())
    ok = rel <= 2.0**-4 + 1e-9 and float(x8.float().abs().max()) == kernels.E4M3_MAX
    note = "relative round-trip error (normal range); amax lands on 448"
    ROWS.append(Row("quantize_e4m3", "256x256", "ok" if ok else "WRONG", rel, 2.0**-4, note))


# -- attention ----------------------------------------------------------------------------------


def attention_reference(q, k, v, causal):
    q, k, v = (t.double() for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def check_attention_case(q, k, v, label, tol=ATTENTION_TOL, **kwargs):
    """Non-causal and causal, written into a NaN-filled output."""
    for causal in (False, True):
        ref = attention_reference(q, k, v, causal)
        out = torch.full_like(q, float("nan"))
        case = f"{label} {'causal' if causal else 'full'}"
        run("attention", case, ref, tol, kernels.attention_tma_ws, q, k, v, out, causal=causal,
            **kwargs)  # fmt: skip


def qkv(shape, gen, dtype=F16, transpose=False):
    q, k, v = (torch.randn(shape, generator=gen).to(dtype) for _ in range(3))
    return tuple(t.transpose(1, 2) for t in (q, k, v)) if transpose else (q, k, v)


def check_attention(gen):
    small = kernels.default_attention_config(64)
    for B, H, N, D in [(2, 2, 100, 32), (1, 1, 77, 64)]:  # ragged: 4-D descriptors
        check_attention_case(*qkv((B, H, N, D), gen), f"B{B} H{H} N{N} D{D}, 4-D descriptors")
    q, k, v = qkv((1, 2, 64, 16), gen)  # N a multiple of the blocks: flat 2-D descriptors
    check_attention_case(q, k, v, "B1 H2 N64 D16, 2-D descriptors")
    check_attention_case(q, k, v, "B1 H2 N64 D16, 4-D descriptors", flat=False)
    q, k, v = qkv((1, 50, 3, 32), gen, transpose=True)  # views of (B, N, H, D): strided heads
    check_attention_case(q, k, v, "B1 H3 N50 D32 strided views, 4-D descriptors")
    for D in (128, 64):  # the GPU's tiles, 128 x 64, ragged
        cfg = kernels.AttentionConfig()
        q, k, v = qkv((1, 2, 200, D), gen)
        check_attention_case(q, k, v, f"B1 H2 N200 D{D}, GPU tiles {cfg.label()}", config=cfg)
    q, k, v = qkv((1, 2, 96, 32), gen)  # the warp-specialized loop: one loop, every block masked
    check_attention_case(
        q, k, v, "B1 H2 N96 D32, 2-D descriptors, warp_specialize forced", warp_specialize=True
    )
    q, k, v = qkv((1, 2, 100, 32), gen)
    for causal in (False, True):
        refused(
            "attention", f"B1 H2 N100 D32 {'causal' if causal else 'full'}, warp_specialize "
            "forced with 4-D descriptors", kernels.attention_tma_ws, q, k, v, causal=causal,
            warp_specialize=True, says="flat descriptors",
        )  # fmt: skip
    q, k, v = qkv((1, 2, 100, 32), gen, dtype=BF16)
    check_attention_case(q, k, v, f"B1 H2 N100 D32 bf16, {small.label()}", tol=2e-2)


# -- what the compiler makes of each kernel for sm_90 (the child process) -----------------------


def survey_cases() -> list[tuple]:
    """(label, kernel, pointer dtypes, constants, num_warps, num_stages, model bytes or None)."""
    cfg = kernels.Config
    f16 = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16"}
    b16 = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16"}
    f8 = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*bf16"}
    f8 |= {"a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32"}
    att = {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "Out": "*fp16"}

    def mm(c, **extra):
        return {"BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "BLOCK_K": c.block_k,
                "GROUP_M": c.group_m, "NUM_SMS": 132, **extra}  # fmt: skip

    def model(c, in_bytes, tma_store):
        pipeline = c.num_stages * (c.block_m + c.block_n) * c.block_k * in_bytes
        return pipeline + (c.block_m * c.block_n * 2 if tma_store else 0)

    def attn(d, causal, flat, ws):
        return {"HEAD_DIM": d, "BLOCK_M": 128, "BLOCK_N": 64, "CAUSAL": causal, "FLAT": flat,
                "WARP_SPECIALIZE": ws}  # fmt: skip

    k1, k2 = kernels.matmul_persistent_kernel, kernels.matmul_tma_kernel
    k3, k4 = kernels.matmul_tma_ws_kernel, kernels.matmul_fp8_kernel
    ka = kernels.attention_tma_kernel
    sq, wide = cfg(128, 128, 64), cfg(128, 256, 64)
    ws_k = {"WS_K": True, "WS_TILES": False, "FLATTEN": False}
    ws_tiles = {"WS_K": False, "WS_TILES": True, "FLATTEN": False}
    f8c = cfg(128, 256, 128)
    return [
        ("v1 fp16 " + sq.label(), k1, f16, mm(sq), 8, 3, model(sq, 2, False)),
        ("v1 fp16 " + wide.label(), k1, f16, mm(wide), 8, 3, model(wide, 2, False)),
        ("v2 fp16 " + wide.label(), k2, f16, mm(wide), 8, 3, model(wide, 2, True)),
        ("v2 bf16 " + wide.label(), k2, b16, mm(wide), 8, 3, model(wide, 2, True)),
        ("v3 fp16 128x256x64 ws K loop, w4", k3, f16, mm(wide, **ws_k), 4, 3,
         model(wide, 2, True)),
        ("v3 fp16 128x256x64 ws K loop, w8", k3, f16, mm(wide, **ws_k), 8, 3,
         model(wide, 2, True)),
        ("v3 fp16 128x256x64 ws K loop, w4, flattened", k3, f16,
         mm(wide, **(ws_k | {"FLATTEN": True})), 4, 3, model(wide, 2, True)),
        ("v3 fp16 128x256x64 ws tile loop, w4", k3, f16, mm(wide, **ws_tiles), 4, 3,
         model(wide, 2, True)),
        ("v4 e4m3 " + f8c.label() + " fast", k4, f8,
         mm(f8c, FAST_ACC=True, WARP_SPECIALIZE=False, FLATTEN=True), 8, 3, model(f8c, 1, True)),
        ("v4 e4m3 " + f8c.label() + " slow-acc", k4, f8,
         mm(f8c, FAST_ACC=False, WARP_SPECIALIZE=False, FLATTEN=True), 8, 3, model(f8c, 1, True)),
        ("v4 e4m3 128x256x128 ws K loop, w4", k4, f8,
         mm(f8c, FAST_ACC=True, WARP_SPECIALIZE=True, FLATTEN=False), 4, 3, model(f8c, 1, True)),
        ("attention D64 2-D full, w8", ka, att, attn(64, False, True, False), 8, 3, None),
        ("attention D128 4-D causal, w8", ka, att, attn(128, True, False, False), 8, 3, None),
        ("attention D64 2-D full ws, w4", ka, att, attn(64, False, True, True), 4, 3, None),
        ("attention D128 2-D causal ws, w4", ka, att, attn(128, True, True, True), 4, 3, None),
        ("attention D128 4-D causal ws, w4 (the launcher refuses it)", ka, att,
         attn(128, True, False, True), 4, 3, None),
    ]  # fmt: skip


def survey() -> int:
    """Compile each case for sm_90 through ptxas and print what came out, one JSON line each.
    Sizes and strides count as multiples of 16 and unit strides as 1, as Triton specializes
    them for the probe's problems; the compiler's own diagnostics go to /dev/null."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    ones = {"stride_ak", "stride_bn", "stride_cn"}
    for label, kernel, pointers, constants, warps, stages, model in survey_cases():
        signature, constants = {}, dict(constants)
        for p in kernel.params:
            if p.is_constexpr or p.name in ones:
                signature[p.name] = "constexpr"
                constants.setdefault(p.name, 1)
            else:
                signature[p.name] = pointers.get(p.name, "fp32" if p.name == "qk_scale" else "i32")
        aligned = {
            (i,): [["tt.divisibility", 16]]
            for i, p in enumerate(kernel.params)
            if signature[p.name] not in ("constexpr", "fp32")
        }
        row = {"case": label, "model": model}
        t0 = time.perf_counter()
        try:
            compiled = triton.compile(
                ASTSource(kernel, signature, constants, aligned),
                target=GPUTarget("cuda", 90, 32),
                options={"num_warps": warps, "num_stages": stages},
            )
        except Exception as exc:  # noqa: BLE001 - the compiler's refusal is the finding
            row["error"] = short(exc)
        else:
            ttgir, ptx = compiled.asm["ttgir"], compiled.asm["ptx"]
            row |= {
                "warps": compiled.metadata.num_warps,
                "shared": compiled.metadata.shared,
                "ws": "ttg.warp_specialize" in ttgir,
                "tma": "cp.async.bulk.tensor" in ptx,
                "wgmma": "wgmma.mma_async" in ptx,
            }
        row["seconds"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(row), flush=True)
    return 0


def compile_table() -> str:
    """Run the survey in a child process, without the interpreter, and render its answers."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--sm90"], env=env, capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return "the compiles took more than 5 minutes: stopped"
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if not rows:
        return f"no answer from the compiling process (exit {proc.returncode})"

    def kb(x):
        return "" if x is None else f"{x / 1024:.0f}"

    def yes(x):
        return "" if x is None else ("yes" if x else "no")

    cells = [
        [r["case"], "no: " + r["error"] if "error" in r else "yes", str(r.get("warps", "")),
         yes(r.get("ws")), kb(r.get("shared")), kb(r.get("model")), yes(r.get("tma")),
         yes(r.get("wgmma")), f"{r['seconds']:.1f}"]
        for r in rows
    ]  # fmt: skip
    headers = ["kernel, compiled for sm_90", "compiles", "warps", "ws", "smem KB", "model KB",
               "TMA", "wgmma", "s (0: cached)"]  # fmt: skip
    return table(headers, cells)


# -- the report ---------------------------------------------------------------------------------


def bf16_inputs(row: Row) -> bool:
    return "bf16" in row.case and row.kernel != "v4 fp8"  # e4m3 -> bf16 has e4m3 inputs


def verdict(rows: list[Row]) -> str:
    """One phrase for a feature from the rows that exercise it."""
    if not rows:
        return "not tried"
    if all(r.status in ("ok", "refused") for r in rows):
        return "yes"
    errors = [r for r in rows if r.status == "error"]
    if errors:
        return f"no: {errors[0].note}"
    worst = max(r.error for r in rows if r.status == "WRONG")
    return f"runs, wrong results (max error {worst:.1e})"


def features() -> list[tuple[str, str]]:
    def having(kernel, *words):
        return [
            r for r in ROWS
            if r.kernel == kernel and not bf16_inputs(r) and all(w in r.case for w in words)
        ]  # fmt: skip

    return [
        ("persistent grid, tl.range(flatten=True)", verdict(having("v1 persistent"))),
        ("grouped order, short last band", verdict(having("v1 persistent", "bands"))),
        ("2-D descriptors: load, zero fill, clipped store", verdict(having("v2 tma"))),
        ("TMA's 16-byte rule checked", verdict(having("v2 tma", "the kernel itself"))),
        ("4-D descriptors and reshape", verdict(having("attention", "4-D"))),
        (
            "tl.range(warp_specialize=True) (accepted, ignored)",
            verdict(
                having("v3 tma+ws", "warp_specialize on") + having("attention", "2-D", "forced")
            ),
        ),
        ("float8 e4m3 tl.dot, float32 sum", verdict(having("v4 fp8", "fast_accum=True"))),
        (
            "max_num_imprecise_acc (no effect off sm_90)",
            verdict(having("v4 fp8", "fast_accum=False")),
        ),
        ("bfloat16 tl.dot", verdict([r for r in ROWS if bf16_inputs(r)])),
    ]


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=True)]
    lines = [headers, ["-" * w for w in widths], *rows]
    return "\n".join(
        "  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)).rstrip() for r in lines
    )


def fmt(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.1e}"


def main() -> int:
    if SURVEY:
        return survey()
    start = time.perf_counter()
    print(
        f"Triton {triton.__version__} (interpreter), torch {torch.__version__}, "
        f"numpy {np.__version__}, Python {sys.version.split()[0]}\n"
        f"supports_tma() = {kernels.supports_tma()}, "
        f"supports_warp_specialize() = {kernels.supports_warp_specialize()}, "
        f"num_sms() = {kernels.num_sms()} (a stand-in)\n"
    )
    gen = torch.Generator().manual_seed(0)
    for part in (check_matmul, check_fp8, check_attention):
        part(gen)
    cells = [[r.kernel, r.case, r.status, fmt(r.error), fmt(r.bound), r.note] for r in ROWS]
    print(table(["kernel", "case", "result", "max error", "allowed", "note"], cells))
    print("\nWhat the interpreter runs")
    print(table(["feature", "in the interpreter"], [list(f) for f in features()]))
    failed = [r for r in ROWS if r.status in ("WRONG", "error") and not bf16_inputs(r)]
    print(
        f"\n{len(ROWS)} cases in {time.perf_counter() - start:.0f} s; {len(failed)} failed, "
        "not counting bfloat16 inputs (the interpreter's bfloat16 tl.dot, shown above)"
    )
    if "--no-compile" not in sys.argv:
        began = time.perf_counter()
        print(
            f"\nWhat Triton {triton.__version__} compiles for sm_90, here on the CPU (sizes and "
            "strides multiples of 16;\nmodel KB: the pipeline's A and B buffers, plus C's tile "
            "for a descriptor store)"
        )
        print(compile_table())
        print(f"({time.perf_counter() - began:.0f} s)")
    if any("0-dimensional arrays" in r.note for r in ROWS):
        print(
            "This Triton's interpreter turns a tensor loop bound into an int in a way numpy 2.4 "
            "refuses (Triton 3.6 does); with numpy < 2.4, or with Triton 3.9, the cases run."
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
