"""The integrity guards: reference calls are seen, launches are counted, the namespace is
restored, and the isolated process checks, times (with a CPU clock here) and refuses what the
guards catch, whatever the calling process's state."""

import pytest
import torch

from grader.runtime import device, integrity, perf
from tests import integrity_kernels as ik

DEV = device.current().torch_device  # where kernels read their tensors


def test_reference_watch_sees_attention_and_its_parts_only():
    q = torch.randn(2, 4, 8)
    with integrity.ReferenceWatch() as watch:
        torch.empty(3)
        torch.exp(q)
        q.transpose(-2, -1).contiguous()
    assert watch.calls == []
    with integrity.ReferenceWatch() as watch:
        torch.softmax(q, dim=-1)
        q @ q.transpose(-2, -1)
        torch.bmm(q, q.transpose(-2, -1))
        torch.nn.functional.scaled_dot_product_attention(q[None], q[None], q[None])
        torch.einsum("bij,bkj->bik", q, q)
        torch.nn.functional.softmax(q, dim=-1)
        q.softmax(-1)
    assert watch.calls == [
        "torch.softmax",
        "Tensor.matmul",
        "torch.bmm",
        "torch.scaled_dot_product_attention",
        "torch.functional.einsum",
        "torch.nn.functional.softmax",
        "Tensor.softmax",
    ]


def test_launch_counter_counts_and_forwards():
    counter = integrity.LaunchCounter(ik.scale_kernel, "scale_kernel")
    x = torch.randn(100, device=DEV)
    out = torch.empty_like(x)
    counter[(2,)](x, out, 100, 3.0, BLOCK=64)
    assert counter.launches == 1 and torch.allclose(out, 3 * x)
    assert counter.fn is ik.scale_kernel.fn  # other attributes are the kernel's own


def test_counting_launches_restores_the_namespace_even_on_error():
    namespace = vars(ik)
    original = namespace["scale_kernel"]
    with pytest.raises(RuntimeError, match="boom"):
        with integrity.counting_launches(namespace, ["scale_kernel"]) as counters:
            assert namespace["scale_kernel"] is counters["scale_kernel"]
            raise RuntimeError("boom")
    assert namespace["scale_kernel"] is original
    with pytest.raises(integrity.IntegrityError, match="no kernel named missing_kernel"):
        with integrity.counting_launches(namespace, ["missing_kernel"]):
            pass


def test_checked_call_accepts_an_honest_launcher():
    x = torch.randn(300, device=DEV)
    out = integrity.checked_call(ik.scale, x, kernels=["scale_kernel"])
    assert torch.allclose(out, 2 * x)


def test_checked_call_names_a_reference_call():
    with pytest.raises(integrity.IntegrityError, match="called torch.softmax"):
        integrity.checked_call(
            ik.scale_with_torch, torch.randn(10, device=DEV), kernels=["scale_kernel"]
        )


def test_checked_call_catches_a_result_made_without_launching():
    x = torch.randn(10, device=DEV)
    ik._RESULTS[x.data_ptr()] = 2 * x  # prepared earlier, in the notebook
    try:
        with pytest.raises(integrity.IntegrityError, match="without launching scale_kernel"):
            integrity.checked_call(ik.scale_precomputed, x, kernels=["scale_kernel"])
    finally:
        ik._RESULTS.clear()


def test_checked_call_explains_a_stub():
    with pytest.raises(AssertionError, match="still holds the exercise stub"):
        integrity.checked_call(ik.scale_stub, torch.randn(10, device=DEV), kernels=["scale_kernel"])


def test_source_of_keeps_the_decorator():
    source = integrity.source_of(ik.scale_kernel)
    assert source.startswith("@triton.jit\ndef scale_kernel(")
    assert integrity.source_of(ik.scale).startswith("def scale(")


def isolated(launcher, **kwargs):
    return integrity.measure_isolated(
        [ik.scale_kernel, ik.scale, launcher],
        launcher=launcher.__name__,
        kernels=["scale_kernel"],
        problem="tests.integrity_kernels:problem",
        **kwargs,
    )


