import dataclasses
import time

import pytest
import torch

from grader.grading import verdicts
from grader.runtime import checks, device, perf, profile, timing
from tests import shared


def fake(ms):
    return timing.Timing(samples=(ms,) * 8, rounds=2, stable=True)


def test_speedup_is_baseline_over_candidate():
    c = perf.Comparison("yours", fake(1.0), "eager", fake(2.5))
    assert c.speedup == pytest.approx(2.5)
    assert "speedup 2.50x" in str(c)


def never():
    raise AssertionError("must not be called")


@pytest.mark.skipif(device.current().grades_speed, reason="checks a device without speed grading")
def test_speed_cells_score_zero_off_gpu_and_say_why(capsys):
    x = torch.zeros(8)
    case = perf.Case(never, ["k"], (x,), x, never, [perf.Baseline("eager", never, at_least=2)])
    copy = perf.Case(never, ["k"], (x,), x, never, [perf.copy_bandwidth(64, at_least=0.8)])
    assert perf.grade(case, points=3) == 0.0
    assert perf.grade(copy, points=1) == 0.0
    out = capsys.readouterr()
    assert out.err == ""
    assert out.out.count("Speed is graded on an NVIDIA GPU") == 2
    assert "scores 0 of 3" in out.out and "Your instructor grades speed on a GPU" in out.out


def test_a_speed_cell_that_needs_sm_90_scores_zero_on_an_older_gpu_and_says_why(
    capsys, monkeypatch
):
    """perf.grade(..., needs="sm_90"): on an A100 the cell names what it needs, scores 0, and
    measures nothing; off the GPU it says what any speed cell says."""
    x = torch.zeros(8)
    case = perf.Case(never, ["k"], (x,), x, never, [perf.Baseline("eager", never, at_least=2)])
    monkeypatch.setattr(device, "_current", device.Device("gpu", "NVIDIA A100", (8, 0)))
    assert perf.grade(case, points=2, needs="sm_90") == 0.0
    out = capsys.readouterr()
    assert out.err == "" and "a Hopper-class GPU (sm_90)" in out.out and "NVIDIA A100" in out.out
    assert "scores 0 of 2" in out.out
    monkeypatch.setattr(device, "_current", device.Device("interpreter", "CPU"))
    assert perf.grade(points=1, needs="sm_90") == 0.0  # no case needed where none is measured
    assert "Speed is graded on an NVIDIA GPU, sm_80 or newer" in capsys.readouterr().out


def test_a_case_names_its_kernels_inputs_and_baselines():
    x = torch.zeros(8)
    eager = [perf.Baseline("eager", never, at_least=2)]
    with pytest.raises(ValueError, match="kernels"):
        perf.Case(never, [], (x,), x, never, eager)
    with pytest.raises(ValueError, match="floating-point inputs"):
        perf.Case(never, ["k"], (torch.arange(4),), x, never, eager)
    with pytest.raises(ValueError, match="baseline"):
        perf.Case(never, ["k"], (x,), x, never, [])
    copy = perf.Case(never, ["k"], (x,), x, never, [perf.copy_bandwidth(64, at_least=0.8)])
    assert copy.moved == 64 and copy.label(copy.baselines[0]) == perf.COPY


def test_verdicts_are_all_or_nothing_and_each_is_published(capsys):
    assert perf.score([perf.Verdict("eager", 2.1, 2.0), perf.Verdict("torch", 1.3, 1.2)], 2) == 2.0
    assert perf.score([perf.Verdict("eager", 2.1, 2.0), perf.Verdict("torch", 1.1, 1.2)], 2) == 0.0
    assert perf.score([perf.Verdict("copy bandwidth", 79.6, 80.0, "%")], 1) == 0.0
    out = capsys.readouterr().out
    assert "2.10x eager (needs 2x) ok" in out and "PASS: 2 of 2 points" in out
    assert "1.10x torch (needs 1.2x) TOO SLOW" in out
    assert "NOT YET: short of torch: 0 of 2 points" in out
    assert "80% of copy bandwidth (needs 80%) TOO SLOW" in out


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
        "at_most": False,
        "passed": True,
    }
    assert perf.publish_verdict(perf.Verdict("eager", 1.1, 1.2)) is False
    assert perf.publish_verdict(perf.Verdict("eager", 1.25, 1.2, flags=("noisy",))) is False
    assert shown[-1][perf.SPEED_MIMETYPE]["flags"] == ["noisy"]


