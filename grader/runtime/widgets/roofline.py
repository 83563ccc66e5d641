"""Roofline explorer: pick an op, a size and a dtype; read its FLOPs, bytes, intensity, whether it
is memory- or compute-bound, and its lower-bound time on a given roofline, with the point marked
on a small roofline plot.

The explorer holds no cost formulas of its own. The notebook passes its functions in:
`flops(op, shape)`, `bytes_moved(op, shape, dtype)` and `precision(op, dtype, tf32)` (which
compute ceiling bounds the op). What this module adds is the roofline arithmetic that
`grader.runtime.roofline.Ceilings` already provides, and the controls.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import ipywidgets as widgets

from grader.runtime import roofline, stubs

OPS = ("add", "softmax", "matmul", "attention_naive", "attention_tiled")
DTYPES = ("fp16", "bf16", "fp32")
SIZES = tuple(2**k for k in range(6, 16))  # 64 ... 32768
ATTENTION_BATCH_HEADS = (1, 16)  # (batch, heads) of the attention shapes


def shape_for(op: str, size: int, head_dim: int = 64) -> tuple[int, ...]:
    """The shape the explorer gives `op` at `size`: an N x N tensor for add and softmax, an
    N x N x N matmul, and attention over N positions with 16 heads of `head_dim`."""
    if op in ("add", "softmax"):
        return (size, size)
    if op == "matmul":
        return (size, size, size)
    if op in ("attention_naive", "attention_tiled"):
        return (*ATTENTION_BATCH_HEADS, size, head_dim)
    raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")


@dataclass(frozen=True)
class Estimate:
    """One op on one roofline: its work, its traffic, and the floors they set."""

    op: str
    shape: tuple[int, ...]
    dtype: str
    precision: str
    flops: float
    bytes_moved: float
    ceilings: roofline.Ceilings

    @property
    def intensity(self) -> float:
        return roofline.intensity(self.flops, self.bytes_moved)

    @property
    def ridge(self) -> float:
        return self.ceilings.ridge(self.precision)

    @property
    def bound(self) -> str:
        return self.ceilings.bound(self.flops, self.bytes_moved, self.precision)

    @property
    def memory_seconds(self) -> float:
        return self.bytes_moved / self.ceilings.bandwidth

    @property
    def compute_seconds(self) -> float:
        return self.flops / self.ceilings.flops[self.precision]

    @property
    def seconds(self) -> float:
        return self.ceilings.lower_bound_seconds(self.flops, self.bytes_moved, self.precision)

    @property
    def attainable(self) -> float:
        return self.ceilings.attainable(self.intensity, self.precision)


def estimate(
    ceilings: roofline.Ceilings,
    flops: Callable,
    bytes_moved: Callable,
    precision: Callable,
    op: str,
    shape: tuple[int, ...],
    dtype: str,
    tf32: bool = False,
) -> Estimate:
    """Count `op` on `shape` with the given functions and place it on `ceilings`."""
    chosen = precision(op, dtype, tf32)
    if chosen not in ceilings.flops:
        raise ValueError(
            f"the ceilings have no {chosen!r} rate; they have {sorted(ceilings.flops)}"
        )
    return Estimate(
        op, tuple(shape), dtype, chosen, flops(op, shape), bytes_moved(op, shape, dtype), ceilings
    )


def si(value: float, unit: str) -> str:
    """1.5e9, 'B' -> '1.50 GB' (decimal prefixes, as bandwidths are quoted)."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def duration(seconds: float) -> str:
    """0.00012 -> '120 us'."""
    for factor, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if seconds >= factor:
            return f"{seconds / factor:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def describe(e: Estimate) -> list[tuple[str, str]]:
    """The readout as (label, value) rows."""
    side = "at or above" if e.bound == "compute" else "below"
    return [
        ("shape", " x ".join(str(s) for s in e.shape) + f" ({e.dtype})"),
        ("FLOPs", si(e.flops, "FLOP")),
        ("bytes moved", si(e.bytes_moved, "B")),
        ("intensity", f"{e.intensity:.4g} FLOP/B"),
        ("ridge", f"{e.ridge:.4g} FLOP/B ({e.precision} peak / bandwidth)"),
        ("bound", f"{e.bound}-bound: the intensity is {side} the ridge"),
        ("memory floor", f"{duration(e.memory_seconds)} (bytes / bandwidth)"),
        ("compute floor", f"{duration(e.compute_seconds)} (FLOPs / {e.precision} peak)"),
        ("lower bound", f"{duration(e.seconds)}, at most {si(e.attainable, 'FLOP/s')}"),
    ]


