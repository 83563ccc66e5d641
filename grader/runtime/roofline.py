"""The roofline: measured ceilings (copy bandwidth, matmul rate per precision), arithmetic
intensity, lower-bound times, and the log-log plot with kernels placed on it."""

from __future__ import annotations

from dataclasses import dataclass, field

from grader.runtime import recorded, timing


@dataclass(frozen=True)
class Ceilings:
    """Peak rates of one device: bytes/s of memory traffic and FLOP/s per precision."""

    bandwidth: float
    flops: dict[str, float]
    source: str

    def ridge(self, precision: str = "fp16") -> float:
        """Intensity (FLOP/byte) above which a kernel is compute bound."""
        return self.flops[precision] / self.bandwidth

    def attainable(self, intensity: float, precision: str = "fp16") -> float:
        """The roofline: the best FLOP/s a kernel of this intensity can reach."""
        return min(self.flops[precision], intensity * self.bandwidth)

    def lower_bound_seconds(
        self, flops: float, bytes_moved: float, precision: str = "fp16"
    ) -> float:
        """No kernel doing this work beats the slower of its two floors."""
        return max(flops / self.flops[precision], bytes_moved / self.bandwidth)

    def bound(self, flops: float, bytes_moved: float, precision: str = "fp16") -> str:
        """'memory' or 'compute': which floor is higher."""
        return "compute" if intensity(flops, bytes_moved) >= self.ridge(precision) else "memory"


def datasheet_h100() -> Ceilings:
    """NVIDIA H100 SXM5 (NVIDIA H100 Tensor Core GPU datasheet, 2023): dense rates, without
    sparsity. Shown only where nothing can be measured, and labelled as a datasheet."""
    return Ceilings(
        3.35e12,
        {"fp16": 989e12, "bf16": 989e12, "tf32": 494e12, "fp32": 67e12},
        "NVIDIA H100 SXM datasheet (dense rates), not measured",
    )


def intensity(flops: float, bytes_moved: float) -> float:
    """Arithmetic intensity in FLOP per byte of memory traffic."""
    if bytes_moved <= 0:
        raise ValueError("bytes_moved must be positive")
    return flops / bytes_moved


@dataclass(frozen=True)
class Point:
    """One measured kernel: its work, its traffic and its time."""

    label: str
    flops: float
    bytes_moved: float
    seconds: float
    style: dict = field(default_factory=dict)

    @property
    def intensity(self) -> float:
        return intensity(self.flops, self.bytes_moved)

    @property
    def achieved(self) -> float:
        return self.flops / self.seconds


def measure_ceilings(
    *,
    copy_bytes: int = 1 << 30,
    matmul_n: int = 8192,
    precisions: tuple[str, ...] = ("fp16", "bf16", "tf32", "fp32"),
) -> Ceilings:
    """Measure copy bandwidth (bytes read + written) and matmul rate for each precision, now."""
    import torch

    from grader.runtime import perf

    timing.require_gpu("Measuring the roofline")
    bandwidth = timing.bench(perf.copy_baseline(copy_bytes)).per_second(copy_bytes)

    flops = {}
    low = {"fp16": torch.float16, "bf16": torch.bfloat16}  # tf32 and fp32 multiply float32
    previous = torch.backends.cuda.matmul.allow_tf32
    try:
        for p in precisions:
            torch.backends.cuda.matmul.allow_tf32 = p == "tf32"
            n = matmul_n if p != "fp32" else matmul_n // 2  # plain fp32 is ~15x slower
            dtype = low.get(p, torch.float32)
            a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
            flops[p] = timing.bench(lambda a=a, b=b: a @ b).per_second(2 * n**3)
            del a, b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    name = torch.cuda.get_device_name()
    return Ceilings(bandwidth, flops, f"measured on {name}")


def _separate(labels) -> None:
    """Move each label down, in steps of its own height, until it overlaps no label placed
    before it: kernels of similar intensity and speed (04, 05 and 07, say) stay readable."""
    if not labels:
        return
    figure = labels[0].figure
    placed = []
    for label in labels:
        for _ in range(len(labels)):
            box = label.get_window_extent()
            if not any(box.overlaps(other) for other in placed):
                break
            x, y = label.xyann
            label.xyann = (x, y - box.height * 72 / figure.dpi - 1)  # pixels to points
        placed.append(label.get_window_extent())


def plot(
    ceilings: Ceilings,
    points: list[Point] = (),
    *,
    precision: str = "fp16",
    ax=None,
    title: str | None = None,
):
    """Log-log roofline of `ceilings` with `points` placed on it; returns the matplotlib Axes."""
    import matplotlib.pyplot as plt
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    lo = min([0.05, *[p.intensity / 2 for p in points]])
    hi = max([4 * ceilings.ridge(precision), *[p.intensity * 2 for p in points]])
    x = np.geomspace(lo, hi, 200)
    for name, peak in sorted(ceilings.flops.items(), key=lambda kv: -kv[1]):
        y = np.minimum(peak, x * ceilings.bandwidth) / 1e12
        lw, alpha = (2.0, 1.0) if name == precision else (1.0, 0.45)
        ax.plot(x, y, lw=lw, alpha=alpha, label=f"{name} peak {peak / 1e12:.0f} TFLOP/s")
    ridge = ceilings.ridge(precision)
    ax.axvline(ridge, color="gray", ls=":", lw=1)
    ax.annotate(
        f"ridge {ridge:.0f} FLOP/B",
        (ridge, ceilings.flops[precision] / 1e12 / 8),
        rotation=90,
        va="bottom",
        ha="right",
        fontsize=8,
        color="gray",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    labels = []
    for p in sorted(points, key=lambda p: -p.achieved):  # the highest label first, others below
        ax.scatter([p.intensity], [p.achieved / 1e12], zorder=3, **({"s": 30} | p.style))
        right_edge = np.log(p.intensity / lo) > 0.75 * np.log(hi / lo)  # label to the left there
        labels.append(
            ax.annotate(
                p.label,
                (p.intensity, p.achieved / 1e12),
                textcoords="offset points",
                xytext=(-5 if right_edge else 5, 4),
                ha="right" if right_edge else "left",
                fontsize=8,
            )
        )
    _separate(labels)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title or f"Roofline: {ceilings.source}")
    memory = f"memory {ceilings.bandwidth / 1e12:.2f} TB/s"
    ax.text(0.99, 0.02, memory, transform=ax.transAxes, ha="right", fontsize=8)
    ax.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 0.06))
    ax.grid(True, which="both", alpha=0.2)
    return ax


@recorded.replayable("grader.runtime.roofline:show")
def show(
    ceilings: Ceilings,
    points: list[Point] = (),
    *,
    precision: str = "fp16",
    title: str | None = None,
    labels_up: bool = False,
) -> None:
    """`plot`, shown. `labels_up` turns the points' labels upwards and makes room above them, for
    points that crowd together on the flat part of the roof."""
    import matplotlib.pyplot as plt

    ax = plot(ceilings, points, precision=precision, title=title)
    if labels_up:
        labels = {p.label for p in points}
        for text in ax.texts:
            if text.get_text() in labels:
                text.set_rotation(60)
        ax.set_ylim(top=ceilings.flops[precision] / 1e12 * 30)
    plt.show()