@pytest.mark.gpu
def test_a_clearly_slower_kernel_fails_and_a_fast_one_passes():
    from tests import launch_kernels as lk

    x = torch.randn(1 << 25, device="cuda")
    out, theirs = torch.empty_like(x), torch.empty_like(x)

    def four_passes(x, out):  # the kernel run four times where once would do
        for _ in range(4):
            lk.honest(x, out)

    def case(launcher, baseline, at_least):
        return perf.Case(
            lambda: launcher(x, out),
            ["double_kernel"],
            (x,),
            out,
            lambda: checks.compare(out, 2 * x.double()),
            [perf.Baseline("the other", lambda: baseline(x, theirs), at_least=at_least)],
        )

    assert perf.grade(case(lk.honest, four_passes, 2.0), points=1) == 1.0
    assert perf.grade(case(four_passes, lk.honest, 0.9), points=1) == 0.0


# -- what cannot be scored ---------------------------------------------------------------------


def slow():
    time.sleep(0.002)


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
    honest = Launcher(cached=False)
    result = perf.compare(
        honest,
        slow,
        verify=honest.verify,
        before=perf.Redraw([honest.x]),
        sampler=shared.cpu_sampler,
    )
    assert result.flags == ()
    cheat = Launcher(cached=True)
    unchanged = perf.compare(cheat, slow, verify=cheat.verify, sampler=shared.cpu_sampler)
    assert unchanged.flags == ()  # inputs that never change: the cached output stays right
    cheat = Launcher(cached=True)
    result = perf.compare(
        cheat,
        slow,
        verify=cheat.verify,
        before=perf.Redraw([cheat.x]),
        sampler=shared.cpu_sampler,
    )
    assert len(result.flags) == 1 and "wrong for the inputs of that call" in result.flags[0]
    assert "cached" in result.flags[0] and result.candidate.rounds == 0


def test_inputs_are_drawn_afresh_like_the_given_ones_and_integers_are_left_alone():
    x, n = 3.0 + 0.5 * torch.randn(1 << 14), torch.arange(4)
    redraw = perf.Redraw([x, n])
    assert redraw.inputs == [x]
    seen = set()
    for _ in range(20):
        before = x.clone()
        redraw()
        assert not torch.equal(x, before) and torch.equal(n, torch.arange(4))
        assert not torch.equal(x, -before) and abs(float(x.mean()) - 3.0) < 0.05
        assert abs(float(x.std()) - 0.5) < 0.05  # independent draws, not signs or a permutation
        seen.add(float(x.sum()))
    assert len(seen) == 20
    with pytest.raises(ValueError, match="no floating-point input"):
        perf.Redraw([n])


def test_float8_inputs_are_drawn_afresh_within_their_range():
    x = (100 * torch.randn(1 << 12)).clamp(-448, 448).to(torch.float8_e4m3fn)
    redraw = perf.Redraw([x])
    before = x.view(torch.uint8).clone()
    redraw()
    assert not torch.equal(x.view(torch.uint8), before)
    assert x.float().abs().max() <= 448 and abs(float(x.float().std()) - 100) < 10


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
    shown = []
    monkeypatch.setattr("IPython.get_ipython", lambda: object())
    monkeypatch.setattr("IPython.display.display", lambda data, raw: shown.append(data))
    assert perf.score([perf.Verdict("eager", 3.0, 2.0, flags=("the timer lies",))], 2) == 0.0
    printed = capsys.readouterr().out
    assert f"{perf.FLAGGED}: the timer lies" in printed and "0 of 2 points" in printed
    (data,) = shown
    record = perf.Verdict.read(data[perf.SPEED_MIMETYPE])
    assert record.flags == ("the timer lies",) and not record.passed and record.measured == 3.0
    assert data["text/plain"].endswith("FLAGGED")


