"""Autotuning heatmap: a table of configs (measured TFLOP/s, or a modelled quantity such as
shared memory), one cell per (tile shape, parameter) pair, with controls for the axis, the value
shown and the problem shape.

`explore(results)` takes the table as a list of dicts, one per config, with the keys BLOCK_M,
BLOCK_N, BLOCK_K, num_warps, num_stages, one or more numeric value columns (e.g. "tflops",
"smem_kb") and, optionally, "shape" (a label such as "4096x4096x4096"). A cell shows the largest
value (the best, for a speed) over the configs that share its row and column; missing values
(configs that did not fit or did not run) are NaN and drawn grey. A GROUP_M column is ignored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from grader.runtime import recorded

PARAMETERS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
AXES = ("num_stages", "num_warps", "BLOCK_K")
NOT_VALUES = (*PARAMETERS, "GROUP_M", "shape")


def tile(row: dict) -> str:
    """The row's tile shape as a label, e.g. '128x256'."""
    return f"{row['BLOCK_M']}x{row['BLOCK_N']}"


def value_columns(rows: Sequence[dict]) -> list[str]:
    """Numeric columns other than the config parameters, in first-seen order."""
    seen = []
    for row in rows:
        for key, v in row.items():
            if key in NOT_VALUES or key in seen:
                continue
            if isinstance(v, int | float) and not isinstance(v, bool):
                seen.append(key)
    return seen


def _finite(v) -> bool:
    return isinstance(v, int | float) and not (isinstance(v, float) and math.isnan(v))


def pivot(rows: Sequence[dict], x: str, value: str, shape: str | None = None):
    """(tiles, xs, matrix): matrix[i][j] is the best `value` of the configs with tile tiles[i]
    and parameter `x` equal to xs[j] (NaN where none has a value)."""
    if x not in PARAMETERS:
        raise ValueError(f"x must be one of {PARAMETERS}, not {x!r}")
    chosen = [r for r in rows if shape is None or r.get("shape") == shape]
    if not chosen:
        raise ValueError("no rows to show" + (f" for shape {shape!r}" if shape else ""))
    if not any(value in r for r in chosen):
        raise ValueError(f"no row has a {value!r} column")
    tiles = sorted({tile(r) for r in chosen}, key=lambda t: tuple(int(p) for p in t.split("x")))
    xs = sorted({r[x] for r in chosen})
    matrix = [[math.nan] * len(xs) for _ in tiles]
    for r in chosen:
        v = r.get(value)
        if not _finite(v):
            continue
        i, j = tiles.index(tile(r)), xs.index(r[x])
        if math.isnan(matrix[i][j]) or v > matrix[i][j]:
            matrix[i][j] = float(v)
    return tiles, xs, matrix


def draw(rows: Sequence[dict], x: str, value: str, shape: str | None = None, ax=None):
    """Draw the heatmap on `ax` (a new figure if None); returns the Axes."""
    import matplotlib.pyplot as plt
    import numpy as np

    tiles, xs, matrix = pivot(rows, x, value, shape)
    data = np.array(matrix, dtype=float)
    if ax is None:
        _, ax = plt.subplots(figsize=(1.3 * len(xs) + 3, 0.5 * len(tiles) + 1.8))
    cmap = plt.get_cmap("viridis").with_extremes(bad="lightgray")
    ax.imshow(np.ma.masked_invalid(data), cmap=cmap, aspect="auto")
    finite = data[np.isfinite(data)]
    middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    for (i, j), v in np.ndenumerate(data):
        text = "n/a" if not np.isfinite(v) else f"{v:.0f}" if abs(v) >= 10 else f"{v:.2g}"
        color = "black" if not np.isfinite(v) or v > middle else "white"
        ax.text(j, i, text, ha="center", va="center", fontsize=8, color=color)
    ax.set_xticks(range(len(xs)), [str(v) for v in xs])
    ax.set_yticks(range(len(tiles)), tiles)
    ax.set_xlabel(x)
    ax.set_ylabel("tile BLOCK_M x BLOCK_N")
    where = f", {shape}" if shape else ""
    ax.set_title(f"{value} (largest over the other parameters{where})", fontsize=9)
    return ax


@recorded.replayable("grader.runtime.widgets.autotune:show")
def show(rows: Sequence[dict], x: str, value: str, shape: str | None = None) -> None:
    """`draw` on a figure of its own, shown."""
    import matplotlib.pyplot as plt

    ax = draw(rows, x, value, shape)
    ax.figure.tight_layout()
    plt.show()


def explore(results: Sequence[dict], value: str | None = None):
    """An ipywidgets panel: dropdowns for the x axis, the value and the shape, and the heatmap."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    rows = list(results)
    values = value_columns(rows)
    if not rows or not values:
        raise ValueError("explore needs a non-empty table with at least one numeric value column")
    shapes = sorted({r["shape"] for r in rows if "shape" in r})
    x_axis = widgets.Dropdown(options=list(AXES), value="num_stages", description="x axis")
    shown = widgets.Dropdown(
        options=values, value=value if value in values else values[0], description="value"
    )
    shape = widgets.Dropdown(
        options=shapes or ["(all)"], value=(shapes or ["(all)"])[0], description="shape"
    )
    out = widgets.Output()

    def render(*_):
        out.clear_output(wait=True)
        with out:
            fig, ax = plt.subplots(figsize=(7, 3.6))
            draw(rows, x_axis.value, shown.value, shape.value if shapes else None, ax=ax)
            plt.tight_layout()
            plt.show()

    for control in (x_axis, shown, shape):
        control.observe(render, names="value")
    render()
    panel = widgets.VBox([widgets.HBox([x_axis, shown, shape]), out])
    panel.render = render  # for tests and for redrawing after the table changes
    return panel
