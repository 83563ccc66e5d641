"""00 · Setup: the programs of a 1-D launch, their blocks of lanes, and the mask."""

from __future__ import annotations

from matplotlib.figure import Figure

from grader.authoring.diagrams._draw import INK, MASKED, PROGRAM, box, canvas, limits

N, BLOCK = 20, 8
GREY = "#777777"


def draw_blocks() -> Figure:
    """cdiv(N, BLOCK) programs of BLOCK lanes over N elements; the lanes past N are masked."""
    programs = -(-N // BLOCK)
    figure, (ax,) = canvas(9, 2.8)
    for pid in range(programs):
        for lane in range(BLOCK):
            i = pid * BLOCK + lane
            if i < N:
                box(ax, i, 0, str(i), PROGRAM[pid])
            else:
                box(ax, i, 0, "off", MASKED, ink=GREY)
        ax.text(
            pid * BLOCK + BLOCK / 2,
            -0.3,
            f"program {pid}",
            ha="center",
            va="bottom",
            fontsize=9,
            color=PROGRAM[pid],
        )
    ax.annotate("", (N, 1.45), (0, 1.45), arrowprops={"arrowstyle": "<->", "color": INK, "lw": 0.8})
    ax.text(N / 2, 1.6, f"n = {N} elements", ha="center", va="top", fontsize=8, color=INK)
    ax.text(
        N + (programs * BLOCK - N) / 2,
        1.6,
        "offsets >= n:\nmasked off",
        ha="center",
        va="top",
        fontsize=7,
        color=GREY,
    )
    code = (
        f"grid    = (cdiv(n, BLOCK),) = ({programs},)     BLOCK = {BLOCK}\n"
        "offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "mask    = offsets < n"
    )
    ax.text(0, 2.6, code, ha="left", va="top", fontsize=8, color=INK, family="DejaVu Sans Mono")
    limits(ax, -0.2, programs * BLOCK + 0.2, -1.0, 4.4)
    return figure


DIAGRAMS = {"00_setup": {"blocks": draw_blocks}}
