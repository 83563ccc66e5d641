"""Benchmark notebook 09's Hopper matmuls: version 2 (persistent, tensor descriptors) against
cuBLAS (torch.matmul) in float16 and bfloat16 at 2048, 4096 and 8192, and the float8 kernel
(e4m3, row-wise scales) against row-wise torch._scaled_mm at 4096 and 8192, each timed
alternately with its baselines in one run (grader.runtime.perf, as the speed cells do).

The float8 kernel's tl.dot sums as Triton does by default on sm_90, the whole K loop in the
tensor cores' accumulator: its like is _scaled_mm(..., use_fast_accum=True). The notebook's
scaled_mm_baselines gives that mode and the accurate one, use_fast_accum=False, timed beside it;
each row notes its error and the kernel's against the exact (float64) product.

Goals (issue of notebook 09): version 2 at least 1.0x cuBLAS in float16 at 8192, and at least
0.95x as the geometric mean over the sizes and both dtypes; float8 at least 1.0x _scaled_mm with
fast accumulation at 4096 and at 8192. The kernels, launchers, tiles and baselines are the
notebook's cells, read from solutions/09_hopper/hopper.py. Needs an sm_90 GPU; on an older one
the section says so. On a GPU, from the repository root:

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
FP8_AT_LEAST = 1.0  # goal: the float8 kernel against _scaled_mm summing as it does, each size


def load():
    """The notebook's imports cell (with 05's gemm.py), its tiles, version 2's kernel and
    launcher, and the float8 exercise with its launcher, inputs and baselines."""
    return _notebook.load(
        NOTEBOOK,
        ["persistent-kernel", "fp8-kernel"],
        ["HOPPER", "TILES", "matmul_tma", "require_fp8", "matmul_fp8"],
    )


def measure() -> _report.Section:
    """Version 2 against cuBLAS and float8 against _scaled_mm. Needs a GPU."""
    from grader.runtime import device

    section = _report.Section("hopper", "09 · Hopper matmuls")
    section.note = (
        "v2: persistent, tensor descriptors, the notebook's GPU tiles. float8: against _scaled_mm "
        "in both accumulation modes; errors are relative to max|C|, against the exact (float64) "
        "product of the e4m3 inputs"
    )
    at_8192 = section.goal("09 v2 float16 8192^3, as a multiple of cuBLAS's speed", AT_8192)
    mean = section.goal("09 v2, geometric mean over 2048-8192, float16 and bfloat16", MEAN)
    fp8 = {
        n: section.goal(
            f"09 float8 {n}^3 vs _scaled_mm(use_fast_accum=True), summing as it does", FP8_AT_LEAST
        )
        for n in FP8_SIZES
    }
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
    for n, goal in fp8.items():
        found = section.attempt(f"float8 {n}", _fp8, section, ref, n)
        if found:
            goal.measured, goal.detail = found
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


def _fp8(section, ref, n) -> tuple[float, str]:
    """The float8 kernel against the notebook's _scaled_mm baselines, timed alternately in one
    run, a row each with both errors against the exact product. Returns the ratio against the
    baseline that sums as the kernel does (the one that needs FP8_AT_LEAST) and the goal's detail:
    the errors, and the other mode's ratio and error beside them."""
    import torch

    from grader.runtime import checks, perf

    a8, bt8, sa, sb = ref.fp8_inputs(n, n, n)(checks.generator(checks.new_seed()))
    mine = torch.empty(n, n, dtype=torch.bfloat16, device=a8.device)
    exact = ref.fp8_reference(a8.double(), bt8.double(), sa.double(), sb.double())
    atol = ref.fp8_atol(a8, bt8, sa, sb)
    baselines = ref.scaled_mm_baselines(a8, bt8, sa, sb, at_least=FP8_AT_LEAST)

    def verify():
        checks.compare(mine, exact, rtol=2.0**-7, atol=atol, context="after timing")

    results = perf.compare_all(
        lambda: ref.matmul_fp8(a8, bt8, sa, sb, mine),
        {b.name: b.fn for b in baselines},
        name="09 float8",
        verify=verify,
    )
    timed = {c.baseline_name: c for c in results}
    error = ref.relative(mine, exact)
    ratio, detail = None, [f"error: kernel {error:.1e}"]
    for b in baselines:
        c, theirs = timed[b.name], ref.relative(b.fn(), exact)
        note = f"error: kernel {error:.1e}, baseline {theirs:.1e}"
        row = _report.row_from(c, "09 float8", f"{n}^3 e4m3", 2 * n**3, "TFLOP/s", note)
        section.rows.append(row)
        if b.at_least is None:
            detail.append(f"beside it {b.name}: {c.speedup:.3f}x, error {theirs:.1e}")
        else:
            ratio = c.speedup
            detail.insert(1, f"{b.name} {theirs:.1e}")
    return ratio, ", ".join(detail)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    args = parser.parse_args(argv)
    return _report.run_alone("bench/hopper_gemm.py", measure, args.out)


if __name__ == "__main__":
    sys.exit(main())
