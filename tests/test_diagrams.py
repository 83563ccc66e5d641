"""The committed diagrams (grader/authoring/diagrams/, `python -m grader diagrams`): each SVG in
solutions/NN_topic/figures/ is what its code draws, byte for byte; every figure a notebook shows
is there, and every committed figure is shown by its notebook."""

from __future__ import annotations

import shutil
import sys
import textwrap

import pytest
from matplotlib.figure import Figure

from grader import cli
from grader.authoring import build, diagrams

pytestmark = pytest.mark.tooling


def test_the_committed_diagrams_are_what_their_code_draws(capsys):
    assert diagrams.check() == [], "run `python -m grader diagrams` and commit the SVGs"
    assert cli.main(["diagrams", "--check"]) == 0
    assert "match" in capsys.readouterr().out


def test_the_check_finds_a_stale_and_a_missing_diagram(tmp_path, capsys):
    solutions = tmp_path / "solutions"
    diagrams.write(solutions)
    (notebook, stems), *_ = sorted(diagrams.DIAGRAMS.items())
    stale, *_ = sorted(stems)
    path = diagrams.path_of(notebook, stale, solutions)
    path.write_bytes(path.read_bytes().replace(b"</svg>", b"<!-- edited --></svg>"))
    (other_notebook, other_stems) = sorted(diagrams.DIAGRAMS.items())[-1]
    missing = sorted(other_stems)[-1]
    diagrams.path_of(other_notebook, missing, solutions).unlink()
    assert diagrams.check(solutions) == [
        f"stale: solutions/{notebook}/figures/{stale}.svg",
        f"missing: solutions/{other_notebook}/figures/{missing}.svg",
    ]


def test_rendering_is_byte_identical_and_undated():
    for stems in diagrams.DIAGRAMS.values():
        for draw in stems.values():
            first = diagrams.render(draw)
            assert first == diagrams.render(draw)
            assert b"<dc:date>" not in first
            assert b"<text" not in first, "text is drawn as paths, so no viewer's fonts change it"


def test_every_diagram_belongs_to_a_notebook_and_draws_a_figure():
    notebooks = {a.name for a in build.assignments()}
    for notebook, stems in diagrams.DIAGRAMS.items():
        assert notebook in notebooks, f"{notebook}: no such notebook in solutions/"
        for stem, draw in stems.items():
            assert stem.isidentifier(), f"{notebook}/{stem}: a stem names a file, use [a-z_]"
            assert isinstance(draw(), Figure), f"{notebook}/{stem}: draw() returns a Figure"


def test_a_module_added_to_the_package_is_found(tmp_path, monkeypatch):
    """The contract another module follows: `DIAGRAMS = {"NN_topic": {"stem": draw}}`, found by
    importing every module of the package; a stem drawn by two modules is refused."""
    (tmp_path / "extra_topic.py").write_text(
        textwrap.dedent(
            """
            from matplotlib.figure import Figure

            def draw_tiled_loop():
                return Figure()

            DIAGRAMS = {"07_flash_attention": {"tiled_loop": draw_tiled_loop}}
            """
        )
    )
    monkeypatch.setattr(diagrams, "__path__", [*diagrams.__path__, str(tmp_path)])
    found = diagrams._collect()
    assert found["07_flash_attention"]["tiled_loop"].__name__ == "draw_tiled_loop"
    assert found["03_softmax"] == diagrams.DIAGRAMS["03_softmax"]
    (tmp_path / "extra_topic.py").write_text("DIAGRAMS = {'03_softmax': {'row_tiles': print}}\n")
    monkeypatch.delitem(sys.modules, f"{diagrams.__name__}.extra_topic", False)
    with pytest.raises(ValueError, match="03_softmax/row_tiles is drawn by another module"):
        diagrams._collect()


def committed_figures(solutions=build.SOLUTIONS) -> set[str]:
    return {p.relative_to(solutions).as_posix() for p in solutions.glob(f"*/{diagrams.FIGURES}/*")}


def linked_figures(solutions=build.SOLUTIONS) -> set[str]:
    return {
        f"{a.name}/{link}"
        for a in build.assignments(solutions)
        for link in build.figure_links(build.to_notebook(a.source))
    }


def test_every_figure_link_resolves_and_every_figure_is_shown():
    assert build.broken_figure_links() == []
    drawn = {
        f"{nb}/figures/{stem}.svg" for nb, stems in diagrams.DIAGRAMS.items() for stem in stems
    }
    assert committed_figures() == drawn, "solutions/*/figures/ holds only what diagrams/ draws"
    assert linked_figures() == drawn, "each diagram is shown by its notebook"


def test_a_broken_figure_link_stops_the_build(tmp_path):
    solutions = tmp_path / "solutions"
    shutil.copytree(build.SOLUTIONS / "03_softmax", solutions / "03_softmax")
    source = solutions / "03_softmax" / "softmax.py"
    source.write_text(source.read_text().replace("figures/row_tiles.svg", "figures/rowtiles.svg"))
    assert build.broken_figure_links(solutions) == [
        "solutions/03_softmax/softmax.py: figures/rowtiles.svg"
    ]
    with pytest.raises(build.BuildError, match="shows a figure that is not there"):
        build.build_sources(tmp_path / "build", solutions)
