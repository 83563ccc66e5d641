"""03 · Fused softmax: the (ROWS, BLOCK) tile each program of softmax_kernel owns, and its masks."""

from __future__ import annotations

from matplotlib.figure import Figure

from grader.authoring.diagrams._draw import INK, MASKED, PADDED, PROGRAM, box, canvas, limits

# the example the prose describes: a 6 x 5 matrix in tiles of ROWS = 4 by BLOCK = 8
N_ROWS, N_COLS, ROWS, BLOCK = 6, 5, 4, 8
RED = "#a12a2a"
GREY = "#777777"


def draw_row_tiles() -> Figure:
    """Program pid owns rows pid*ROWS .. pid*ROWS+ROWS-1, each loaded whole as BLOCK lanes
    (BLOCK = next_power_of_2(n_cols)); lanes past n_cols load a padding value, left for the
    student to choose (03's exercise asks for it), rows past n_rows are masked; the max and the
    sum reduce along axis 1, one per row."""
    programs = -(-N_ROWS // ROWS)
    figure, (ax,) = canvas(8, 6)
    gap = 0.5  # between the tiles of two programs
    for pid in range(programs):
        top = pid * (ROWS + gap)
        for r in range(ROWS):
            row, y = pid * ROWS + r, top + r
            for c in range(BLOCK):
                if row >= N_ROWS:
                    box(ax, c, y, "off", MASKED, ink=GREY)
                elif c >= N_COLS:
                    box(ax, c, y, "pad", PADDED, ink=RED)
                else:
                    box(ax, c, y, f"{row},{c}", PROGRAM[pid])
            label = (
                f"row {row}: row_max, sum over axis 1"
                if row < N_ROWS
                else f"row {row} >= n_rows: no load, no store"
            )
            ax.annotate(
                "",
                (BLOCK + 0.9, y + 0.5),
                (BLOCK + 0.1, y + 0.5),
                arrowprops={"arrowstyle": "->", "color": INK if row < N_ROWS else GREY},
            )
            ax.text(
                BLOCK + 1.0,
                y + 0.5,
                label,
                va="center",
                fontsize=7.5,
                color=INK if row < N_ROWS else GREY,
            )
        ax.text(
            -0.3,
            top + ROWS / 2,
            f"program {pid}\nrows {pid * ROWS}..{pid * ROWS + ROWS - 1}",
            ha="right",
            va="center",
            fontsize=9,
            color=PROGRAM[pid],
        )
    bottom = programs * (ROWS + gap) - gap
    ax.annotate(
        "", (N_COLS, -0.35), (0, -0.35), arrowprops={"arrowstyle": "<->", "color": INK, "lw": 0.8}
    )
    ax.text(N_COLS / 2, -0.45, f"n_cols = {N_COLS}", ha="center", va="bottom", fontsize=8)
    ax.annotate(
        "", (BLOCK, -1.05), (0, -1.05), arrowprops={"arrowstyle": "<->", "color": INK, "lw": 0.8}
    )
    ax.text(
        BLOCK / 2,
        -1.15,
        f"BLOCK = next_power_of_2(n_cols) = {BLOCK} lanes",
        ha="center",
        va="bottom",
        fontsize=8,
    )
    code = (
        f"n_rows = {N_ROWS}, ROWS = {ROWS}: grid = (cdiv(n_rows, ROWS),) = ({programs},)\n"
        "rows = pid * ROWS + tl.arange(0, ROWS)[:, None]\n"
        "cols = tl.arange(0, BLOCK)[None, :]\n"
        "mask = (rows < n_rows) & (cols < n_cols)\n"
        "x    = tl.load(..., mask=mask, other=pad)\n"
        "pad: a value that changes neither row_max nor sum"
    )
    ax.text(-2.2, bottom + 0.4, code, ha="left", va="top", fontsize=7.5, family="DejaVu Sans Mono")
    limits(ax, -2.4, BLOCK + 6.2, -2.0, bottom + 3.2)
    return figure


DIAGRAMS = {"03_softmax": {"row_tiles": draw_row_tiles}}
