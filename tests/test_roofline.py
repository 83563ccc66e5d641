import matplotlib
import pytest

from grader.runtime import device, roofline, timing

matplotlib.use("Agg")

CEIL = roofline.Ceilings(bandwidth=2e12, flops={"fp16": 600e12, "fp32": 50e12}, source="test")


def test_intensity_ridge_and_bound():
    assert roofline.intensity(100, 50) == 2
    assert CEIL.ridge("fp16") == 300
    assert CEIL.bound(flops=2 * 4096**3, bytes_moved=3 * 2 * 4096**2) == "compute"
    n = 1 << 20
    assert CEIL.bound(flops=n, bytes_moved=3 * 4 * n, precision="fp32") == "memory"
    with pytest.raises(ValueError):
        roofline.intensity(1, 0)


def test_attainable_and_lower_bound():
    assert CEIL.attainable(1.0) == 2e12
    assert CEIL.attainable(1e6) == 600e12
    assert CEIL.lower_bound_seconds(flops=0, bytes_moved=2e9) == pytest.approx(1e-3)
    assert CEIL.lower_bound_seconds(flops=600e12, bytes_moved=1) == pytest.approx(1.0)


def test_datasheet_is_labelled_as_such():
    d = roofline.datasheet_h100()
    assert d.bandwidth == 3.35e12 and d.flops["fp16"] == 989e12
    assert "datasheet" in d.source and "not measured" in d.source
    assert 290 < d.ridge("fp16") < 300


def test_plot_places_points():
    points = [roofline.Point("add", 1e6, 12e6, 1e-5), roofline.Point("mm", 2e12, 1e8, 4e-3)]
    ax = roofline.plot(CEIL, points)
    assert len(ax.collections) == 2
    assert {t.get_text() for t in ax.texts} >= {"add", "mm"}
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


def test_labels_of_close_points_do_not_overlap():
    # three kernels of nearly the same intensity and speed, as 04, 05 and 07 are on an H100
    points = [
        roofline.Point("05 autotuned", 2.75e12, 1.0e9, 4.3e-3),
        roofline.Point("04 matmul v3", 2.7e12, 1.0e9, 4.5e-3),
        roofline.Point("07 attention", 2.0e12, 1.0e9, 4.4e-3),
        roofline.Point("02 add", 1e6, 12e6, 1e-5),
    ]
    ax = roofline.plot(CEIL, points)
    renderer = ax.figure.canvas.get_renderer()
    boxes = {
        t.get_text(): t.get_window_extent(renderer)
        for t in ax.texts
        if t.get_text() in {p.label for p in points}
    }
    assert len(boxes) == 4
    names = sorted(boxes)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not boxes[a].overlaps(boxes[b]), f"the labels {a!r} and {b!r} overlap"
    figure = ax.figure.get_window_extent(renderer)
    assert all(box.x1 <= figure.x1 for box in boxes.values()), "a label runs off the figure"


@pytest.mark.skipif(device.current().is_gpu, reason="checks interpreter mode")
def test_measuring_needs_a_gpu():
    with pytest.raises(timing.TimingUnavailable, match="Measuring the roofline needs a CUDA GPU"):
        roofline.measure_ceilings()


@pytest.mark.gpu
def test_measured_ceilings_are_plausible():
    c = roofline.measure_ceilings(copy_bytes=1 << 29, matmul_n=4096)
    assert 0.3e12 < c.bandwidth < 10e12
    assert c.flops["fp16"] > c.flops["tf32"] > c.flops["fp32"]
