import itertools

import pytest

from grader.runtime import device, timing
from tests import shared


def sampler_from(rounds):
    """A stand-in for do_bench that returns the given rounds of samples in turn."""
    it = iter(rounds)
    calls = []

    def sample(fn, warmup_ms, rep_ms):
        calls.append((warmup_ms, rep_ms))
        return list(next(it))

    sample.calls = calls
    return sample


def test_stops_once_two_rounds_agree_and_pools_them():
    sampler = sampler_from([[2.0] * 9, [1.0] * 9, [1.005] * 9, [5.0] * 9])
    t = timing.measure_until_stable(lambda: None, sampler, tolerance=0.01)
    assert t.stable and t.rounds == 3
    assert len(t.samples) == 18 and 1.0 <= t.median_ms <= 1.005
    assert len(sampler.calls) == 3


def test_reports_unstable_after_max_rounds():
    noisy = ([float(v)] * 5 for v in itertools.cycle([1, 2]))
    t = timing.measure_until_stable(lambda: None, lambda *a: next(noisy), max_rounds=4)
    assert not t.stable and t.rounds == 4
    assert "not yet stable" in str(t)


def test_median_spread_and_rate():
    t = timing.Timing(samples=(1.0, 1.0, 1.0, 1.1, 0.9, 1.0, 1.0, 1.2), rounds=2, stable=True)
    assert t.median_ms == 1.0
    assert 0 < t.spread < 0.2
    assert t.per_second(1e9) == pytest.approx(1e12)
    assert t.pooled(t).samples == t.samples * 2


def test_needs_two_rounds():
    with pytest.raises(ValueError, match="at least 2"):
        timing.measure_until_stable(lambda: None, lambda *a: [1.0], max_rounds=1)


@pytest.mark.skipif(device.current().is_gpu, reason="checks interpreter mode")
def test_refuses_in_interpreter_mode_with_a_reason():
    with pytest.raises(timing.TimingUnavailable) as info:
        timing.bench(lambda: None)
    assert "needs a CUDA GPU" in str(info.value)
    assert "interpreter" in str(info.value)
    with pytest.raises(timing.TimingUnavailable, match="host time per call"):
        timing.host_time(lambda: None)


@pytest.mark.gpu
def test_host_time_is_the_launch_alone_and_refuses_calls_that_wait_for_the_gpu():
    import torch

    x = torch.randn(1 << 24, device="cuda")
    y = torch.empty_like(x)
    launch = timing.host_time(lambda: y.copy_(x))
    assert 0 < launch.us < 1e3 * timing.bench(lambda: y.copy_(x)).median_ms + 100
    with pytest.raises(RuntimeError, match="wait for the GPU"):
        timing.host_time(lambda: (y.copy_(x), torch.cuda.synchronize()), calls=10, batches=1)


@pytest.mark.gpu
def test_timing_the_same_kernel_twice_agrees():
    import torch

    x = torch.randn(1 << 26, device="cuda")
    y = torch.empty_like(x)
    first = timing.bench(lambda: y.copy_(x))
    second = timing.bench(lambda: y.copy_(x))
    assert abs(first.median_ms - second.median_ms) / first.median_ms < 0.03


def test_a_given_sampler_replaces_do_bench_and_needs_no_gpu():
    calls = []
    t = timing.bench(lambda: calls.append(1), sampler=shared.cpu_sampler)
    assert t.rounds >= 2 and len(t.samples) >= 6 and all(s >= 0 for s in t.samples)
    assert len(calls) == 4 * t.rounds  # a warm-up and three timed calls per round
