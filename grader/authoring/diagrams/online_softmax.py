"""06 · Online softmax: two partial states (m, d) of a row, each rescaled to the common maximum by
exp(m_i - m) and added, give the state of the whole row."""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from grader.authoring.diagrams._draw import INK, PROGRAM, box, canvas, limits

A = (1.0, 3.0, 0.5, 2.0)  # two parts of one row
B = (4.0, 1.5, 2.5, 0.0)
A_COLOR, B_COLOR, MERGED = PROGRAM[0], PROGRAM[2], PROGRAM[1]
ARROW = {"arrowstyle": "->", "color": INK, "lw": 1.0}


def state(part: tuple[float, ...]) -> tuple[float, float]:
    """(max, sum of exp(x - max)) of a part of a row."""
    m = max(part)
    return m, sum(math.exp(x - m) for x in part)


def draw_merge() -> Figure:
    """Row -> two states -> each rescaled by exp(m_i - m) -> their sum, the row's state."""
    (m_a, d_a), (m_b, d_b) = state(A), state(B)
    m = max(m_a, m_b)
    alpha_a, alpha_b = math.exp(m_a - m), math.exp(m_b - m)
    whole_m, whole_d = state(A + B)
    figure, (ax,) = canvas(9, 6)
    n = len(A)
    for i, x in enumerate(A):
        box(ax, i, 0, f"{x:g}", A_COLOR)
    for i, x in enumerate(B):
        box(ax, n + 1 + i, 0, f"{x:g}", B_COLOR)
    ax.text(n / 2, -0.2, "part A of the row", ha="center", va="bottom", fontsize=9, color=A_COLOR)
    ax.text(n + 1 + n / 2, -0.2, "part B", ha="center", va="bottom", fontsize=9, color=B_COLOR)
    centre_a, centre_b, centre = n / 2, n + 1 + n / 2, n + 0.5
    for x, name, mi, di, color in (
        (centre_a, "A", m_a, d_a, A_COLOR),
        (centre_b, "B", m_b, d_b, B_COLOR),
    ):
        ax.annotate("", (x, 2.0), (x, 1.1), arrowprops=ARROW)
        box(ax, x - 2.2, 2.0, "", "white", width=4.4, height=1.3, edge=color)
        ax.text(
            x,
            2.65,
            f"$m_{name} = \\max {name} = {mi:g}$\n"
            f"$d_{name} = \\sum_{{x \\in {name}}} e^{{x - m_{name}}} = {di:.3f}$",
            ha="center",
            va="center",
            fontsize=9,
            color=INK,
        )
    ax.text(centre, 3.85, f"$m = \\max(m_A, m_B) = {m:g}$", ha="center", va="center", fontsize=10)
    rescaled = []
    for x, name, alpha, di, color in (
        (centre_a, "A", alpha_a, d_a, A_COLOR),
        (centre_b, "B", alpha_b, d_b, B_COLOR),
    ):
        ax.annotate("", (x, 4.9), (x, 3.4), arrowprops=ARROW)
        ax.text(
            x + (-0.15 if name == "A" else 0.15),
            4.4,
            f"$\\times\\, e^{{m_{name} - m}}$",
            ha="right" if name == "A" else "left",
            va="center",
            fontsize=10,
            color=INK,
        )
        box(ax, x - 2.2, 4.9, "", "white", width=4.4, height=0.9, edge=color)
        rescaled.append(di * alpha)
        ax.text(
            x,
            5.35,
            f"$d_{name}\\, e^{{m_{name} - m}} = {di:.3f} \\cdot {alpha:.3f} = {di * alpha:.3f}$",
            ha="center",
            va="center",
            fontsize=9,
            color=INK,
        )
    ax.annotate("", (centre - 1.0, 6.5), (centre_a, 5.8), arrowprops=ARROW)
    ax.annotate("", (centre + 1.0, 6.5), (centre_b, 5.8), arrowprops=ARROW)
    ax.text(centre, 6.15, "+", ha="center", va="center", fontsize=14, color=INK)
    box(ax, centre - 3.6, 6.5, "", "white", width=7.2, height=1.3, edge=MERGED)
    ax.text(
        centre,
        7.15,
        f"merged: $m = {m:g}$,  $d = {rescaled[0]:.3f} + {rescaled[1]:.3f} = "
        f"{sum(rescaled):.3f}$\n"
        f"= the state of A and B together: $m = {whole_m:g}$, $d = {whole_d:.3f}$",
        ha="center",
        va="center",
        fontsize=9.5,
        color=INK,
    )
    limits(ax, -0.5, 2 * n + 1.5, -0.9, 8.0)
    return figure


DIAGRAMS = {"06_online_softmax": {"merge": draw_merge}}
