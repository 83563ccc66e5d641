"""Speed cheats against 02's kernels, graded as 02's speed cells grade them in a student's own
run: an output cached across timed calls, work skipped after the third identical call, and a
launcher that lets torch compute the result; and on 04's speed cell, cuBLAS computing the product
that a kernel named as the exercise's only copies. Each must be flagged and score 0 for speed;
the reference kernels, honest, must score full points. (Work on a side stream and patched
timers, also in CHEATS, the attack corpus of bench/detectors.py, deceive only the student's own
process: at grading the judge times from the GPU's activity log, docs/instructors.md.)
Every graded cell's printed figures are kept in build/report/speed_cheats.json (the record of a
GPU run). Needs a GPU: `pytest -m gpu` on one."""

import ast
import importlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from grader.runtime import checks, perf

pytestmark = pytest.mark.gpu

SOLUTION = Path(__file__).parent.parent / "solutions" / "02_first_kernels" / "first_kernels.py"
KERNELS = ["add_kernel", "add", "bias_gelu_scale_kernel", "bias_gelu_scale"]
PRELUDE = (
    "import torch\nimport torch.nn.functional as F\nimport triton\nimport triton.language as tl\n"
)
FUSED_SHAPE = (8192, 8192)  # 02's FUSED_BENCH_SHAPE
ADD_ELEMENTS = 1 << 26  # 02's BENCH_ELEMENTS


def solution_functions(names, folder: Path):
    """The named top-level functions of 02's solution (decorators included), as a module."""
    text = SOLUTION.read_text()
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            found[node.name] = "\n".join(text.splitlines()[first - 1 : node.end_lineno])
    assert set(found) == set(names), f"02's solution lacks {set(names) - set(found)}"
    path = folder / "kernels_02.py"
    path.write_text(PRELUDE + "\n\n".join(found[n] for n in names) + "\n")
    spec = importlib.util.spec_from_file_location("kernels_02", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def k02(tmp_path_factory):
    return solution_functions(KERNELS, tmp_path_factory.mktemp("k02"))


def fused_reference(x, bias, scale):  # 02's bias_gelu_scale_reference
    return torch.nn.functional.gelu(x + bias, approximate="tanh") * scale


# -- the cheats, each wrapped around the honest launcher -----------------------------------------


def cached_across_calls(launch):
    """Computes once per set of tensors, then returns the output it kept."""
    kept = {}

    def cheat(*args):
        key = tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)
        if key not in kept:
            kept[key] = launch(*args)
        return kept[key]

    return cheat


def skips_after_third_call(launch):
    """Computes the first three identical calls, then returns the output tensor untouched."""
    seen = {}

    def cheat(*args):
        key = tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= 3:
            return launch(*args)
        return args[-1]

    return cheat


def on_a_side_stream(launch):
    """Launches the honest kernel on a stream of its own and returns at once."""
    side = torch.cuda.Stream()

    def cheat(*args):
        with torch.cuda.stream(side):
            return launch(*args)

    return cheat


def with_patched_timers(launch):
    """Honest work, but on its first call it makes every timer report a tenth of the time,
    reached through importlib and sys.modules."""

    def cheat(*args):
        cuda = importlib.import_module("torch").cuda
        if not getattr(cuda.Event.elapsed_time, "patched", False):
            real_elapsed = cuda.Event.elapsed_time

            def elapsed_time(self, end):
                return real_elapsed(self, end) / 10

            elapsed_time.patched = True
            cuda.Event.elapsed_time = elapsed_time
            testing = sys.modules["triton.testing"]
            real_bench = testing.do_bench
            testing.do_bench = lambda fn, *a, **k: [t / 10 for t in real_bench(fn, *a, **k)]
        return launch(*args)

    return cheat


def torch_computes_it(launch):
    """Launches the kernel on a scratch copy of the output, then writes the result with torch
    (a kernel launched, every input handed to it, the value right)."""

    def cheat(*args):
        *inputs, out = args
        launch(*inputs, torch.empty_like(out))
        if len(inputs) == 2:  # add(x, y, out)
            return out.copy_(inputs[0] + inputs[1])
        return out.copy_(fused_reference(*inputs))  # bias_gelu_scale(x, bias, scale, out)

    return cheat


CHEATS = {
    "cached across calls": cached_across_calls,
    "skips after the third call": skips_after_third_call,
    "side stream": on_a_side_stream,
    "patched timers": with_patched_timers,
    "torch computes it": torch_computes_it,
}
# What each cheat the student's own run flags must be flagged for (any one of them): an output
# wrong for its call's inputs, or the census of the GPU's work in the timed calls.
CENSUS = ("ran inside the timed calls", "launched none of")
REASONS = {
    "cached across calls": ("wrong for the inputs", *CENSUS),
    "skips after the third call": ("wrong for the inputs", *CENSUS),
    "torch computes it": CENSUS,
}
RECORD = Path(__file__).parent.parent / "build" / "report" / "speed_cheats.json"


@pytest.fixture(scope="module")
def record():
    """Every graded cell's figures as printed, written to RECORD when the module ends."""
    rows = []
    yield rows
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    RECORD.write_text(
        json.dumps({"device": device, "torch": torch.__version__, "cells": rows}, indent=1)
    )


def graded(record, what: str, scores, printed: str):
    """Keep one graded launcher's scores and printed lines in the record; return them."""
    record.append({"launcher": what, "scores": scores, "printed": printed.splitlines()})
    return scores, printed