def test_isolated_process_checks_an_honest_launcher_and_times_it_with_a_clock():
    result = isolated(ik.scale, clock="cpu")
    assert result.ok, result.error
    assert result.checks == ["default: right, launched the kernel, no reference calls"]
    comparison = result.comparisons["torch"]
    assert comparison["variant"] == "default" and comparison["speedup"] > 0
    assert result.seconds("default") > 0 and "CPU clock" in str(result)


def test_isolated_process_without_timing_checks_only():
    result = isolated(ik.scale)
    assert result.ok, result.error
    if not device.current().supports("timing"):
        assert result.comparisons == {} and "checked only" in result.note


def test_isolated_process_refuses_a_reference_call_and_a_stub():
    result = isolated(ik.scale_with_torch)
    assert not result.ok and "called torch.softmax" in result.error
    result = isolated(ik.scale_stub)
    assert not result.ok and "still holds the exercise stub" in result.error


def test_notebook_state_does_not_reach_the_isolated_process(monkeypatch):
    x = torch.randn(1000, device=DEV)
    ik._RESULTS[x.data_ptr()] = 2 * x
    monkeypatch.setattr(torch, "softmax", lambda *a, **k: None)  # tampering, in this process
    try:
        result = isolated(ik.scale_precomputed)
    finally:
        ik._RESULTS.clear()
    assert not result.ok and "NameError" in result.error and "_RESULTS" in result.error


def test_isolated_process_flags_a_launcher_that_stops_launching():
    result = isolated(ik.scale_launches_once, clock="cpu")
    assert result.ok and result.flags and not result.comparisons, str(result)
    assert any(
        "returned without launching" in f or "wrong for the inputs" in f for f in result.flags
    )


def test_grade_scores_only_on_a_gpu_and_only_at_the_threshold(monkeypatch, capsys):
    good = integrity.Measurement(
        True,
        comparisons={
            "flash": {
                "variant": "non-causal",
                "candidate_ms": 1.0,
                "candidate_spread": 0.01,
                "baseline_ms": 0.8,
                "baseline_spread": 0.01,
                "speedup": 0.8,
            }
        },
    )
    if not device.current().grades_speed:
        assert integrity.grade(good, "flash", at_least=0.6, points=1) == 0.0
        assert "graded on an NVIDIA GPU" in capsys.readouterr().out
    monkeypatch.setattr(device, "_current", device.Device(device.GPU, "Test GPU", (9, 0)))
    assert integrity.grade(good, "flash", at_least=0.6, points=1) == 1.0
    assert integrity.grade(good, "flash", at_least=0.9, points=1) == 0.0
    failed = integrity.Measurement(False, "the isolated process ran past 600 s")
    assert integrity.grade(failed, "flash", at_least=0.6, points=1) == 0.0
    printed = capsys.readouterr().out
    assert "0.80x flash (needs 0.6x) ok" in printed and "PASS: 1 of 1 points" in printed
    assert "0.80x flash (needs 0.9x) TOO SLOW" in printed and "ran past" in printed


def test_isolated_process_flags_an_output_kept_across_timed_calls():
    honest = isolated(ik.scale, clock="cpu")
    assert honest.ok and honest.flags == []
    result = isolated(ik.scale_keeps_first_output, clock="cpu")
    assert result.ok, result.error  # it launches every call and its first output is right
    assert result.flags and result.flags[0].startswith("default: ")
    assert "not the work of scale_kernel" in result.flags[0] and "flagged:" in str(result)


def test_grade_scores_a_flagged_measurement_zero_and_says_why(monkeypatch, capsys):
    monkeypatch.setattr(device, "_current", device.Device(device.GPU, "Test GPU", (9, 0)))
    timed = {
        "variant": "default",
        "candidate_ms": 0.001,
        "candidate_spread": 0.0,
        "baseline_ms": 1.0,
        "baseline_spread": 0.0,
        "speedup": 1000.0,
    }
    clean = integrity.Measurement(True, comparisons={"torch": timed})
    assert integrity.grade(clean, "torch", at_least=1.0, points=1) == 1.0
    flagged = integrity.Measurement(True, comparisons={"torch": timed}, flags=["torch: too fast"])
    assert integrity.grade(flagged, "torch", at_least=1.0, points=1) == 0.0
    printed = capsys.readouterr().out
    assert f"{perf.FLAGGED}: torch: too fast" in printed and "0 of 1 points" in printed
