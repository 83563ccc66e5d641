"""04 · The matmul ladder: which tiles of C the first programs compute in row-major and in grouped
launch order (matmul_kernel's `tl.swizzle2d`), and the blocks of A and B those programs read."""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from grader.authoring.diagrams._draw import INK, MASKED, PROGRAM, box, canvas, limits

NUM_PID_M = NUM_PID_N = 6  # tiles of C along each side
GROUP_M = 3
WAVE = 9  # programs running at once, here
A_COLOR, B_COLOR, C_COLOR = PROGRAM[0], PROGRAM[2], PROGRAM[1]
GREY = "#777777"


def launch_order(num_pid_m: int, num_pid_n: int, group_m: int) -> list[tuple[int, int]]:
    """(pid_m, pid_n) of each program id, as tl.swizzle2d maps the row-major ids: groups of
    `group_m` rows of tiles (the last one shorter), each walked down its columns in turn."""
    order = []
    for first in range(0, num_pid_m, group_m):
        rows = min(group_m, num_pid_m - first)
        order += [(first + r, c) for c in range(num_pid_n) for r in range(rows)]
    return order


def _panel(ax: Axes, group_m: int, title: str) -> None:
    order = launch_order(NUM_PID_M, NUM_PID_N, group_m)
    wave = order[:WAVE]
    rows, cols = {m for m, _ in wave}, {n for _, n in wave}
    for pid, (m, n) in enumerate(order):  # C, to the right of A and below B
        running = pid < WAVE
        box(ax, n, m, str(pid), C_COLOR if running else "#f3f3f3", ink="white" if running else GREY)
    for m in range(NUM_PID_M):  # A's row blocks, left of C
        used = m in rows
        box(ax, -1.6, m, f"A{m}", A_COLOR if used else MASKED, ink="white" if used else GREY)
    for n in range(NUM_PID_N):  # B's column blocks, above C
        used = n in cols
        box(ax, n, -1.6, f"B{n}", B_COLOR if used else MASKED, ink="white" if used else GREY)
    ax.text(NUM_PID_N / 2, -2.2, title, ha="center", va="bottom", fontsize=10)
    ax.text(
        -1.1,
        NUM_PID_M + 0.3,
        f"programs 0..{WAVE - 1} read {len(rows)} blocks of A + {len(cols)} of B "
        f"= {len(rows) + len(cols)}",
        ha="left",
        va="top",
        fontsize=9,
        color=INK,
    )
    limits(ax, -1.9, NUM_PID_N + 0.3, -3.2, NUM_PID_M + 1.2)


def draw_launch_order() -> Figure:
    """Both orders side by side, with the first WAVE programs and what they read highlighted."""
    figure, (left, right) = canvas(10, 5.2, columns=2)
    _panel(left, 1, "row-major (GROUP_M = 1)")
    _panel(right, GROUP_M, f"grouped (GROUP_M = {GROUP_M})")
    figure.text(
        0.5,
        0.1,
        "tile (pid_m, pid_n) of C needs row block A[pid_m] and column block "
        "B[pid_n]; the number in a tile is the program id that computes it",
        ha="center",
        fontsize=9,
        color=INK,
    )
    return figure


DIAGRAMS = {"04_matmul": {"launch_order": draw_launch_order}}
