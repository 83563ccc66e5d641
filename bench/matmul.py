"""Benchmark the course's tuned matmul (the kernels of solutions/05_autotuning/gemm.py over the
configs of notebook 05's reference answer, `reference_space`) against cuBLAS (torch.matmul), in
float16 and bfloat16.

    python bench/matmul.py [--out results/bench-matmul.md] [--sizes 2048 4096 8192]
                           [--dtypes fp16 bf16] [--full] [--no-per-config]

For each dtype and problem (the square sizes, then the shapes notebook 05 grades), it times
the autotuned reference alternately with cuBLAS in one run (grader.runtime.perf.compare, as the
notebooks' speed cells do) and measures its host time per call (timing.host_time), then every
candidate config on each path (tensor descriptors and pointers), so that the best configs can be
chosen from a single run. It prints the tables and writes them as markdown to --out. Importing
this module needs no GPU; off a GPU, main() says why it cannot measure and returns 2.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository's grader
sys.path.insert(0, str(ROOT / "solutions" / "05_autotuning"))  # gemm, released with notebook 05

from bench import _notebook, _report  # noqa: E402
from grader.runtime import device  # noqa: E402

DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
# goal for bench/report.py: the autotuned kernel's speed over cuBLAS's, geometric mean over the
# square sizes and dtypes
AT_LEAST = 0.95
NONE_BELOW = 0.9  # and no size or dtype below this
# The shapes notebook 05 grades, and the tall-skinny shape with a short K.
EXTRA_SHAPES = {
    "tall": (16384, 1024, 4096),
    "tall, short K": (16384, 1024, 1024),
    "not a multiple of 128": (4000, 4000, 4000),
}


@dataclass
class Row:
    dtype: str
    shape: str
    label: str
    tflops: float
    ratio: float  # against cuBLAS on the same problem, same run
    note: str = ""
    comparison: bool = False  # not the reference: left out of the headline mean


def markdown_table(headers: list[str], rows: list[list]) -> str:
    def cell(v):
        if isinstance(v, float):
            return "n/a" if not math.isfinite(v) else f"{v:.2f}" if abs(v) < 10 else f"{v:.0f}"
        return str(v)

    return "\n".join(_report._table(headers, [[cell(v) for v in r] for r in rows]))


def shape_label(M: int, N: int, K: int) -> str:
    return f"{M}x{N}x{K}"


def problems(sizes, squares_only=False) -> list[tuple[str, tuple[int, int, int]]]:
    found = [(f"square {n}", (n, n, n)) for n in sizes]
    return found + ([] if squares_only else list(EXTRA_SHAPES.items()))


def reference_space(full: bool = False) -> list:
    """The configs of notebook 05's reference answer (its `config-space` cell), as triton.Config:
    the benchmark tunes over what the notebook tunes over."""
    return _notebook.load("05_autotuning", ["config-space"]).config_space(full)


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the tables as markdown to this file")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["fp16", "bf16"])
    parser.add_argument("--full", action="store_true", help="the larger config space")
    parser.add_argument(
        "--no-per-config", action="store_true", help="skip timing each config on its own"
    )
    parser.add_argument(
        "--squares-only", action="store_true", help="skip the shapes notebook 05 grades"
    )
    return parser.parse_args(argv)


def measure(args) -> tuple[list[Row], list[Row]]:
    """(reference rows, per-config rows). Needs a GPU."""
    import gemm
    import torch
    from tqdm.auto import tqdm

    from grader.runtime import perf, timing

    where = device.current().torch_device
    candidates = reference_space(full=args.full)
    tuned = gemm.Tuned(candidates)  # notebook 05's launcher
    # not used by notebook 05 on aligned layouts: measured here to show what persistence buys
    tuned_per_tile = gemm.autotuned(candidates)
    summary, per_config = [], []
    for dname in args.dtypes:
        dtype = getattr(torch, DTYPES[dname])
        for name, (M, N, K) in problems(args.sizes, args.squares_only):
            a = torch.randn(M, K, device=where, dtype=dtype)
            b = torch.randn(K, N, device=where, dtype=dtype)
            c = torch.empty(M, N, device=where, dtype=dtype)
            ref = torch.empty_like(c)
            flops = 2 * M * N * K
            start = time.perf_counter()
            tuned(a, b, c)  # tunes
            if where == "cuda":
                torch.cuda.synchronize()
            tuning_s = time.perf_counter() - start
            torch.matmul(a, b, out=ref)
            err = float((c.float() - ref.float()).abs().max() / ref.float().abs().max())
            # timed alternately with cuBLAS in one run, as the notebooks' speed cells do
            both = perf.compare(
                lambda a=a, b=b, c=c: tuned(a, b, c),
                lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref),
                names=("autotuned", "cuBLAS"),
            )
            mine, cublas = both.candidate, both.baseline
            # host time to issue one call: a kernel shorter than this waits on it
            host_us = timing.host_time(lambda a=a, b=b, c=c: tuned(a, b, c)).us
            best = gemm.describe(tuned.best_config)
            path = "persistent, TMA" if tuned.last is tuned.persistent else "pointers"
            summary.append(
                Row(
                    dname,
                    f"{name}: {shape_label(M, N, K)}",
                    f"autotuned ({path}), best {best}",
                    mine.per_second(flops) / 1e12,
                    both.speedup,
                    f"cuBLAS {cublas.per_second(flops) / 1e12:.0f} TFLOP/s; "
                    f"tuning {tuning_s:.1f} s; host time per call {host_us:.0f} us; "
                    f"max diff vs cuBLAS {err:.1e}"
                    + "".join(f"; FLAGGED: {flag}" for flag in both.flags),
                )
            )
            print(summary[-1], flush=True)
            if gemm.tma_ok(a, b, c):
                try:
                    gemm.launch(tuned_per_tile, a, b, c, tma=True)  # tunes
                    t = timing.bench(
                        lambda a=a, b=b, c=c: gemm.launch(tuned_per_tile, a, b, c, tma=True)
                    )
                except Exception as exc:  # a comparison only: report, do not stop the run
                    print(f"per-tile variant failed on {name}: {type(exc).__name__}: {exc}")
                    t = None
            if gemm.tma_ok(a, b, c) and t is not None:
                summary.append(
                    Row(
                        dname,
                        f"{name}: {shape_label(M, N, K)}",
                        "autotuned one program per tile (TMA), best "
                        + gemm.describe(tuned_per_tile.best_config),
                        t.per_second(flops) / 1e12,
                        cublas.median_ms / t.median_ms,
                        "not the notebook's launcher on this layout: for comparison",
                        comparison=True,
                    )
                )
                print(summary[-1], flush=True)
            if args.no_per_config:
                continue
            paths = ["TMA", "pointers", "persistent"] if gemm.tma_ok(a, b, c) else ["pointers"]
            jobs = [(cfg, path) for cfg in candidates for path in paths]
            for cfg, path in tqdm(jobs, desc=f"{dname} {name}", leave=False):
                label = f"{gemm.describe(cfg)} {path}"

                def run(a=a, b=b, c=c, cfg=cfg, path=path):
                    if path == "persistent":
                        kernel = gemm.matmul_kernel_persistent
                        return gemm.launch_persistent(kernel, a, b, c, **cfg.all_kwargs())
                    kernel = gemm.matmul_kernel
                    return gemm.launch(kernel, a, b, c, tma=path == "TMA", **cfg.all_kwargs())

                try:
                    t = timing.bench(run)
                except Exception as exc:  # out of shared memory, or a compile error: note it
                    note = (
                        f"{type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"
                    )
                    per_config.append(
                        Row(dname, shape_label(M, N, K), label, math.nan, math.nan, note)
                    )
                    continue
                per_config.append(
                    Row(
                        dname,
                        shape_label(M, N, K),
                        label,
                        t.per_second(flops) / 1e12,
                        cublas.median_ms / t.median_ms,
                    )
                )
            del a, b, c, ref
    return summary, per_config


def report(summary: list[Row], per_config: list[Row], sizes, header: str = "") -> str:
    squares = {shape_label(n, n, n) for n in sizes}
    headline = [r.ratio for r in summary if r.shape.split(": ")[-1] in squares and not r.comparison]
    lines = [
        "# Tuned matmul (grader.gemm) against cuBLAS",
        "",
        header,
        "",
        f"Geometric mean of the reference's ratio on the square sizes {list(sizes)}, all dtypes: "
        f"**{_report.geomean(headline):.3f}x** cuBLAS.",
        "",
        markdown_table(
            ["dtype", "problem", "kernel", "TFLOP/s", "x cuBLAS", "notes"],
            [[r.dtype, r.shape, r.label, r.tflops, r.ratio, r.note] for r in summary],
        ),
    ]
    if per_config:
        lines += [
            "",
            "## Every config on its own",
            "",
            markdown_table(
                ["dtype", "problem", "config and path", "TFLOP/s", "x cuBLAS", "notes"],
                [[r.dtype, r.shape, r.label, r.tflops, r.ratio, r.note] for r in per_config],
            ),
        ]
    return "\n".join(lines) + "\n"


def section(summary: list[Row], per_config: list[Row], sizes) -> _report.Section:
    """A measure() run as bench/report.py's section: the rows, the goal, and the autotuned kernel
    at the largest size (float16) for the matmul ladder and the roofline."""
    out = _report.Section("matmul", "05 · Autotuned matmul (grader.gemm) against cuBLAS")
    squares = {shape_label(n, n, n) for n in sizes}
    tuned = [r for r in summary if not r.comparison and r.shape.split(": ")[-1] in squares]
    goal = out.goal(
        f"05 autotuned matmul: speed / cuBLAS's, geometric mean over {list(sizes)}, "
        + " and ".join(sorted({r.dtype for r in tuned})),
        AT_LEAST,
    )
    lowest = out.goal(
        "05 autotuned matmul: the lowest speed / cuBLAS's over the same sizes and dtypes",
        NONE_BELOW,
    )
    goal.measured = _report.geomean([r.ratio for r in tuned])
    goal.detail = ", ".join(f"{r.dtype} {r.shape.split(': ')[-1]} {r.ratio:.2f}" for r in tuned)
    if tuned:
        worst = min(tuned, key=lambda r: r.ratio)
        lowest.measured = worst.ratio
        lowest.detail = f"{worst.dtype} {worst.shape.split(': ')[-1]}"
    for r in summary + per_config:
        out.rows.append(
            _report.Row(
                r.label, f"{r.dtype} {r.shape}", "cuBLAS", r.ratio, r.tflops, "TFLOP/s", note=r.note
            )
        )
    n = max(sizes)
    for r in tuned:
        if r.dtype == "fp16" and r.shape.endswith(shape_label(n, n, n)):
            seconds = 2 * n**3 / (r.tflops * 1e12)
            entry = {"label": f"05 autotuned ({n})", "n": n, "tflops": r.tflops, "ratio": r.ratio}
            out.data["ladder"] = [entry | {"seconds": seconds}]
            out.points.append(_report.Point("05 autotuned", 2 * n**3, 3 * n * n * 2, seconds))
    return out


def main(argv=None) -> int:
    args = parse(argv)
    dev = device.setup()
    if not dev.supports("timing"):
        print(
            f"bench/matmul.py measures on a CUDA GPU; this machine runs {dev.describe()}. "
            "Nothing was measured.",
            file=sys.stderr,
        )
        return 2
    import torch
    import triton

    summary, per_config = measure(args)
    header = (
        f"Device: {dev.describe()}; torch {torch.__version__}; triton {triton.__version__}; "
        f"{time.strftime('%Y-%m-%d %H:%M')}. Ratios are against cuBLAS timed in the same run."
    )
    text = report(summary, per_config, args.sizes, header)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
