"""07's tiled-loop figure: the committed SVG is what its drawing code makes now, byte for byte,
and the notebook shows it."""

from grader.authoring import build, diagrams


def test_committed_svg_is_the_drawing():
    draw = diagrams.registry()["07_flash_attention"]["tiled_loop"]
    committed = diagrams.path("07_flash_attention", "tiled_loop")
    assert committed.read_bytes() == diagrams.render(draw), (
        f"{committed} differs from its drawing code: run `python -m grader.authoring.diagrams`"
    )


def test_render_is_deterministic():
    draw = diagrams.registry()["07_flash_attention"]["tiled_loop"]
    assert diagrams.render(draw) == diagrams.render(draw)


def test_notebook_shows_the_figure():
    nb = build.to_notebook(build.SOLUTIONS / "07_flash_attention" / "flash_attention.py")
    shown = [
        c for c in nb.cells if c.cell_type == "markdown" and "figures/tiled_loop.svg)" in c.source
    ]
    assert shown, "no markdown cell of 07 shows figures/tiled_loop.svg"
