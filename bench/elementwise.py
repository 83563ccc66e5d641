"""Benchmark notebook 02's reference kernels: the vector add and the fused bias + GELU + scale,
each against a device copy of the same bytes (goal: at least 0.95x its bandwidth) and against
PyTorch (torch.add; the eager chain of three kernels), timed alternately in one run.

The kernels are the notebook's exercise cells (`add-kernel`, `fused-kernel`) and its launcher,
read from solutions/02_first_kernels/first_kernels.py, and so are the graded sizes
(BENCH_ELEMENTS, FUSED_BENCH_SHAPE). On a GPU, from the repository root:

    python bench/elementwise.py [--out build/bench-elementwise.md]

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

NOTEBOOK = "02_first_kernels"
OF_COPY = 0.95  # goal: bandwidth at least this fraction of the copy's, measured in the same run
# (BLOCK_M, BLOCK_N, num_warps) of the fused kernel, timed against the copy beside the launcher's
# default: the evidence for the default the notebook states
TILES = [(4, 1024, 4), (1, 4096, 8), (1, 8192, 8), (1, 8192, 16), (2, 4096, 16)]


def load():
    """The notebook's add kernel and launcher, fused kernel and launcher, and eager reference."""
    return _notebook.load(
        NOTEBOOK, ["add-kernel", "fused-kernel"], ["add", "bias_gelu_scale_reference"]
    )


def measure() -> _report.Section:
    """Both kernels against a copy and against PyTorch. Needs a GPU."""
    section = _report.Section("first_kernels", "02 · First kernels: vector add, fused kernel")
    ref = load()
    add_goal = section.goal("02 vector add: bandwidth, as a fraction of the copy's", OF_COPY)
    fused_goal = section.goal("02 fused kernel: bandwidth, as a fraction of the copy's", OF_COPY)
    section.attempt("vector add", _add, section, ref, add_goal)
    section.attempt("fused bias + GELU + scale", _fused, section, ref, fused_goal)
    return section


def _add(section, ref, goal) -> None:
    import torch

    from grader.runtime import checks, perf

    n = _notebook.value(NOTEBOOK, "BENCH_ELEMENTS")
    x = torch.randn(n, device="cuda")
    y, out, theirs = torch.randn_like(x), torch.empty_like(x), torch.empty_like(x)
    moved = 3 * x.nbytes  # reads x and y, writes out
    problem = f"{n >> 20} Mi float32"

    def mine():
        return ref.add(x, y, out)

    def verify():
        checks.compare(out, x + y, context="after timing")

    vs_copy = perf.compare(mine, perf.copy_baseline(moved), names=("add", "copy"), verify=verify)
    section.rows.append(_report.row_from(vs_copy, "02 vector add", problem, moved, "GB/s"))
    goal.measured = vs_copy.speedup  # same bytes: the time ratio is the bandwidth ratio
    goal.detail = (
        f"{vs_copy.candidate.per_second(moved) / 1e9:.0f} vs "
        f"{vs_copy.baseline.per_second(moved) / 1e9:.0f} GB/s"
    )
    vs_torch = perf.compare(
        mine, lambda: torch.add(x, y, out=theirs), names=("add", "torch.add"), verify=verify
    )
    section.rows.append(_report.row_from(vs_torch, "02 vector add", problem, moved, "GB/s"))
    section.points.append(
        _report.Point("02 add", n, moved, vs_copy.candidate.median_ms * 1e-3, "fp32")
    )


def _fused(section, ref, goal) -> None:
    import torch

    from grader.runtime import checks, perf

    M, N = _notebook.value(NOTEBOOK, "FUSED_BENCH_SHAPE")
    x = torch.randn(M, N, device="cuda")
    bias = torch.randn(N, device="cuda")
    out = torch.empty_like(x)
    scale = 0.5
    moved = x.nbytes + bias.nbytes + out.nbytes  # the ideal traffic: x and bias read, out written
    expected = ref.bias_gelu_scale_reference(x.double(), bias.double(), scale)
    problem = f"{M} x {N} float32"

    def mine():
        return ref.bias_gelu_scale(x, bias, scale, out)

    def verify():
        checks.compare(out, expected, context="after timing")

    vs_copy = perf.compare(mine, perf.copy_baseline(moved), names=("fused", "copy"), verify=verify)
    section.rows.append(_report.row_from(vs_copy, "02 fused kernel", problem, moved, "GB/s"))
    goal.measured = vs_copy.speedup
    goal.detail = (
        f"{vs_copy.candidate.per_second(moved) / 1e9:.0f} vs "
        f"{vs_copy.baseline.per_second(moved) / 1e9:.0f} GB/s"
    )
    vs_eager = perf.compare(
        mine,
        lambda: ref.bias_gelu_scale_reference(x, bias, scale),
        names=("fused", "eager PyTorch, 3 kernels"),
        verify=verify,
    )
    section.rows.append(_report.row_from(vs_eager, "02 fused kernel", problem, moved, "GB/s"))
    seconds = vs_copy.candidate.median_ms * 1e-3
    section.points.append(_report.Point("02 fused", 12 * x.numel(), moved, seconds, "fp32"))
    for block_m, block_n, num_warps in TILES:

        def tiled(block_m=block_m, block_n=block_n, num_warps=num_warps):
            return ref.bias_gelu_scale(x, bias, scale, out, block_m, block_n, num_warps)

        tile = perf.compare(
            tiled, perf.copy_baseline(moved), names=("fused", "copy"), verify=verify
        )
        section.rows.append(
            _report.row_from(
                tile,
                "02 fused kernel: launcher tiles",
                problem,
                moved,
                "GB/s",
                note=f"{block_m} x {block_n}, {num_warps} warps",
            )
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    args = parser.parse_args(argv)
    return _report.run_alone("bench/elementwise.py", measure, args.out)


if __name__ == "__main__":
    sys.exit(main())