def _html(rows: list[tuple[str, str]], source: str) -> str:
    body = "".join(
        f"<tr><td style='padding-right:1em'><b>{label}</b></td><td>{value}</td></tr>"
        for label, value in rows
    )
    return f"<table>{body}</table><small>roofline: {source}</small>"


class Explorer(widgets.VBox):
    """The controls, the readout and the plot; `estimate` holds the current Estimate (or None
    when the functions raised, and then `error` says why)."""

    def __init__(
        self,
        ceilings: roofline.Ceilings,
        flops: Callable,
        bytes_moved: Callable,
        precision: Callable,
        *,
        head_dim: int = 64,
    ):
        self.ceilings = ceilings
        self.functions = (flops, bytes_moved, precision)
        self.head_dim = head_dim
        self.estimate: Estimate | None = None
        self.error: str | None = None
        style = {"description_width": "5em"}
        self.op = widgets.Dropdown(options=OPS, value="matmul", description="op", style=style)
        self.size = widgets.SelectionSlider(
            options=SIZES, value=1024, description="size N", style=style
        )
        self.dtype = widgets.Dropdown(
            options=DTYPES, value="fp16", description="dtype", style=style
        )
        self.tf32 = widgets.Checkbox(value=False, description="allow TF32 (fp32 matmul)")
        self.readout = widgets.HTML()
        self.plot = widgets.Image(format="png", layout=widgets.Layout(width="460px"))
        for control in (self.op, self.size, self.dtype, self.tf32):
            control.observe(lambda _change: self.update(), names="value")
        super().__init__(
            [
                widgets.HBox([self.op, self.dtype]),
                widgets.HBox([self.size, self.tf32]),
                widgets.HBox([self.readout, self.plot]),
            ]
        )
        self.update()

    @property
    def shape(self) -> tuple[int, ...]:
        return shape_for(self.op.value, self.size.value, self.head_dim)

    def update(self) -> None:
        """Recount and redraw for the current controls."""
        flops, bytes_moved, precision = self.functions
        try:
            self.estimate = estimate(
                self.ceilings,
                flops,
                bytes_moved,
                precision,
                self.op.value,
                self.shape,
                self.dtype.value,
                self.tf32.value,
            )
            self.error = None
        except Exception as exc:  # the student's functions: say what went wrong, keep going
            self.estimate = None
            self.error = stubs.explain(exc, "a counting function") or (
                f"{type(exc).__name__}: {exc}"
            )
            self.readout.value = f"<b>Cannot count {self.op.value}:</b> {self.error}"
            self.plot.value = b""
            return
        self.readout.value = _html(describe(self.estimate), self.ceilings.source)
        self.plot.value = self.render()

    def text(self) -> str:
        """The readout as plain text (for printing where widgets are not shown)."""
        if self.estimate is None:
            return f"Cannot count {self.op.value}: {self.error}"
        return "\n".join(f"{label:>14}: {value}" for label, value in describe(self.estimate))

    def render(self) -> bytes:
        """A PNG of the roofline with the current op at its lower-bound rate."""
        from matplotlib.figure import Figure

        e = self.estimate
        fig = Figure(figsize=(5.2, 3.4), dpi=90)
        ax = fig.subplots()
        point = roofline.Point(
            f"{e.op} N={self.size.value}",
            e.flops,
            e.bytes_moved,
            e.seconds,
            style={"marker": "*", "s": 140, "color": "crimson"},
        )
        roofline.plot(self.ceilings, [point], precision=e.precision, ax=ax)
        ax.set_title(f"best case on the roofline: {self.ceilings.source}", fontsize=8)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        return buffer.getvalue()


def explore(
    ceilings: roofline.Ceilings,
    flops: Callable,
    bytes_moved: Callable,
    precision: Callable,
    *,
    head_dim: int = 64,
) -> Explorer:
    """The roofline explorer on `ceilings`, counting with the given functions; display it."""
    return Explorer(ceilings, flops, bytes_moved, precision, head_dim=head_dim)
