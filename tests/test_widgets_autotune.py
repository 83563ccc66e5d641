"""The autotuning heatmap on a synthetic table: the pivot picks the best value per cell, marks
missing cells, and the widget builds and redraws for every control."""

import math

import matplotlib
import pytest

from grader.runtime.widgets import autotune

matplotlib.use("Agg")


def row(bm, bn, bk, w, s, **values):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w, "num_stages": s} | values


TABLE = [
    row(128, 256, 64, 8, 3, tflops=600.0, smem_kb=144, shape="4096x4096x4096"),
    row(128, 256, 64, 8, 4, tflops=float("nan"), smem_kb=192, shape="4096x4096x4096"),
    row(128, 256, 32, 8, 4, tflops=550.0, smem_kb=96, shape="4096x4096x4096"),
    row(128, 128, 64, 4, 4, tflops=450.0, smem_kb=128, shape="4096x4096x4096"),
    row(128, 128, 64, 8, 4, tflops=500.0, smem_kb=128, shape="4096x4096x4096"),
    row(64, 256, 64, 4, 3, tflops=300.0, smem_kb=120, shape="2048x2048x2048"),
]


def test_pivot_takes_the_best_value_per_cell_and_sorts_tiles_numerically():
    tiles, xs, matrix = autotune.pivot(TABLE, "num_stages", "tflops", shape="4096x4096x4096")
    assert tiles == ["128x128", "128x256"]
    assert xs == [3, 4]
    assert matrix[0] == [pytest.approx(math.nan, nan_ok=True), 500.0]
    # 128x256 at 4 stages: the NaN row (did not fit) loses to the BLOCK_K=32 row
    assert matrix[1] == [600.0, 550.0]


def test_pivot_leaves_cells_without_a_value_as_nan():
    rows = [row(128, 256, 64, 8, 4, tflops=float("nan")), row(64, 64, 32, 4, 2, tflops=1.0)]
    tiles, xs, matrix = autotune.pivot(rows, "num_stages", "tflops")
    assert tiles == ["64x64", "128x256"] and xs == [2, 4]
    assert math.isnan(matrix[1][1]) and math.isnan(matrix[0][1]) and matrix[0][0] == 1.0


def test_pivot_on_warps_and_on_a_modelled_column():
    tiles, xs, matrix = autotune.pivot(TABLE, "num_warps", "smem_kb")
    assert xs == [4, 8]
    assert matrix[tiles.index("128x256")] == [pytest.approx(math.nan, nan_ok=True), 192]
    assert matrix[tiles.index("64x256")] == [120, pytest.approx(math.nan, nan_ok=True)]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"x": "tile", "value": "tflops"}, "x must be one of"),
        ({"x": "num_stages", "value": "latency"}, "no row has"),
        ({"x": "num_stages", "value": "tflops", "shape": "1x1x1"}, "no rows to show"),
    ],
)
def test_pivot_refuses_what_it_cannot_draw(kwargs, message):
    with pytest.raises(ValueError, match=message):
        autotune.pivot(TABLE, **kwargs)


def test_value_columns_skip_parameters_labels_and_flags():
    rows = [row(64, 64, 32, 4, 2, tflops=1.0, ok=True, shape="s", note="x", smem_kb=3, GROUP_M=8)]
    assert autotune.value_columns(rows) == ["tflops", "smem_kb"]


def test_explore_builds_and_redraws_for_every_control():
    panel = autotune.explore(TABLE, value="tflops")
    controls = panel.children[0].children
    x_axis, shown, shape = controls
    assert x_axis.options == autotune.AXES
    assert list(shown.options) == ["tflops", "smem_kb"] and shown.value == "tflops"
    assert list(shape.options) == ["2048x2048x2048", "4096x4096x4096"]
    for x in autotune.AXES:
        x_axis.value = x  # each change redraws through the observer
    shown.value = "smem_kb"
    shape.value = "2048x2048x2048"
    panel.render()


def test_explore_without_shapes_and_the_draw_function():
    rows = [{k: v for k, v in r.items() if k != "shape"} for r in TABLE]
    panel = autotune.explore(rows)
    assert list(panel.children[0].children[2].options) == ["(all)"]
    ax = autotune.draw(rows, "BLOCK_K", "tflops")
    labels = [t.get_text() for t in ax.texts]
    assert "n/a" in labels and "600" in labels


def test_explore_refuses_an_empty_table():
    with pytest.raises(ValueError, match="non-empty"):
        autotune.explore([])
    with pytest.raises(ValueError, match="non-empty"):
        autotune.explore([row(64, 64, 32, 4, 2)])
