"""What the diagrams share: a blank canvas in grid units and labelled boxes on it."""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

# one colour per program (matplotlib's default cycle), and the colours of what is masked off
PROGRAM = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")
PADDED = "#f8d7da"  # lanes that are loaded, but with a fill value instead of memory
MASKED = "#e0e0e0"  # lanes or rows that neither load nor store
INK = "#333333"


def canvas(width: float, height: float, columns: int = 1) -> tuple[Figure, list[Axes]]:
    """A figure of `columns` blank panels side by side, in grid units (see `limits`)."""
    figure = Figure(figsize=(width, height))
    axes = list(figure.subplots(1, columns, squeeze=False)[0])
    for ax in axes:
        ax.set_aspect("equal")
        ax.axis("off")
    return figure, axes


def limits(ax: Axes, left: float, right: float, top: float, bottom: float) -> None:
    """Show x from `left` to `right` and y from `top` down to `bottom` (y grows downwards)."""
    ax.set_xlim(left, right)
    ax.set_ylim(bottom, top)


def box(
    ax: Axes,
    x: float,
    y: float,
    text: str = "",
    color: str = "white",
    *,
    width: float = 1.0,
    height: float = 1.0,
    ink: str = "white",
    edge: str = "white",
) -> None:
    """A box with its top-left corner at (x, y) and `text` in its middle."""
    ax.add_patch(Rectangle((x, y), width, height, facecolor=color, edgecolor=edge, lw=1.2))
    if text:
        ax.text(
            x + width / 2, y + height / 2, text, ha="center", va="center", fontsize=8, color=ink
        )
