import json

import pytest

from grader.runtime import device, results


@pytest.fixture
def record_file(tmp_path, monkeypatch):
    target = tmp_path / "results.json"
    monkeypatch.setenv("COURSE_RESULTS", str(target))
    return target


def fake_gpu(monkeypatch):
    monkeypatch.setattr(device, "_current", device.Device(device.GPU, "Test GPU", (9, 0)))


def test_missing_record_is_empty(record_file):
    assert results.load() == []


def test_record_replaces_the_same_kernel_and_keeps_others(record_file, monkeypatch):
    fake_gpu(monkeypatch)
    results.record("02_first_kernels", "add", flops=1, bytes_moved=12, seconds=1.0)
    results.record("03_softmax", "softmax", flops=5, bytes_moved=8, seconds=2.0)
    results.record("02_first_kernels", "add", flops=1, bytes_moved=12, seconds=0.5)
    entries = results.load()
    assert [(e.kernel, e.seconds) for e in entries] == [("softmax", 2.0), ("add", 0.5)]
    assert results.load("Another GPU") == []
    point = entries[1].point()
    assert point.label == "02 add" and point.achieved == 2.0
    assert json.loads(record_file.read_text())[0]["device"] == "Test GPU"


@pytest.mark.skipif(device.current().is_gpu, reason="checks interpreter mode")
def test_interpreter_times_are_not_recorded(record_file):
    with pytest.raises(RuntimeError, match="only GPU timings"):
        results.record("00_setup", "relu", flops=1, bytes_moved=8, seconds=1.0)
