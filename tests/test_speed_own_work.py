"""perf.own_work_flags: a speed cell's timed code must be its exercise's kernels' work, checked
on the cell's own inputs before and after timing, as the correctness cells check theirs; so a
launcher that lets torch compute the answer earns no speed points either (on a GPU, the speed
graders flag it; the check itself runs anywhere)."""

import pytest
import torch

from grader.runtime import checks, device, perf
from tests import launch_kernels as lk

DEV = device.current().torch_device
KERNELS = ["double_kernel"]


def _cell(launcher):
    x = torch.randn(300, device=DEV)
    out = torch.empty_like(x)
    return (lambda: launcher(x, out)), x, out, (lambda: checks.compare(out, 2 * x.double()))


@pytest.mark.parametrize("launcher", [lk.honest, lk.in_halves], ids=lambda f: f.__name__)
def test_the_kernels_own_work_raises_no_flag(launcher):
    timed, x, out, verify = _cell(launcher)
    assert perf.own_work_flags(timed, KERNELS, (x,), out, verify) == []
    assert torch.equal(out, 2 * x)  # the call ran, and its output was verified


@pytest.mark.parametrize(
    "launcher, reason",
    [
        (lk.torch_only, "returned without launching double_kernel"),
        (lk.dummy_launch, "were not written by double_kernel"),
        (lk.kernel_then_torch, "wrote were changed afterwards"),
        (lk.on_a_copy, "was given input 0"),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_a_result_torch_made_is_flagged(launcher, reason):
    timed, x, out, verify = _cell(launcher)
    [flag] = perf.own_work_flags(timed, KERNELS, (x,), out, verify)
    assert flag.startswith("the timed code's result is not the work of double_kernel")
    assert reason in flag


def test_a_launcher_that_stops_launching_after_the_first_check_is_flagged_after_timing():
    calls = []

    def switches(x, out):
        calls.append(1)
        return lk.honest(x, out) if len(calls) == 1 else lk.torch_only(x, out)

    timed, x, out, verify = _cell(switches)
    assert perf.own_work_flags(timed, KERNELS, (x,), out, verify) == []  # before timing
    timed()  # the timed calls
    assert "returned without launching" in perf.own_work_flags(timed, KERNELS, (x,), out, verify)[0]


def test_a_wrong_value_is_flagged_and_the_output_starts_poisoned():
    timed, x, out, verify = _cell(lambda x, out: lk.launch(x, out, n=x.numel() - 10))
    out.copy_(2 * x)  # a stale right answer left in `out` must not count
    [flag] = perf.own_work_flags(timed, KERNELS, (x,), out, verify)
    assert "wrong at 10 of 300 elements" in flag


def test_without_out_the_returned_tensor_must_be_the_kernels_output():
    x = torch.randn(300, device=DEV)

    def verify():
        pass

    assert perf.own_work_flags(lambda: lk.launch(x, torch.empty_like(x)), KERNELS, (x,), None,
                               verify) == []  # fmt: skip
    [flag] = perf.own_work_flags(lambda: lk.torch_only(x, torch.empty_like(x)), KERNELS, (x,),
                                 None, verify)  # fmt: skip
    assert "returned without launching double_kernel" in flag
