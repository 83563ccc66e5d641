import time

import pytest
import torch

from grader.grading import verdicts
from grader.runtime import checks, device, perf, timing


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
    assert perf.publish_verdict(perf.Verdict("eager", 1.25, 1.2)) is True
    (data,) = shown
    assert data["text/plain"] == "1.25x eager (needs 1.2x)"
    assert data[perf.SPEED_MIMETYPE] == {
        "comparison": "eager",
        "measured": 1.25,
        "needed": 1.2,
        "unit": "x",
        "flags": [],
        "passed": True,
    }
    assert perf.publish_verdict(perf.Verdict("eager", 1.1, 1.2)) is False
    assert perf.publish_verdict(perf.Verdict("eager", 1.25, 1.2, flags=("noisy",))) is False
    assert shown[-1][perf.SPEED_MIMETYPE]["flags"] == ["noisy"]


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


# -- what cannot be scored ---------------------------------------------------------------------


def lying_sampler(fn, warmup_ms, rep_ms, *, before=None, check=None):
    """cpu_sampler's calls, but a timer that reports a tenth of the time the host clock saw."""
    r = timing.cpu_sampler(fn, warmup_ms, rep_ms, before=before, check=check)
    return timing.Round(
        tuple(s / 10 for s in r.samples), tuple((t / 10, h, n) for t, h, n in r.clock)
    )


def slow():
    time.sleep(0.002)


def test_a_timer_that_disagrees_with_the_host_clock_is_flagged():
    honest = perf.compare(slow, slow, sampler=timing.cpu_sampler)
    assert honest.flags == ()
    lying = perf.compare(slow, slow, names=("fused", "eager"), sampler=lying_sampler)
    assert len(lying.flags) == 2 and lying.flags[0].startswith("fused: the timer measured")


class Launcher:
    """out = 2 * x, honestly or with the output kept from the first call (`cached`)."""

    def __init__(self, cached: bool):
        self.x = torch.randn(1000)
        self.out = torch.empty_like(self.x)
        self.cached, self.calls = cached, 0

    def __call__(self):
        self.calls += 1
        if not (self.cached and self.calls > 1):
            torch.mul(self.x, 2.0, out=self.out)

    def verify(self):
        checks.compare(self.out, 2.0 * self.x.double(), context="after a timed call")


def test_an_output_cached_across_timed_calls_is_flagged_once_inputs_change():
    def changing(launcher):  # new values before every call, as `negating` does, never repeating
        return lambda: launcher.x.add_(1.0)

    honest = Launcher(cached=False)
    result = perf.compare(
        honest, slow, verify=honest.verify, before=changing(honest), sampler=timing.cpu_sampler
    )
    assert result.flags == ()
    cheat = Launcher(cached=True)
    unchanged = perf.compare(cheat, slow, verify=cheat.verify, sampler=timing.cpu_sampler)
    assert unchanged.flags == ()  # inputs that never change: the cached output stays right
    cheat = Launcher(cached=True)
    result = perf.compare(
        cheat, slow, verify=cheat.verify, before=changing(cheat), sampler=timing.cpu_sampler
    )
    assert len(result.flags) == 1 and "wrong for the inputs of that call" in result.flags[0]
    assert "cached" in result.flags[0] and result.candidate.rounds == 0


def test_versions_never_repeat_the_last_call_and_leave_integers_alone():
    x, n = torch.randn(64), torch.arange(4)
    original = x.clone()
    change = perf.versions_of([x, n])
    seen = []
    for _ in range(200):
        change()
        seen.append(change.now)
        assert torch.equal(n, torch.arange(4))
    assert all(a != b for a, b in zip(seen, seen[1:], strict=False))
    assert set(seen) == {0, 1, 2, 3}
    values = [change.versions[i][0] for i in range(4)]
    assert torch.equal(values[0], original) and torch.equal(values[1], -original)
    assert torch.equal(values[2].sort().values, original.sort().values)  # a permutation
    assert not torch.equal(values[2], original) and torch.equal(values[3], -values[2])
    assert perf.versions_of([n]) is None
    with pytest.raises(ValueError, match="at least 3"):
        perf.Versions([x], [[x], [-x]])


def test_a_timer_replaced_while_timing_is_flagged():
    import importlib

    original = time.perf_counter_ns

    def patches_the_clock():
        importlib.import_module("time").perf_counter_ns = lambda: 0

    try:
        result = perf.compare(patches_the_clock, slow, sampler=timing.cpu_sampler)
    finally:
        time.perf_counter_ns = original
    assert any("time.perf_counter_ns replaced while timing" in f for f in result.flags)
    assert perf.compare(slow, slow, sampler=timing.cpu_sampler).flags == ()


def test_a_bandwidth_above_the_copy_is_flagged_with_both_figures():
    copy = fake(1.0)  # 2.9 GB in 1 ms: 2.9 TB/s
    moved = 2.9e9
    assert perf.ceiling_flags(fake(1.0 / 1.05), bytes_moved=moved, copy=copy) == []
    (why,) = perf.ceiling_flags(fake(1.0 / 44), bytes_moved=moved, copy=copy)
    assert why.startswith("measured 128 TB/s, above this GPU's measured copy bandwidth of 2.9 TB/s")
    assert "cached between timed calls" in why


def test_a_flop_rate_above_the_matmul_ceiling_is_flagged():
    ceiling = ("cuBLAS float16 8192^3", 700e12)
    flops = 1e12  # 1 TFLOP per call
    assert perf.ceiling_flags(fake(1.0 / 0.75), flops=flops, matmul=ceiling) == []  # 750 TFLOP/s
    (why,) = perf.ceiling_flags(fake(1.0 / 5), flops=flops, matmul=ceiling)  # 5000 TFLOP/s
    assert "5e+03 TFLOP/s" in why and "700 TFLOP/s (cuBLAS float16 8192^3" in why


def test_a_flagged_cell_scores_zero_and_says_why(capsys, monkeypatch):
    assert perf.flagged(["the timer lies"], 2) == 0.0
    printed = capsys.readouterr().out
    assert f"{perf.FLAGGED}: the timer lies" in printed and "0 of 2 points" in printed
    shown = []
    monkeypatch.setattr("IPython.get_ipython", lambda: object())
    monkeypatch.setattr("IPython.display.display", lambda data, raw: shown.append(data))
    assert perf.flagged(["the timer lies"], 2, perf.Verdict("eager", 3.0, 2.0)) == 0.0
    (data,) = shown
    record = verdicts.parse(data[perf.SPEED_MIMETYPE])
    assert record.flags == ("the timer lies",) and not record.passed and record.measured == 3.0
    assert "NOT SCORED" in data["text/plain"]
