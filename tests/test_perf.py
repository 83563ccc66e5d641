import pytest

from grader.runtime import device, perf, timing


def fake(ms):
    return timing.Timing(samples=(ms,) * 8, rounds=2, stable=True)


def test_speedup_is_baseline_over_candidate():
    c = perf.Comparison("yours", fake(1.0), "eager", fake(2.5))
    assert c.speedup == pytest.approx(2.5)
    assert "speedup 2.50x" in str(c)


@pytest.mark.skipif(device.current().grades_speed, reason="checks a device without speed grading")
def test_speed_cells_score_zero_off_gpu_and_say_why(capsys):
    def never():
        raise AssertionError("must not be timed")

    assert perf.grade_speedup(never, never, at_least=2, points=3) == 0.0
    assert perf.grade_bandwidth(never, bytes_moved=8, at_least=0.8, points=1) == 0.0
    out = capsys.readouterr()
    assert out.err == ""
    assert out.out.count("Speed is graded on an NVIDIA GPU") == 2
    assert "scores 0 of 3" in out.out


def test_verdict_gives_all_or_nothing(capsys):
    assert perf.score_verdict(perf.Verdict("eager", 2.1, 2.0), 2) == 2.0
    assert perf.score_verdict(perf.Verdict("eager", 1.9, 2.0), 2) == 0.0
    assert perf.score_verdict(perf.Verdict("copy bandwidth", 79.6, 80.0, "%"), 1) == 0.0
    out = capsys.readouterr().out
    assert "PASS 2.10x eager (needs 2x): 2 of 2 points" in out
    assert "NOT YET 1.90x eager (needs 2x): 0 of 2 points" in out
    assert "NOT YET 80% of copy bandwidth (needs 80%)" in out


def test_verdict_is_published_as_data_in_ipython(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.get_ipython", lambda: object())
    monkeypatch.setattr("IPython.display.display", lambda data, raw: shown.append(data))
    assert perf.publish_verdict(perf.Verdict("eager", 1.25, 1.2, flags=("noisy",))) is True
    (data,) = shown
    assert data["text/plain"] == "1.25x eager (needs 1.2x)"
    assert data[perf.SPEED_MIMETYPE] == {
        "comparison": "eager",
        "measured": 1.25,
        "needed": 1.2,
        "unit": "x",
        "flags": ["noisy"],
        "passed": True,
    }
    assert perf.publish_verdict(perf.Verdict("eager", 1.1, 1.2)) is False


@pytest.mark.gpu
def test_a_clearly_slower_kernel_fails_and_a_fast_one_passes():
    import torch

    x = torch.randn(1 << 25, device="cuda")
    out = torch.empty_like(x)

    def slow():  # four passes over memory where one would do
        out.copy_(x)
        for _ in range(3):
            out.add_(0.0)

    assert (
        perf.grade_bandwidth(lambda: out.copy_(x), bytes_moved=2 * x.nbytes, at_least=0.8, points=1)
        == 1.0
    )
    assert perf.grade_bandwidth(slow, bytes_moved=2 * x.nbytes, at_least=0.8, points=1) == 0.0
    assert perf.grade_speedup(slow, lambda: out.copy_(x), at_least=1.0, points=1) == 0.0
