"""Benchmark notebook 03's fused softmax against a device copy of the same bytes (goal: at least
0.92x its bandwidth), torch.softmax (goal: at least 1.15x its speed) and the eager version of
five operations, on float32 matrices of 8192 x 4096 and 4096 x 16384, timed alternately in one
run.

The kernel, its launch configuration and launcher are the notebook's exercise cell
(`softmax-kernel`), read from solutions/03_softmax/softmax.py. On a GPU, from the repository
root:

    python bench/softmax.py [--out build/bench-softmax.md] [--full]

--full adds the shape the notebook grades (SPEED_SHAPE). Importing this module needs no GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed `grader`
    sys.path.insert(0, str(ROOT))

from bench import _notebook, _report  # noqa: E402

NOTEBOOK = "03_softmax"
SHAPES = [(8192, 4096), (4096, 16384)]  # float32, where the goals are checked
OF_COPY = 0.92  # goal: bandwidth at least this fraction of a copy of the same bytes
OF_TORCH = 1.15  # goal: at least this many times as fast as torch.softmax


def load():
    """The notebook's softmax kernel, launch_config and launcher, and its eager softmax."""
    return _notebook.load(NOTEBOOK, ["softmax-kernel"], ["softmax_eager"])


def measure(full: bool = False) -> _report.Section:
    """The kernel against a copy, torch.softmax and eager softmax on each shape. Needs a GPU."""
    from grader.runtime import device

    section = _report.Section("softmax", "03 · Fused softmax")
    ref = load()
    shapes = list(SHAPES)
    if full:
        graded = tuple(_notebook.value(NOTEBOOK, "SPEED_SHAPE", {"DEVICE": device.current()}))
        shapes += [graded] if graded not in shapes else []
    for shape in shapes:
        goals = None
        if shape in SHAPES:
            where = f"{shape[0]} x {shape[1]} float32"
            goals = (
                section.goal(
                    f"03 softmax {where}: bandwidth, as a fraction of the copy's", OF_COPY
                ),
                section.goal(
                    f"03 softmax {where}: speed, as a multiple of torch.softmax's", OF_TORCH
                ),
            )
        section.attempt(f"softmax {shape}", _shape, section, ref, shape, goals)
    return section


def _shape(section, ref, shape, goals) -> None:
    import torch

    from grader.runtime import checks, perf

    x = torch.randn(*shape, device="cuda")
    out = torch.empty_like(x)
    expected = torch.softmax(x.double(), dim=1)
    moved = 2 * x.nbytes  # one read, one write
    problem = f"{shape[0]} x {shape[1]} float32"

    def mine():
        return ref.softmax(x, out)

    def verify():
        checks.compare(out, expected, context="after timing")

    comparisons = {
        "copy": perf.compare(
            mine, perf.copy_baseline(moved), names=("softmax", "copy"), verify=verify
        ),
        "torch": perf.compare(
            mine, lambda: torch.softmax(x, dim=1), names=("softmax", "torch.softmax"), verify=verify
        ),
        "eager": perf.compare(
            mine,
            lambda: ref.softmax_eager(x),
            names=("softmax", "eager, 5 operations"),
            verify=verify,
        ),
    }
    for c in comparisons.values():
        section.rows.append(_report.row_from(c, "03 softmax", problem, moved, "GB/s"))
    if goals:
        copy, torch_goal = comparisons["copy"], comparisons["torch"]
        goals[0].measured = copy.speedup
        goals[0].detail = (
            f"{copy.candidate.per_second(moved) / 1e9:.0f} vs "
            f"{copy.baseline.per_second(moved) / 1e9:.0f} GB/s"
        )
        goals[1].measured = torch_goal.speedup
        goals[1].detail = (
            f"{torch_goal.candidate.median_ms * 1e3:.0f} vs "
            f"{torch_goal.baseline.median_ms * 1e3:.0f} us"
        )
    if shape == SHAPES[0]:
        seconds = comparisons["copy"].candidate.median_ms * 1e-3
        section.points.append(_report.Point("03 softmax", 5 * x.numel(), moved, seconds, "fp32"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    parser.add_argument("--full", action="store_true", help="also the notebook's graded shape")
    args = parser.parse_args(argv)
    return _report.run_alone("bench/softmax.py", lambda: measure(args.full), args.out)


if __name__ == "__main__":
    sys.exit(main())