# -- the DRAM bytes a case may move, counted -------------------------------------------------


def traffic_case(fewest=1000.0):
    x = torch.zeros(8)
    traffic = perf.Traffic(never, {"n": 8}, fewest=fewest)
    return perf.Case(
        never, ["k"], (x,), x, never, [perf.copy_bandwidth(64, at_least=0.8)], traffic=traffic
    )


def test_the_dram_bytes_counted_are_graded_beside_the_speed_as_a_ceiling(capsys):
    case = traffic_case()
    fast = {"candidate_ms": 1.0, "baseline_ms": {perf.COPY: 0.9}}
    lean, _ = perf.verdicts_of(case, perf.Measured("p", **fast, dram_bytes=1050.0))
    assert [v.at_most for v in lean] == [False, True] and all(v.passed for v in lean)
    assert perf.score(lean, 1) == 1.0
    heavy, _ = perf.verdicts_of(case, perf.Measured("p", **fast, dram_bytes=1500.0))
    assert heavy[1].measured == pytest.approx(1.5) and not heavy[1].passed
    assert perf.score(heavy, 1) == 0.0
    out = capsys.readouterr().out
    assert "1.05x the fewest DRAM bytes, counted by Nsight Compute (at most 1.1x) ok" in out
    assert "1.50x the fewest DRAM bytes, counted by Nsight Compute (at most 1.1x) TOO SLOW" in out
    assert "NOT YET: short of the fewest DRAM bytes" in out
    record = perf.Verdict.read(heavy[1].record())
    assert record == heavy[1] and not record.passed
    assert verdicts.margin(record.measured, 1.1, True) == pytest.approx(1.1 / 1.5)


def test_bytes_not_counted_are_said_and_not_graded_and_a_flagged_case_counts_nothing():
    case = traffic_case()
    measured = perf.Measured("p", 1.0, {perf.COPY: 0.9}, uncounted="no ncu here")
    graded, shown = perf.verdicts_of(case, measured)
    assert len(graded) == 1 and shown == ["DRAM bytes not counted, so not graded: no ncu here"]
    flagged = perf.Measured("p", 1.0, {perf.COPY: 0.9}, flags=("the timer lies",))
    graded, shown = perf.verdicts_of(case, flagged)
    assert len(graded) == 1 and graded[0].flags and shown == []


def _launch(read, written):
    required = [
        f.name
        for f in dataclasses.fields(profile.KernelProfile)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    counters = dict.fromkeys(required, None) | {"kernel": "k", "launch": 0}
    return profile.KernelProfile(
        **counters | {"dram_bytes_read": read, "dram_bytes_written": written}
    )


def test_the_bytes_counted_are_read_and_written_by_the_cases_kernels(monkeypatch):
    asked = []

    def each(calls, **options):
        asked.append((calls, options))
        conditions = profile.Conditions("H100", "9.0", 50 << 20, "2025.3")
        return {"": profile.Profile((_launch(600.0, 380.0), _launch(10.0, 0.0)), conditions)}

    monkeypatch.setattr(profile, "each", each)
    traffic = traffic_case().traffic
    assert perf.counted(traffic, ["k"], runner="r") == {"dram_bytes": 990.0}
    only_traffic = {"runner": "r", "metrics": profile.TRAFFIC}  # a pass or two, not every metric
    assert asked == [({"": profile.Call(never, ["k"], {"n": 8})}, only_traffic)]


@pytest.mark.parametrize(
    "reason, countable", [("permission", False), ("no-ncu", False), ("failed", True)]
)
def test_bytes_the_host_could_count_and_did_not_fail_closed(monkeypatch, reason, countable):
    def fails(calls, **_):
        raise profile.ProfileError(reason, "the profiled program failed")

    monkeypatch.setattr(profile, "each", fails)
    found = perf.counted(traffic_case().traffic, ["k"])
    assert found == {"uncounted": "the profiled program failed", "countable": countable}
