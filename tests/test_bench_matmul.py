"""bench/matmul.py: importable anywhere, its tables and summary are right, it refuses to measure
off a GPU, and on a GPU it measures and writes markdown."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest

from grader.runtime import device

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("bench_matmul", ROOT / "bench" / "matmul.py")
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # dataclasses look their module up there
spec.loader.exec_module(bench)


def test_markdown_table_and_report():
    rows = [bench.Row("fp16", "square 2048: 2048x2048x2048", "autotuned", 610.0, 0.97, "x")]
    rows.append(bench.Row("bf16", "square 2048: 2048x2048x2048", "autotuned", 590.0, 0.95))
    rows.append(bench.Row("bf16", "square 2048: 2048x2048x2048", "per tile", 1.0, 0.5, "", True))
    per_config = [
        bench.Row("fp16", "2048x2048x2048", "128x256x64 G8 w8 s4 TMA", math.nan, math.nan)
    ]
    text = bench.report(rows, per_config, [2048], header="Device: test")
    assert "**0.960x** cuBLAS" in text
    assert "| fp16 | square 2048: 2048x2048x2048 | autotuned | 610 | 0.97 | x |" in text
    assert "| n/a | n/a |" in text and "Device: test" in text


def test_section_goals_are_the_mean_and_the_lowest_ratio():
    def row(dtype, n, ratio):
        return bench.Row(dtype, f"square {n}: {n}x{n}x{n}", "autotuned", 600.0, ratio)

    rows = [row("fp16", 2048, 0.89), row("fp16", 4096, 1.0), row("bf16", 2048, 0.97)]
    rows.append(bench.Row("fp16", "square 2048: 2048x2048x2048", "per tile", 1, 0.5, "", True))
    mean, lowest = bench.section(rows, [], [2048, 4096]).goals
    assert mean.measured == pytest.approx((0.89 * 1.0 * 0.97) ** (1 / 3)) and mean.target == 0.95
    assert (
        lowest.measured == 0.89
        and lowest.verdict == "miss"
        and "fp16 2048x2048x2048" in (lowest.detail)
    )
    rows[0] = row("fp16", 2048, 0.93)
    assert bench.section(rows, [], [2048, 4096]).goals[1].verdict == "pass"


def test_problems_and_arguments():
    assert bench.problems([1024], squares_only=True) == [("square 1024", (1024, 1024, 1024))]
    assert ("not a multiple of 128", (4000, 4000, 4000)) in bench.problems([1024])
    args = bench.parse([])
    assert args.sizes == [2048, 4096, 8192] and args.dtypes == ["fp16", "bf16"]


def test_main_refuses_to_measure_off_a_gpu(capsys):
    if device.current().supports("timing"):
        pytest.skip("this machine can measure")
    assert bench.main(["--sizes", "256"]) == 2
    assert "Nothing was measured" in capsys.readouterr().err


@pytest.mark.gpu
def test_main_measures_and_writes_markdown(tmp_path):
    out = tmp_path / "bench.md"
    args = ["--sizes", "512", "--dtypes", "fp16", "--squares-only", "--no-per-config"]
    assert bench.main([*args, "--out", str(out)]) == 0
    text = out.read_text()
    assert "square 512: 512x512x512" in text and "x cuBLAS" in text
