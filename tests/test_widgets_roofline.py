"""The roofline explorer: its arithmetic, its controls and its readout, with counting functions
made up for the test (the explorer has no formulas of its own; the notebook passes them in)."""

import math

import pytest

from grader.runtime import roofline
from grader.runtime.widgets import roofline as explorer

# A device with round numbers: 1 TB/s, and a ridge of 100 FLOP/B in fp16, 10 in fp32.
CEIL = roofline.Ceilings(
    bandwidth=1e12,
    flops={"fp16": 100e12, "bf16": 100e12, "tf32": 50e12, "fp32": 10e12},
    source="test device",
)
SIZE = {"fp16": 2, "bf16": 2, "fp32": 4}


def toy_flops(op, shape):
    """Not the course's conventions: 7 FLOPs per element of the shape, whatever the op."""
    return 7 * math.prod(shape)


def toy_bytes(op, shape, dtype):
    """One read per element of the first two dimensions."""
    return shape[0] * shape[1] * SIZE[dtype]


def toy_precision(op, dtype, tf32=False):
    return "tf32" if dtype == "fp32" and tf32 else dtype


def build(**kwargs):
    return explorer.explore(CEIL, toy_flops, toy_bytes, toy_precision, **kwargs)


def rows(widget):
    return dict(explorer.describe(widget.estimate))


def test_shapes_per_op():
    assert explorer.shape_for("add", 128) == (128, 128)
    assert explorer.shape_for("softmax", 128) == (128, 128)
    assert explorer.shape_for("matmul", 256) == (256, 256, 256)
    assert explorer.shape_for("attention_naive", 512, head_dim=128) == (1, 16, 512, 128)
    assert explorer.shape_for("attention_tiled", 512) == (1, 16, 512, 64)
    with pytest.raises(ValueError, match="unknown op"):
        explorer.shape_for("conv", 8)


def test_estimate_memory_bound():
    # add 1000 x 1000 fp16: 7e6 FLOPs, 2e6 bytes, intensity 3.5 < ridge 100
    e = explorer.estimate(CEIL, toy_flops, toy_bytes, toy_precision, "add", (1000, 1000), "fp16")
    assert (e.flops, e.bytes_moved) == (7e6, 2e6)
    assert e.intensity == pytest.approx(3.5)
    assert e.ridge == pytest.approx(100)
    assert e.bound == "memory"
    assert e.memory_seconds == pytest.approx(2e-6)
    assert e.compute_seconds == pytest.approx(7e-8)
    assert e.seconds == pytest.approx(2e-6)
    assert e.attainable == pytest.approx(3.5e12)


def test_estimate_compute_bound_and_tf32():
    # matmul 1000^3 fp32: 7e9 FLOPs, 4e6 bytes, intensity 1750
    plain = explorer.estimate(
        CEIL, toy_flops, toy_bytes, toy_precision, "matmul", (1000,) * 3, "fp32"
    )
    assert plain.precision == "fp32" and plain.bound == "compute"
    assert plain.seconds == pytest.approx(7e9 / 10e12)
    tf32 = explorer.estimate(
        CEIL, toy_flops, toy_bytes, toy_precision, "matmul", (1000,) * 3, "fp32", tf32=True
    )
    assert tf32.precision == "tf32"
    assert tf32.seconds == pytest.approx(7e9 / 50e12)


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="no 'fp8' rate"):
        explorer.estimate(CEIL, toy_flops, toy_bytes, lambda *a: "fp8", "matmul", (8, 8, 8), "fp16")


def test_widget_starts_on_a_matmul_and_reads_out():
    w = build()
    controls = (w.op.value, w.size.value, w.dtype.value, w.tf32.value)
    assert controls == ("matmul", 1024, "fp16", False)
    r = rows(w)
    assert r["shape"] == "1024 x 1024 x 1024 (fp16)"
    assert r["FLOPs"] == explorer.si(7 * 1024**3, "FLOP") == "7.52 GFLOP"
    assert r["bytes moved"] == "2.1 MB"
    assert r["bound"].startswith("compute-bound")
    assert "7.52 GFLOP" in w.readout.value and "test device" in w.readout.value
    assert w.plot.value[:8] == b"\x89PNG\r\n\x1a\n"


def test_changing_the_controls_updates_the_readout():
    w = build()
    w.op.value = "add"
    w.size.value = 4096
    assert w.estimate.shape == (4096, 4096)
    # 7 * 4096^2 FLOPs over 2 * 4096^2 bytes: intensity 3.5, memory-bound
    assert rows(w)["intensity"] == "3.5 FLOP/B"
    assert rows(w)["bound"].startswith("memory-bound")
    assert w.estimate.seconds == pytest.approx(2 * 4096**2 / 1e12)
    assert "memory-bound" in w.readout.value

    w.dtype.value = "fp32"  # bytes double, intensity halves, the ridge drops to 10
    assert rows(w)["intensity"] == "1.75 FLOP/B"
    assert rows(w)["ridge"].startswith("10 FLOP/B (fp32")
    w.op.value = "matmul"
    w.size.value = 1024
    before = w.estimate.seconds
    w.tf32.value = True
    assert w.estimate.precision == "tf32"
    assert before / w.estimate.seconds == pytest.approx(5.0)  # 50 vs 10 TFLOP/s
    assert "tf32" in w.readout.value


def test_attention_shapes_use_the_head_dim():
    w = build(head_dim=128)
    w.op.value = "attention_tiled"
    w.size.value = 2048
    assert w.estimate.shape == (1, 16, 2048, 128)
    assert rows(w)["shape"] == "1 x 16 x 2048 x 128 (fp16)"


def test_an_unfinished_exercise_is_reported_not_raised():
    def stub(op, shape):
        raise NotImplementedError()

    w = explorer.explore(CEIL, stub, toy_bytes, toy_precision)
    assert w.estimate is None
    assert "still holds the exercise stub" in w.error
    assert "Cannot count matmul" in w.readout.value and w.plot.value == b""
    assert w.text().startswith("Cannot count matmul")

    def broken(op, shape, dtype):
        raise KeyError(dtype)

    w = explorer.explore(CEIL, toy_flops, broken, toy_precision)
    assert w.error == "KeyError: 'fp16'"


def test_works_on_the_datasheet_roofline():
    w = explorer.explore(roofline.datasheet_h100(), toy_flops, toy_bytes, toy_precision)
    w.dtype.value = "bf16"
    assert w.estimate.ridge == pytest.approx(989 / 3.35)
    assert "datasheet" in w.readout.value
    assert "lower bound" in w.text()


@pytest.mark.parametrize(
    "value, unit, text",
    [(1.5e9, "B", "1.5 GB"), (999, "B", "999 B"), (2.5e13, "FLOP/s", "25 TFLOP/s")],
)
def test_si(value, unit, text):
    assert explorer.si(value, unit) == text


@pytest.mark.parametrize(
    "seconds, text", [(2.0, "2 s"), (0.0015, "1.5 ms"), (1.2e-4, "120 us"), (5e-8, "50 ns")]
)
def test_duration(seconds, text):
    assert explorer.duration(seconds) == text
