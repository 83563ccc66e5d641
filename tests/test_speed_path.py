"""The speed path's checks (grader.runtime.perf) without a GPU: a `distinct` baseline's output
(the judge's identity check), and the census's reading of a trace recorded on an H200, which
names what a timed call ran besides the exercise's kernels."""

import json
from pathlib import Path

import pytest
import torch

from grader.runtime import census, checks, device, perf
from tests import launch_kernels as lk

DEV = device.current().torch_device
TRACE = Path(__file__).parent / "data" / "census-trace-h200.json"


def case(launcher, *baselines, x=None):
    x = torch.randn(300, device=DEV) if x is None else x
    out = torch.empty_like(x)
    return perf.Case(
        lambda: launcher(x, out),
        ["double_kernel"],
        (x,),
        out,
        lambda: checks.compare(out, 2 * x.double(), context="after a timed call"),
        baselines,
    )


def test_an_output_equal_to_a_distinct_library_baseline_is_flagged():
    x = torch.randn(300, device=DEV)
    library = perf.Baseline("a library", lambda: x * 2.0, at_least=None, distinct=True)
    (flag,) = perf.identity_flags(case(lk.honest, library, x=x))
    assert "equals a library's bit for bit" in flag
    other = perf.Baseline("a library", lambda: x * 2.0 + 1e-3, at_least=None, distinct=True)
    assert perf.identity_flags(case(lk.honest, other, x=x)) == []


def recorded(timed: list[str]) -> census.Census:
    """The census of the recorded trace, with the windows named in `timed` as timed calls."""
    trace = json.loads(TRACE.read_text())
    seen = census.Census()
    seen.calls = [perf.TIMED if w in timed else w for w, _, _ in census.windows(trace)]
    seen.seen = [
        census.Seen(s.name, perf.TIMED if s.window in timed else s.window, s.call)
        for s in census.attribute(trace)
    ]
    return seen


def attention_case():
    q = torch.zeros(1)
    return perf.Case(
        lambda: None, ["attn_fwd_kernel"], (q,), q, lambda: None,
        [perf.Baseline("SDPA flash", lambda: None, at_least=1.1)],
    )  # fmt: skip


def test_the_recorded_census_attributes_each_kernel_to_the_call_that_launched_it():
    seen = {s.window: [] for s in census.attribute(json.loads(TRACE.read_text()))}
    for s in census.attribute(json.loads(TRACE.read_text())):
        seen[s.window].append(s.name)
    assert seen["triton_add"] == ["add_kernel"]
    assert seen["flash07"] == ["attn_fwd_kernel"]
    assert seen["gemm05"] == ["matmul_kernel_persistent"]
    assert any(n.startswith("nvjet_sm90") for n in seen["cublas"])
    assert any(n.startswith("cudnn_generated") for n in seen["cheat"])
    assert "Memcpy DtoD (Device -> Device)" in seen["cheat"]
    # the harness's own kernel between windows belongs to none
    assert sum(len(v) for v in seen.values()) == len(
        census.attribute(json.loads(TRACE.read_text()))
    )


def test_the_census_passes_an_honest_call_and_names_a_library_computing_the_result():
    assert perf.census_flags(recorded(["flash07"]), attention_case()) == []
    flags = perf.census_flags(recorded(["flash07", "cheat"]), attention_case())
    named = [f for f in flags if f.startswith("`")]
    assert any(f.startswith("`cudnn_generated_fort_native_sdpa_sm90") for f in named)
    # cuDNN's names run to 90 characters, the class report's line to 160: the reason must show
    cudnn = next(f for f in named if f.startswith("`cudnn"))
    assert "ran inside the timed calls" in cudnn[:100], cudnn
    assert any(f.startswith("`Memcpy DtoD") for f in named)
    assert "1 of 2 timed calls launched none of attn_fwd_kernel" in flags[-1]


def test_a_census_that_saw_no_exercise_kernel_vouches_for_nothing():
    assert perf.census_flags(recorded([]), attention_case())[-1].endswith(
        "it cannot vouch for them"
    )


def test_another_triton_kernel_in_a_timed_call_is_named_even_one_the_call_launched_itself():
    # a wrapper of the exercise's kernel that has a released module's Triton kernel (05's
    # matmul_kernel_persistent, beside 09) compute the result, then launches the exercise's
    flags = perf.census_flags(recorded(["gemm05", "flash07"]), attention_case())
    assert any(f.startswith("`matmul_kernel_persistent` ran inside the timed calls") for f in flags)
    flags = perf.census_flags(recorded(["triton_add"]), attention_case())
    assert flags[0].startswith("`add_kernel` ran inside the timed calls")
    assert "saw no launch of attn_fwd_kernel" in flags[-1]


@pytest.mark.gpu
def test_the_census_names_every_kernel_a_timed_call_ran_on_a_gpu():
    x = torch.randn(1 << 20, device="cuda")
    out = torch.empty_like(x)
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)

    def with_cublas():
        torch.matmul(a, a)  # a library's kernel inside the call
        lk.honest(x, out)

    seen = census.Census()
    with seen.session():
        x.add_(0)  # the harness's own work, between calls, belongs to no call
        seen.watch(lambda: lk.honest(x, out), perf.TIMED)()
        x.add_(0)
        seen.watch(with_cublas, perf.TIMED)()
    with seen.session():  # a second session adds to the first
        seen.watch(lambda: None, perf.TIMED)()
    names = seen.names(perf.TIMED)
    assert names.count("double_kernel") == 2, names
    library = census.foreign(names, ["double_kernel"])
    assert library and not any("elementwise" in n for n in library), library  # no harness work
    assert seen.without(perf.TIMED, ["double_kernel"]) == (3, 1)