# -- grading as 02's speed cells do ----------------------------------------------------------------


def grade_fused(launch):
    """02's two fused speed cells: (score vs eager, score vs copy)."""
    gen = checks.generator(checks.new_seed())
    x = torch.randn(FUSED_SHAPE, device="cuda", generator=gen)
    bias = torch.randn(FUSED_SHAPE[1], device="cuda", generator=gen)
    scale, out = 0.5, torch.empty_like(x)
    ideal_bytes = x.nbytes + bias.nbytes + out.nbytes

    def verify_speed():
        expected = fused_reference(x.double(), bias.double(), scale)
        checks.compare(out, expected, context="after a timed call")

    def case(baseline):
        return perf.Case(
            lambda: launch(x, bias, scale, out),
            ["bias_gelu_scale_kernel"],
            (x, bias),
            out,
            verify_speed,
            [baseline],
            bytes_moved=ideal_bytes,
        )

    eager = perf.Baseline("eager", lambda: fused_reference(x, bias, scale), at_least=2.0)
    vs_eager = perf.grade(case(eager), points=1)
    vs_copy = perf.grade(case(perf.copy_bandwidth(ideal_bytes, at_least=0.8)), points=1)
    return vs_eager, vs_copy


def grade_add(launch):
    """02's add against a copy of the same bytes, graded as a bandwidth cell."""
    gen = checks.generator(checks.new_seed())
    x = torch.randn(ADD_ELEMENTS, device="cuda", generator=gen)
    y, out = torch.randn_like(x), torch.empty_like(x)

    def verify():
        checks.compare(out, x.double() + y.double(), context="after a timed call")

    copy = perf.copy_bandwidth(3 * x.nbytes, at_least=0.8)
    return perf.grade(
        perf.Case(lambda: launch(x, y, out), ["add_kernel"], (x, y), out, verify, [copy]),
        points=1,
    )


def flags_in(printed: str) -> list[str]:
    return [line for line in printed.splitlines() if line.startswith(perf.FLAGGED)]


def test_the_honest_fused_kernel_scores_full_speed_points(k02, capsys, record):
    scores, printed = graded(
        record, "fused: honest", grade_fused(k02.bias_gelu_scale), capsys.readouterr().out
    )
    assert scores == (1.0, 1.0), printed
    assert flags_in(printed) == []


@pytest.mark.parametrize("cheat", list(REASONS))
def test_a_cheating_fused_launcher_is_flagged_and_scores_zero(k02, capsys, record, cheat):
    scores, printed = graded(
        record,
        f"fused: {cheat}",
        grade_fused(CHEATS[cheat](k02.bias_gelu_scale)),
        capsys.readouterr().out,
    )
    assert scores == (0.0, 0.0), printed
    flags = flags_in(printed)
    assert len(flags) >= 2, printed  # each of the two cells says why
    assert all(any(r in f for r in REASONS[cheat]) for f in flags), flags


def test_the_honest_add_kernel_is_not_flagged(k02, capsys, record):
    score, printed = graded(record, "add: honest", grade_add(k02.add), capsys.readouterr().out)
    assert score == 1.0, printed
    assert flags_in(printed) == []


@pytest.mark.parametrize("cheat", list(REASONS))
def test_a_cheating_add_launcher_is_flagged_and_scores_zero(k02, capsys, record, cheat):
    score, printed = graded(
        record, f"add: {cheat}", grade_add(CHEATS[cheat](k02.add)), capsys.readouterr().out
    )
    assert score == 0.0, printed
    flags = flags_in(printed)
    assert flags and all(any(r in f for r in REASONS[cheat]) for f in flags), printed


# -- a library computes, the exercise's kernel copies (04's and 05's speed cells) -----------------


@triton.jit
def matmul_kernel(src_ptr, a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Named as the exercise's kernel, handed the real inputs, it only copies `src` to `out`."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


def grade_matmul(launch, capsys):
    """04's speed cell, with `launch(a, b, c)` as the candidate: (score, printed)."""
    n = 4096
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    c, theirs = torch.empty_like(a), torch.empty_like(a)

    def verify():
        scale = float((a.double().abs() @ b.double().abs()).max())
        atol = 4 * n**0.5 * 2.0**-24 * scale + 1e-5
        checks.compare(c, a.double() @ b.double(), rtol=1e-2, atol=atol)

    cublas = perf.Baseline("cuBLAS", lambda: torch.matmul(a, b, out=theirs), at_least=0.6)
    case = perf.Case(lambda: launch(a, b, c), ["matmul_kernel"], (a, b), c, verify, [cublas],
                     flops=2 * n**3, dtype=torch.float16)  # fmt: skip
    score = perf.grade(case, points=2)
    return score, capsys.readouterr().out


def test_cublas_computing_a_matmul_that_the_kernel_copies_is_named_by_the_census(capsys):
    def copies_cublas(a, b, c):
        product = torch.matmul(a, b)
        matmul_kernel[(triton.cdiv(c.numel(), 1024),)](product, a, b, c, c.numel(), BLOCK=1024)

    score, printed = grade_matmul(copies_cublas, capsys)
    assert score == 0.0, printed
    named = [f for f in flags_in(printed) if "ran inside the timed calls" in f]
    assert named and all(f.split("`")[1] != "matmul_kernel" for f in named), printed
