"""07 · FlashAttention: the tiled loop of one program, with its (m, l, acc) update; and which key
blocks a program of the causal kernel visits."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from grader.authoring.diagrams._draw import INK, MASKED, PROGRAM

ON_CHIP = "#eef4fb"
MEMORY = "#f6f6f6"
Q_COLOR, K_COLOR, V_COLOR, S_COLOR, STATE = "#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3"


def _blocks(ax, x, y, count, current, color, label):
    """A column of `count` key or value blocks in memory, block `current` highlighted."""
    for i in range(count):
        top = y - i * 0.55
        hot = i == current
        ax.add_patch(
            Rectangle(
                (x, top - 0.5),
                1.3,
                0.5,
                facecolor=color if hot else "white",
                edgecolor=color,
                alpha=0.9 if hot else 1.0,
                lw=1.2,
            )
        )
        name = f"{label}$_{{{i}}}$" if i < count - 1 else f"{label}$_{{N/B_N-1}}$"
        ax.text(
            x + 0.65,
            top - 0.25,
            name,
            ha="center",
            va="center",
            fontsize=8,
            color="white" if hot else "black",
        )
    ax.text(
        x + 0.65, y + 0.15, f"{label} blocks\n(BLOCK_N × D)", ha="center", va="bottom", fontsize=8
    )


def _arrow(ax, start, end, text=None, where=(0, 0), color="0.25"):
    ax.add_patch(
        FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, lw=1.2, color=color)
    )
    if text:
        ax.text(*where, text, fontsize=7.5, ha="center", va="center", color=color)


def draw_tiled_loop() -> Figure:
    """One program of the forward kernel: its Q tile loaded once and kept on chip; the K and V
    blocks of its head streaming past, one pair per iteration; the scores S of the pair, which
    never leave the chip; and the running max m, sum l and accumulator acc, updated each time;
    the output written once, at the end."""
    fig = Figure(figsize=(10.5, 4.6))
    ax = fig.subplots()
    ax.set_xlim(0, 14.9)
    ax.set_ylim(0, 6.4)
    ax.axis("off")

    # memory (HBM) on the left, the chip on the right
    ax.add_patch(Rectangle((0.1, 0.1), 3.4, 6.2, facecolor=MEMORY, edgecolor="0.6", lw=1))
    ax.text(1.8, 6.05, "GPU memory (HBM)", ha="center", fontsize=9, weight="bold")
    ax.add_patch(Rectangle((3.9, 0.1), 10.9, 6.2, facecolor=ON_CHIP, edgecolor="0.6", lw=1))
    ax.text(
        9.35,
        6.05,
        "on chip: one program (registers and shared memory)",
        ha="center",
        fontsize=9,
        weight="bold",
    )

    _blocks(ax, 0.3, 5.1, 5, 2, K_COLOR, "K")
    _blocks(ax, 1.95, 5.1, 5, 2, V_COLOR, "V")
    ax.text(
        1.8,
        1.75,
        "iteration j reads\nblock j of K and of V\n(j = 2 highlighted)",
        ha="center",
        va="center",
        fontsize=7.5,
    )
    ax.add_patch(Rectangle((0.55, 0.35), 2.5, 0.7, facecolor="white", edgecolor=Q_COLOR, lw=1.2))
    ax.text(1.8, 0.7, "Q, O: (N × D) per head", ha="center", va="center", fontsize=7.5)

    # the resident Q tile
    ax.add_patch(Rectangle((4.2, 3.6), 1.5, 1.6, facecolor=Q_COLOR, alpha=0.85))
    ax.text(4.95, 4.4, "Q tile\nBLOCK_M × D", ha="center", va="center", fontsize=8, color="white")
    ax.text(4.95, 3.35, "loaded once,\nkept for every j", ha="center", va="top", fontsize=7.5)
    _arrow(ax, (2.1, 1.05), (4.25, 3.65), "Q tile, once", (3.75, 2.1), Q_COLOR)

    # the scores of this iteration
    ax.add_patch(Rectangle((6.5, 3.6), 1.6, 1.6, facecolor=S_COLOR, alpha=0.8))
    ax.text(
        7.3,
        4.4,
        "S = Q K$_j^T$\nBLOCK_M ×\nBLOCK_N",
        ha="center",
        va="center",
        fontsize=8,
        color="white",
    )
    ax.text(7.3, 3.35, "registers only:\nnever written out", ha="center", va="top", fontsize=7.5)
    _arrow(ax, (5.75, 4.4), (6.45, 4.4), color=Q_COLOR)
    _arrow(ax, (1.6, 3.9), (6.9, 5.25), "K$_j$", (4.3, 5.45), K_COLOR)
    _arrow(ax, (3.25, 3.85), (8.8, 1.7), "V$_j$", (6.2, 2.55), V_COLOR)

    # the state and its update
    ax.add_patch(
        FancyBboxPatch(
            (8.8, 1.05),
            5.8,
            4.55,
            boxstyle="round,pad=0.05",
            facecolor="white",
            edgecolor=STATE,
            lw=1.5,
        )
    )
    ax.text(
        11.7,
        5.35,
        "state per query row, updated for every j",
        ha="center",
        fontsize=8.5,
        color=STATE,
        weight="bold",
    )
    lines = [
        (r"$m_{\mathrm{new}} = \max(m,\ \mathrm{rowmax}(S)\cdot c)$", "new running max"),
        (r"$P = 2^{\,S\cdot c\ -\ m_{\mathrm{new}}}$", "probabilities"),
        (r"$\alpha = 2^{\,m\ -\ m_{\mathrm{new}}}$", "rescale factor"),
        (r"$l \leftarrow \alpha\, l + \mathrm{rowsum}(P)$", "running sum"),
        (r"$acc \leftarrow \alpha\, acc + P\, V_j$", "accumulator"),
        (r"$m \leftarrow m_{\mathrm{new}}$", ""),
    ]
    for i, (formula, what) in enumerate(lines):
        ax.text(9.05, 4.85 - i * 0.55, formula, fontsize=8.5, va="center")
        ax.text(14.45, 4.85 - i * 0.55, what, fontsize=7.5, va="center", ha="right", color="0.3")
    ax.text(
        9.05,
        1.45,
        r"$c = \log_2(e)\,/\,$√D;  start: $m = -\infty$, $l = 0$, $acc = 0$",
        fontsize=8,
        va="center",
        color="0.3",
    )
    _arrow(ax, (8.15, 4.4), (8.8, 4.4), color=S_COLOR)

    # the end
    ax.text(
        11.7,
        0.55,
        r"after the last block: $O = acc\, /\, l$, written once",
        ha="center",
        va="center",
        fontsize=8.5,
    )
    _arrow(ax, (8.9, 0.55), (3.1, 0.6), color=STATE)
    return fig


def draw_causal_blocks(tiles: int = 4, ratio: int = 2) -> Figure:
    """For `tiles` query tiles of BLOCK_M = ratio * BLOCK_N rows, the key blocks a program of the
    causal kernel visits without a mask (entirely before its tile), with the causal mask (on the
    diagonal), and never (after its tile)."""
    kinds = {"unmasked": PROGRAM[0], "diagonal: masked per row": PROGRAM[1], "skipped": MASKED}
    fig = Figure(figsize=(5.2, 3.6))
    ax = fig.subplots()
    for qm in range(tiles):
        for kn in range(tiles * ratio):
            kind = list(kinds)[0 if kn < qm * ratio else 1 if kn < (qm + 1) * ratio else 2]
            y = tiles - 1 - qm
            ax.add_patch(Rectangle((kn, y), 0.95, 0.95, color=kinds[kind], label=kind))
        ax.text(-0.2, tiles - 1 - qm + 0.47, f"tile {qm}", ha="right", va="center", fontsize=8)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(
        [unique[kind] for kind in kinds],
        list(kinds),
        loc="upper center",
        ncol=3,
        fontsize=8,
        bbox_to_anchor=(0.5, 1.16),
        frameon=False,
    )
    ax.set_xlim(-1.3, tiles * ratio)
    ax.set_ylim(0, tiles)
    ax.set_xlabel(
        f"key blocks of BLOCK_N rows (BLOCK_M = {ratio} · BLOCK_N)", fontsize=8, color=INK
    )
    ax.set_ylabel("query tiles of BLOCK_M rows", fontsize=8, color=INK)
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    return fig


DIAGRAMS = {
    "07_flash_attention": {"tiled_loop": draw_tiled_loop, "causal_blocks": draw_causal_blocks}
}
