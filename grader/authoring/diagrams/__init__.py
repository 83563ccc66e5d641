"""Figures of the notebooks drawn by code: each module maps a notebook to its diagrams
(`DIAGRAMS = {notebook: {name: draw}}`, each `draw()` returning a matplotlib Figure), written as
solutions/<notebook>/figures/<name>.svg. The SVGs are committed, so that a notebook read without
running shows them; `write` saves them byte for byte the same on every run.

    python -m grader.authoring.diagrams    # redraw every figure
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

SOLUTIONS = Path(__file__).resolve().parents[3] / "solutions"


def registry() -> dict[str, dict[str, object]]:
    """{notebook: {name: draw}} gathered from every module of this package."""
    found: dict[str, dict[str, object]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):  # __main__
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for notebook, diagrams in getattr(module, "DIAGRAMS", {}).items():
            found.setdefault(notebook, {}).update(diagrams)
    return found


def render(draw) -> bytes:
    """The SVG of `draw()`'s figure, the same bytes on every run (fixed ids, no date)."""
    import io

    style = {
        "svg.hashsalt": "gpu-kernels-course",
        "svg.fonttype": "none",
        "mathtext.fontset": "dejavusans",
    }
    with plt.rc_context(style):
        fig = draw()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def path(notebook: str, name: str) -> Path:
    return SOLUTIONS / notebook / "figures" / f"{name}.svg"


def write() -> list[Path]:
    """Draw every figure into solutions/<notebook>/figures/; returns the files written."""
    written = []
    for notebook, diagrams in registry().items():
        for name, draw in diagrams.items():
            target = path(notebook, name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(render(draw))
            written.append(target)
    return written
