"""Benchmark notebook 09's Hopper matmuls: version 2 (persistent, tensor descriptors) against
cuBLAS (torch.matmul) in float16 and bfloat16 at 2048, 4096 and 8192, and the float8 kernel
(e4m3, per-tensor scales) against cuBLAS's FP8 (torch._scaled_mm) at 4096 and 8192, timed
alternately in one run (grader.runtime.perf.compare, as the speed cells do).

Goals (issue of notebook 09): version 2 at least 1.0x cuBLAS in float16 at 8192, and at least
0.95x as the geometric mean over the sizes and both dtypes; float8 at least 0.95x _scaled_mm as
the geometric mean over its sizes. The kernels, launchers and tiles are the notebook's cells, read
from solutions/09_hopper/hopper.py. Needs an sm_90 GPU; on an older one the section says so. On a
GPU, from the repository root:

    python bench/hopper_gemm.py [--out build/bench-hopper.md]

Importing this module needs no GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed `grader`
    sys.path.insert(0, str(ROOT))

from bench import _notebook, _report  # noqa: E402

NOTEBOOK = "09_hopper"
SIZES = (2048, 4096, 8192)  # square float16 and bfloat16 problems of version 2
FP8_SIZES = (4096, 8192)
AT_8192 = 1.0  # goal: version 2 against cuBLAS, float16, 8192
MEAN = 0.95  # goal: version 2's geometric mean over SIZES and both dtypes
FP8_MEAN = 0.95  # goal: the float8 kernel's geometric mean over FP8_SIZES against _scaled_mm


def load():
    """The notebook's imports cell (with 05's gemm.py), its tiles, version 2's kernel and
    launcher, and the float8 exercise with its launcher and inputs."""
    return _notebook.load(
        NOTEBOOK,
        ["persistent-kernel", "fp8-kernel"],
        ["HOPPER", "TILES", "matmul_tma", "require_fp8", "matmul_fp8"],
    )


def measure() -> _report.Section:
    """Version 2 against cuBLAS and float8 against _scaled_mm. Needs a GPU."""
    from grader.runtime import device

    section = _report.Section("hopper", "09 · Hopper matmuls")
    section.note = "v2: persistent, tensor descriptors, the notebook's GPU tiles"
    at_8192 = section.goal("09 v2 float16 8192^3, as a multiple of cuBLAS's speed", AT_8192)
    mean = section.goal("09 v2, geometric mean over 2048-8192, float16 and bfloat16", MEAN)
    fp8_mean = section.goal("09 float8, geometric mean over 4096-8192, vs _scaled_mm", FP8_MEAN)
    if not device.current().supports("sm_90"):
        section.errors.append(f"needs an sm_90 GPU: {device.current().describe()}")
        return section
    ref = load()
    ratios = {}
    for dtype in ("float16", "bfloat16"):
        for n in SIZES:
            ratios[dtype, n] = section.attempt(f"v2 {dtype} {n}", _v2, section, ref, dtype, n)
    if ratios.get(("float16", 8192)):
        at_8192.measured = ratios["float16", 8192]
    if all(ratios.values()):
        mean.measured = _report.geomean(ratios.values())
        mean.detail = ", ".join(f"{d} {n}: {r:.2f}x" for (d, n), r in ratios.items())
    fp8 = [section.attempt(f"float8 {n}", _fp8, section, ref, n) for n in FP8_SIZES]
    if all(fp8):
        fp8_mean.measured = _report.geomean(fp8)
        fp8_mean.detail = ", ".join(f"{n}: {r:.2f}x" for n, r in zip(FP8_SIZES, fp8, strict=True))
    return section


def _v2(section, ref, dtype_name, n) -> float:
    import torch

    from grader.runtime import checks, perf

    dtype = getattr(torch, dtype_name)
    gen = checks.generator(checks.new_seed())
    a, b = (checks.randn((n, n), gen=gen, dtype=dtype) for _ in "ab")
    mine, theirs = (torch.empty(n, n, dtype=dtype, device=a.device) for _ in "mt")
    expected = a.double() @ b.double()
    atol = ref.sum_tolerance(a, b) + checks.tolerance(dtype)[1]  # the notebook's check_matmul's

    def verify():
        checks.compare(mine, expected, atol=atol, context="after timing")

    c = perf.compare(
        lambda: ref.matmul_tma(a, b, mine),
        lambda: torch.matmul(a, b, out=theirs),
        names=("09 v2", "cuBLAS (torch.matmul)"),
        verify=verify,
    )
    problem = f"{n}^3 {dtype_name}"
    section.rows.append(_report.row_from(c, "09 v2 descriptors", problem, 2 * n**3, "TFLOP/s"))
    return c.speedup


def _fp8(section, ref, n) -> float:
    import torch

    from grader.runtime import checks, perf

    a8, bt8, sa, sb = ref.fp8_inputs(n, n, n)(checks.generator(checks.new_seed()))
    mine, theirs = (torch.empty(n, n, dtype=torch.bfloat16, device=a8.device) for _ in "mt")

    def scaled_mm():
        return torch._scaled_mm(
            a8, bt8.T, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, out=theirs
        )

    def verify():
        want = ref.fp8_reference(a8.double(), bt8.double(), sa.double(), sb.double())
        checks.compare(
            mine, want, rtol=2.0**-7, atol=ref.fp8_atol(a8, bt8, sa, sb), context="after timing"
        )

    c = perf.compare(
        lambda: ref.matmul_fp8(a8, bt8, sa, sb, mine),
        scaled_mm,
        names=("09 float8", "cuBLAS FP8 (torch._scaled_mm)"),
        verify=verify,
    )
    section.rows.append(_report.row_from(c, "09 float8", f"{n}^3 e4m3", 2 * n**3, "TFLOP/s"))
    return c.speedup


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    args = parser.parse_args(argv)
    return _report.run_alone("bench/hopper_gemm.py", measure, args.out)


if __name__ == "__main__":
    sys.exit(main())
