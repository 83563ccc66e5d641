"""The course's committed diagrams: pictures that explain an idea and need no measurement, drawn
once from code and committed as `solutions/NN_topic/figures/<stem>.svg`, so that a notebook shows
them (markdown `![alt](figures/<stem>.svg)`) without running anything.

Every module of this package (but those named `_...`) defines
`DIAGRAMS = {"NN_topic": {"stem": draw}}`, where `draw()` returns a matplotlib Figure; `DIAGRAMS`
below is their union, found by importing each module.
`write()` renders them all (`python -m grader diagrams`); `check()` lists the committed files that
differ from a fresh rendering (`--check`). Rendering is deterministic: fixed fonts, text drawn
as paths, a fixed id salt and no date, so two runs give the same bytes (with matplotlib as pinned
in pyproject.toml).
"""

from __future__ import annotations

import importlib
import io
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from grader.authoring import build

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIGURES = "figures"  # the folder beside each notebook, in solutions/ and in course/
# What makes two renderings byte-identical: the SVG's ids come from the salt, not a random one;
# the text is drawn as paths of the font matplotlib ships, so no viewer's fonts change it.
RC = {
    "svg.hashsalt": "gpu-kernels-course",
    "svg.fonttype": "path",
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "path.simplify": True,
}

Draw = Callable[[], "Figure"]


def _collect() -> dict[str, dict[str, Draw]]:
    """The union of every module's DIAGRAMS; a stem drawn twice for one notebook is an error."""
    found: dict[str, dict[str, Draw]] = {}
    modules = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    for module in sorted(modules):
        diagrams = importlib.import_module(f"{__name__}.{module}").DIAGRAMS
        for notebook, stems in diagrams.items():
            for stem, draw in stems.items():
                if stem in found.setdefault(notebook, {}):
                    raise ValueError(f"{module}: {notebook}/{stem} is drawn by another module too")
                found[notebook][stem] = draw
    return found


DIAGRAMS = _collect()


def render(draw: Draw) -> bytes:
    """The SVG of the figure `draw()` returns, the same bytes on every run."""
    import matplotlib

    with matplotlib.rc_context(RC):
        figure = draw()
        out = io.BytesIO()
        figure.savefig(out, format="svg", metadata={"Date": None}, bbox_inches="tight")
    return out.getvalue()


def path_of(notebook: str, stem: str, solutions: Path = build.SOLUTIONS) -> Path:
    return solutions / notebook / FIGURES / f"{stem}.svg"


def write(solutions: Path = build.SOLUTIONS) -> list[Path]:
    """Render every diagram into solutions/NN_topic/figures/; returns the files written."""
    written = []
    for notebook, stems in sorted(DIAGRAMS.items()):
        for stem, draw in sorted(stems.items()):
            path = path_of(notebook, stem, solutions)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(render(draw))
            written.append(path)
    return written


def check(solutions: Path = build.SOLUTIONS) -> list[str]:
    """Each committed diagram that is missing or differs from a fresh rendering; empty when all
    are up to date."""
    problems = []
    for notebook, stems in sorted(DIAGRAMS.items()):
        for stem, draw in sorted(stems.items()):
            path = path_of(notebook, stem, solutions)
            rel = path.relative_to(solutions.parent)
            if not path.exists():
                problems.append(f"missing: {rel}")
            elif path.read_bytes() != render(draw):
                problems.append(f"stale: {rel}")
    return problems
