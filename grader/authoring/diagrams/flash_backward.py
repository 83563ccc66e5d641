"""10 · FlashAttention backward: what each kernel reads, writes and rebuilds on chip; and the
blocks of the causal score matrix that a program of the dK/dV kernel, and of the dQ kernel,
visits."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Polygon, Rectangle

from grader.authoring.diagrams._draw import INK, MASKED, PROGRAM, box, canvas, limits

READ, WRITTEN, ON_CHIP = PROGRAM[0], PROGRAM[1], PROGRAM[3]
UNUSED = "#f3f3f3"
GREY = "#777777"
KERNELS = (  # (what it computes, its kernel, its programs), in launch order
    ("07's forward", "attn_fwd_lse_kernel", "one program per\nquery block"),
    ("δ", "attn_bwd_delta_kernel", "one program per\nBLOCK_M rows"),
    ("dK, dV", "attn_bwd_dkdv_kernel", "one program per\nkey block"),
    ("dQ", "attn_bwd_dq_kernel", "one program per\nquery block"),
)
KEPT, STREAMED = "read: one tile,\nkept", "read: streamed,\na block a step"
ROWS_KEPT, ONCE = "read: the tile's\nrows, kept", "written once,\nat the end"
BHND = "(B, H, N, D)"
TENSORS = (  # (name, shape, what each kernel of KERNELS does with it; "" for nothing)
    ("Q", BHND, (KEPT, "", STREAMED, KEPT)),
    ("K, V", BHND, (STREAMED, "", "read: one block,\nkept", STREAMED)),
    ("dO", BHND, ("", "read", "read: streamed\nwith Q", KEPT)),
    ("O", BHND, ("written", "read", "", "")),
    ("lse", "(B, H, N) float32", ("written", "", "read: streamed", ROWS_KEPT)),
    ("δ", "(B, H, N) float32", ("", "written", "read: streamed", ROWS_KEPT)),
    ("dK, dV", BHND, ("", "", ONCE, "")),
    ("dQ", BHND, ("", "", "", ONCE)),
)
# the tiles of the N x N matrices each kernel rebuilds in registers
TILES = ("S, P: tiles of\nBLOCK_M × BLOCK_N", "", "Pᵀ, dPᵀ, dSᵀ: tiles of\nBLOCK_N × BLOCK_M")
TILES += ("P, dP, dS: tiles of\nBLOCK_M × BLOCK_N",)


def draw_dataflow() -> Figure:
    """One row per tensor in GPU memory, one column per kernel in launch order: what the kernel
    reads and writes; and last, the N x N matrices that no kernel stores, whose tiles the forward
    and both gradient kernels rebuild on chip."""
    label_w, col_w, row_h = 3.3, 2.7, 0.7
    figure, (ax,) = canvas(10.5, 6.8)
    for c, (what, kernel, programs) in enumerate(KERNELS):
        x, ink = label_w + (c + 0.5) * col_w, GREY if c == 0 else INK
        ax.text(x, -1.1, what, ha="center", fontsize=10, weight="bold", color=ink)
        ax.text(x, -0.75, kernel, ha="center", fontsize=7, family="DejaVu Sans Mono", color=ink)
        ax.text(x, -0.1, programs, ha="center", fontsize=7.5, color=ink)
    left, right = label_w + col_w + 0.1, label_w + len(KERNELS) * col_w - 0.1
    ax.plot([left, left, right, right], [-1.3, -1.45, -1.45, -1.3], color=INK, lw=0.8)
    ax.text(
        (left + right) / 2,
        -1.55,
        "the backward: three launches, in this order",
        ha="center",
        fontsize=8.5,
        color=INK,
    )
    for r, (name, shape, uses) in enumerate(TENSORS):
        y = r * row_h + row_h / 2
        ax.text(0, y, name, va="center", fontsize=10, weight="bold", color=INK)
        ax.text(1.25, y, shape, va="center", fontsize=7.5, color=INK)
        for c, use in enumerate(uses):
            color = UNUSED if not use else READ if use.startswith("read") else WRITTEN
            box(ax, label_w + c * col_w, r * row_h, use, color, width=col_w, height=row_h)
    top = len(TENSORS) * row_h + 0.35
    ax.text(0, top + row_h / 2, "S, P, dP, dS", va="center", fontsize=10, weight="bold", color=INK)
    ax.text(
        0,
        top + row_h + 0.1,
        "(N × N) per head:\nnever in memory",
        va="top",
        fontsize=7.5,
        color=INK,
    )
    for c, tiles in enumerate(TILES):
        color = ON_CHIP if tiles else UNUSED
        box(ax, label_w + c * col_w, top, tiles, color, width=col_w, height=1.4 * row_h)
    for y, text in ((len(TENSORS) * row_h / 2, "in GPU memory"), (top + 0.7 * row_h, "on chip")):
        ax.text(
            label_w - 0.15, y, text, rotation=90, ha="right", va="center", fontsize=8, color=GREY
        )
    x = label_w
    legend = {"read": READ, "written": WRITTEN, "rebuilt in registers, never written": ON_CHIP}
    for text, color in legend.items():
        ax.add_patch(Rectangle((x, -2.25), 0.3, 0.3, color=color))
        ax.text(x + 0.4, -2.1, text, va="center", fontsize=8, color=INK)
        x += 0.6 + 0.13 * len(text)
    limits(ax, -0.1, label_w + len(KERNELS) * col_w + 0.1, -2.5, top + 1.4 * row_h + 0.1)
    return figure


HIDDEN = {"facecolor": "white", "alpha": 0.6, "edgecolor": "none"}  # key after query: -inf
PAST_N = {"facecolor": "white", "edgecolor": GREY, "lw": 0, "hatch": "///"}
LOOP = {"arrowstyle": "-|>", "color": "white", "lw": 2.0, "mutation_scale": 14}
NO_MASK, SKIPPED = "visited, MASKED = False", "skipped: never loaded"
WITH_MASK = "visited, MASKED = True:\nthe diagonal, or past N"
COLOR = {NO_MASK: READ, WITH_MASK: WRITTEN, SKIPPED: MASKED}
LEGEND = (  # (text, the patches drawn over each other for its key)
    (NO_MASK, [{"color": READ}]),
    (WITH_MASK, [{"color": WRITTEN}]),
    ("pairs the mask hides:\nkey after query (-inf)", [{"color": WRITTEN}, HIDDEN]),
    (SKIPPED, [{"color": MASKED}]),
    ("past N", [PAST_N]),
)


def _causal_loop(by_key: bool, labels: tuple[str, str, str, str], note: str) -> Figure:
    """Causal attention's score matrix of one head, queries down and keys across, in units of
    the block one loop step loads, N units long; programs own 2 units, of keys (`by_key`) or of
    queries. The blocks each program visits without a mask, with one (MASKED: a block on the
    diagonal, or a loop step past N) and never; the pairs the mask hides; program 1 outlined and
    its loop drawn. `labels`: the title, the axes' blocks, what names a program."""
    n, ratio, program = 7.5, 2, 1
    side = ratio * int(-(-n // ratio))
    figure, (ax,) = canvas(9.5, 6.2)
    for p in range(side // ratio):
        for step in range(side):
            x0, y0 = (p * ratio, step) if by_key else (step, p * ratio)
            x1, y1 = (x0 + ratio, y0 + 1) if by_key else (x0 + 1, y0 + ratio)
            kind = SKIPPED if x0 >= y1 else WITH_MASK if x1 > y0 or step + 1 > n else NO_MASK
            cell = Rectangle(
                (x0, y0), min(x1, n) - x0, min(y1, n) - y0, facecolor=COLOR[kind], edgecolor="white"
            )
            ax.add_patch(cell)
            if kind == WITH_MASK:
                ax.add_patch(Polygon([(0, 0), (side, 0), (side, side)], **HIDDEN))
                ax.patches[-1].set_clip_path(cell)
    ax.add_patch(Rectangle((n, 0), side - n, side, **PAST_N))
    ax.add_patch(Rectangle((0, n), n, side - n, **PAST_N))
    lo, middle = program * ratio, program * ratio + ratio / 2
    strip = ((lo, 0), ratio, side) if by_key else ((0, lo), side, ratio)
    ax.add_patch(Rectangle(*strip, facecolor="none", edgecolor=INK, lw=2.4))
    if by_key:  # from the key block's first row down to N
        ax.annotate("", (middle, n - 0.05), (middle, lo + 0.05), arrowprops=LOOP)
    else:  # from key 0 to the end of the query block's diagonal
        ax.annotate("", (lo + ratio - 0.05, middle), (0.05, middle), arrowprops=LOOP)
    title, keys, queries, name = labels
    for p in range(side // ratio):
        centre = p * ratio + ratio / 2
        if by_key:
            ax.text(centre, -0.1, f"{name} {p}", ha="center", va="bottom", fontsize=8, color=INK)
        else:
            ax.text(-0.15, centre, f"{name} {p}", ha="right", va="center", fontsize=8, color=INK)
    ax.text(0, -1.2, title, fontsize=10, weight="bold", color=INK)
    ax.text(0, -0.7, f"keys →   {keys}", fontsize=8.5, color=INK)
    ax.text(
        -0.4 if by_key else -1.2,
        0,
        f"queries ↓   {queries}",
        rotation=90,
        ha="right",
        va="top",
        fontsize=8.5,
        color=INK,
    )
    x, y = side + 0.6, 0.2
    for text, layers in LEGEND:
        for style in layers:
            ax.add_patch(Rectangle((x, y), 0.45, 0.45, **style))
        ax.text(x + 0.65, y + 0.22, text, va="center", fontsize=8, color=INK)
        y += 0.95
    ax.text(x, y + 0.2, note, va="top", fontsize=8, color=INK)
    limits(ax, -1.6, side + 5.6, -1.5, side + 0.1)
    return figure


def draw_dkdv_loop() -> Figure:
    """attn_bwd_dkdv_causal_kernel: a program per key block, walking down the query blocks from
    its own first row."""
    note = (
        "The outlined program keeps the K\nand V of its keys, walks down the\nquery blocks from "
        "start_n (the\narrow) and stores dK and dV once.\nQueries before start_n never\nsee its "
        "keys. Without the causal\nmask every block is visited, and\nonly the last, ragged query "
        "block\nis masked."
    )
    axes = ("key blocks of BLOCK_N = 2 · BLOCK_M here", "query blocks of BLOCK_M")
    return _causal_loop(
        True, ("Causal dK, dV: attn_bwd_dkdv_causal_kernel", *axes, "program"), note
    )


def draw_dq_loop() -> Figure:
    """attn_bwd_dq_kernel with CAUSAL: a program per query block, walking the key blocks from 0
    to the end of its diagonal."""
    note = (
        "The outlined program keeps the Q,\ndO, lse and δ of its rows, walks\nthe key blocks "
        "from 0 to the end\nof its diagonal (the arrow) and\nstores dQ once. Keys after its "
        "rows\nare never loaded."
    )
    axes = ("key blocks of BLOCK_N", "query blocks of BLOCK_M = 2 · BLOCK_N here")
    return _causal_loop(
        False, ("Causal dQ: attn_bwd_dq_kernel, CAUSAL = True", *axes, "tile"), note
    )


DIAGRAMS = {
    "10_flash_backward": {
        "dataflow": draw_dataflow,
        "dkdv_loop": draw_dkdv_loop,
        "dq_loop": draw_dq_loop,
    }
}
