"""Step through the online softmax of one row, chunk by chunk: the running maximum m, the running
denominator d (the sum of exp(x - m) over the elements seen so far; FlashAttention calls it ell),
the factor that rescales the old d when the maximum grows, and the partial output (the softmax
of the prefix seen so far).

`steps(row, chunk)` computes the states (numpy, float64) and is what the tests check;
`explore(row, chunk)` returns an ipywidgets slider with a plot of the chosen step;
`show_all(states)` plots every step at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Step:
    """The state after the chunk row[start:stop] has been folded in."""

    index: int
    start: int
    stop: int
    chunk_max: float  # max of this chunk alone
    m: float  # running maximum after this chunk
    alpha: float  # exp(m_before - m): what the old d was multiplied by (0 before any finite max)
    d: float  # running denominator: the sum of exp(x - m) over row[:stop]
    partial: np.ndarray  # exp(row[:stop] - m) / d, NaN beyond stop: the softmax of the prefix


def _scale(m_old: float, m_new: float) -> float:
    """exp(m_old - m_new), with the empty state's -inf maximum scaling to 0 instead of NaN."""
    return 0.0 if m_old == -np.inf else float(np.exp(m_old - m_new))


def steps(row, chunk: int) -> list[Step]:
    """The online-softmax states of `row` folded in `chunk` elements at a time."""
    x = np.asarray(row, dtype=np.float64).reshape(-1)
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of elements, got {chunk}")
    if x.size == 0:
        raise ValueError("the row is empty")
    if np.isnan(x).any() or (x == np.inf).any():
        raise ValueError("the row must hold finite numbers or -inf")
    m, d = -np.inf, 0.0
    out = []
    for index, start in enumerate(range(0, x.size, chunk)):
        stop = min(start + chunk, x.size)
        part = x[start:stop]
        chunk_max = float(part.max())
        m_new = max(m, chunk_max)
        alpha = _scale(m, m_new)
        fresh = 0.0 if m_new == -np.inf else float(np.exp(part - m_new).sum())
        d = d * alpha + fresh
        m = m_new
        partial = np.full(x.size, np.nan)
        if d > 0:
            partial[:stop] = np.exp(x[:stop] - m) / d
        out.append(Step(index, start, stop, chunk_max, m, alpha, d, partial))
    return out


def describe(step: Step) -> str:
    """One line for a step, as the widget prints it."""
    grew = "the maximum grew" if step.alpha < 1 else "the maximum held"
    return (
        f"chunk {step.index}: columns {step.start}..{step.stop - 1}, chunk max "
        f"{step.chunk_max:.4g}; m = {step.m:.4g}; old d scaled by alpha = {step.alpha:.4g} "
        f"({grew}); d = {step.d:.6g}"
    )


def draw(row, chunk: int, index: int, ax=None):
    """Plot the row and the partial output after chunk `index`; returns the Axes pair."""
    import matplotlib.pyplot as plt

    x = np.asarray(row, dtype=np.float64).reshape(-1)
    all_steps = steps(x, chunk)
    step = all_steps[index]
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    left, right = ax
    cols = np.arange(x.size)
    seen = cols < step.stop
    shown = np.where(np.isfinite(x), x, np.nan)
    left.bar(cols[seen], shown[seen], color="C0", width=0.9, label="seen")
    if not seen.all():  # after the last chunk nothing is unread: no empty bars, no legend entry
        left.bar(cols[~seen], shown[~seen], color="lightgray", width=0.9, label="not yet read")
    left.axhline(step.m, color="C3", lw=1.5, label=f"running max m = {step.m:.3g}")
    left.axvspan(step.start - 0.5, step.stop - 0.5, color="C1", alpha=0.15, label="this chunk")
    left.set_title("the row, read chunk by chunk", fontsize=9)
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    final = all_steps[-1].partial
    right.bar(cols, final, color="lightgray", width=0.9, label="final softmax")
    right.bar(
        cols[seen],
        step.partial[seen],
        color="C2",
        width=0.9,
        alpha=0.8,
        label="softmax of the prefix",
    )
    right.set_title(
        f"partial output after chunk {index}: exp(x - m) / d, d = {step.d:.4g}", fontsize=9
    )
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    for a in ax:
        a.set_xlabel("column")
    return ax


def show_all(states: list[Step]) -> None:
    """Every step at once: the running m and d against the columns read, and each step's partial
    output (earlier ones shrink when m grows)."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3))
    left.step([s.stop for s in states], [s.m for s in states], where="post", label="m")
    left.step([s.stop for s in states], [s.d for s in states], where="post", label="d")
    left.set_xlabel("columns read")
    left.legend()
    left.set_title("the running state", fontsize=9)
    for s in states:
        right.plot(s.partial, marker=".", lw=0.8, label=f"after {s.stop}")
    right.set_xlabel("column")
    right.set_title("partial outputs: earlier ones shrink when m grows", fontsize=9)
    right.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    plt.show()


def explore(row, chunk: int):
    """A slider over the chunks of `row`; each position shows m, d, alpha and the partial output."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    x = np.asarray(row, dtype=np.float64).reshape(-1)
    all_steps = steps(x, chunk)
    slider = widgets.IntSlider(
        value=0, min=0, max=len(all_steps) - 1, description="chunk", continuous_update=False
    )
    text = widgets.HTML()
    output = widgets.Output()

    def show(change=None):
        step = all_steps[slider.value]
        text.value = f"<code>{describe(step)}</code>"
        output.clear_output(wait=True)
        with output:
            draw(x, chunk, slider.value)
            plt.tight_layout()
            plt.show()

    slider.observe(show, names="value")
    show()
    return widgets.VBox([slider, text, output])
