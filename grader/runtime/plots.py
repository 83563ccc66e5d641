"""The plots the notebooks draw from the reader's own numbers: each function takes the data, draws
one figure and shows it, so a notebook cell holds the measurement and one call. matplotlib is
imported when a plot is drawn, not with the runtime. (Pictures that need no measurement are
committed SVGs beside the notebooks instead; the roofline has its own module.)"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from grader.runtime import recorded

# the styles of horizontal reference lines (a copy's bandwidth, a ridge), in the order given
REFERENCE_STYLES = ("--", ":", "-.")


@recorded.replayable("grader.runtime.plots:curves")
def curves(
    x: Sequence[float],
    ys: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    references: Mapping[str, float] | None = None,
    dashed: Sequence[str] = (),
    log_y: bool = False,
    from_zero: bool = False,
) -> None:
    """One marked line per entry of `ys` against `x` (log2 scale); the lines named in `dashed`
    are drawn grey and dashed, without markers (a model to compare with); `references` are
    horizontal grey lines (label: value), dashed, then dotted. `from_zero` starts the y axis
    at 0, `log_y` makes it logarithmic."""
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=(7, 4))
    for label, y in ys.items():
        line = {"ls": "--", "color": "gray"} if label in dashed else {"marker": "o"}
        ax.plot(x, list(y), label=label, **line)
    for (label, value), style in zip((references or {}).items(), REFERENCE_STYLES, strict=False):
        ax.axhline(value, color="gray", ls=style, lw=1, label=label)
    ax.set_xscale("log", base=2)
    if log_y:
        ax.set_yscale("log")
    if from_zero:
        ax.set_ylim(0, None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both" if log_y else "major")
    plt.show()


@recorded.replayable("grader.runtime.plots:bars")
def bars(
    values: Mapping[str, float],
    *,
    title: str,
    xlabel: str = "",
    ylabel: str = "",
    colors: Sequence[str] | None = None,
    references: Mapping[str, float] | None = None,
    horizontal: bool = False,
    size: tuple[float, float] = (7, 3.5),
) -> None:
    """One bar per entry of `values` (label: value), coloured by `colors` if given; horizontal
    bars run top to bottom in the order given. `references` are dashed grey lines."""
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=size)
    labels, heights = list(values), list(values.values())
    if horizontal:
        ax.barh(labels, heights, color=colors)
        ax.invert_yaxis()
        ax.grid(alpha=0.3, axis="x")
    else:
        ax.bar(labels, heights, color=colors)
    for label, value in (references or {}).items():
        ax.axhline(value, color="gray", ls="--", label=label)
    if references:
        ax.legend()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    plt.show()


@recorded.replayable("grader.runtime.plots:heatmap")
def heatmap(
    values: Sequence[Sequence[float]],
    columns: Sequence,
    rows: Sequence,
    *,
    xlabel: str,
    ylabel: str,
    title: str,
) -> None:
    """A table of numbers as colours, each written in its cell (NaN as n/a)."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 2.8))
    data = np.asarray(values, dtype=float)
    image = ax.imshow(data, cmap="viridis")
    for (i, j), value in np.ndenumerate(data):
        text = "n/a" if np.isnan(value) else f"{value:.0f}"
        ax.text(j, i, text, ha="center", va="center", color="white")
    ax.set_xticks(range(len(columns)), [str(c) for c in columns])
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.colorbar(image, ax=ax)
    plt.show()


@recorded.replayable("grader.runtime.plots:launch_orders")
def launch_orders(
    orders: Mapping[str, Sequence[tuple[int, int]]], num_pid_m: int, num_pid_n: int, wave: int
) -> None:
    """One panel per launch order (title: the (pid_m, pid_n) of each program id in turn): each
    tile of C coloured and numbered by the program that computes it, the first `wave` programs
    outlined, and the distinct row blocks of A and column blocks of B they read counted."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Rectangle

    fig, axes = plt.subplots(1, len(orders), figsize=(4.5 * len(orders), 4.5), squeeze=False)
    for ax, (name, order) in zip(axes[0], orders.items(), strict=True):
        grid = np.zeros((num_pid_m, num_pid_n))
        for pid, (m, n) in enumerate(order):
            grid[m, n] = pid
            color = "white" if pid < len(order) * 0.6 else "black"
            ax.text(n, m, str(pid), ha="center", va="center", fontsize=7, color=color)
            if pid < wave:
                ax.add_patch(Rectangle((n - 0.5, m - 0.5), 1, 1, fill=False, lw=2, ec="red"))
        ax.imshow(grid, cmap="viridis")
        rows = {m for m, _ in order[:wave]}
        cols = {n for _, n in order[:wave]}
        ax.set_title(
            f"{name}: first {wave} programs read\n{len(rows)} A blocks + {len(cols)} B blocks = "
            f"{len(rows) + len(cols)}",
            fontsize=9,
        )
        ax.set_xlabel("pid_n")
        ax.set_ylabel("pid_m")
    fig.tight_layout()
    plt.show()


@recorded.replayable("grader.runtime.plots:tile_tradeoff")
def tile_tradeoff(
    sides: Sequence[int],
    intensity: Mapping[str, Sequence[float]],
    shared_kb: Mapping[str, Sequence[float]],
    *,
    marked: tuple[float, float, str],
    ridges: Mapping[str, float],
    limit: tuple[float, str],
) -> None:
    """Two panels against the square tile side: the intensity of a tile per dtype, with one
    tile `marked` (x, y, label) and the `ridges` (label: FLOP/B); and its shared memory per dtype,
    with the `limit` (KB, label)."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, series in ((left, intensity), (right, shared_kb)):
        for name, y in series.items():
            ax.plot(sides, list(y), marker="o", label=name)
    x, y, label = marked
    left.scatter([x], [y], color="C0", marker="*", s=120, zorder=3, label=label)
    for (label, value), style in zip(ridges.items(), REFERENCE_STYLES, strict=False):
        left.axhline(value, color="gray", ls=style, lw=1, label=label)
    right.axhline(limit[0], color="red", ls="--", lw=1, label=limit[1])
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("square tile side T (BLOCK_M = BLOCK_N = T)")
        ax.set_xticks(sides, [str(t) for t in sides])
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    left.set_ylabel("FLOP per byte requested")
    left.set_title("Intensity of a tile: 2T^2 / (2T s) = T / s")
    right.set_ylabel("KB of shared memory")
    right.set_title("Its shared-memory bill")
    fig.tight_layout()
    plt.show()
