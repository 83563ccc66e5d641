"""Which accumulation mode each float8 speed comparison uses. Notebook 09's float8 kernel keeps
tl.dot's default on sm_90 (no max_num_imprecise_acc: the whole K loop in the tensor cores'
accumulator), which is cuBLAS's fast accumulation; so the speed cell grades it, and the bench's
goal measures it, against torch._scaled_mm(..., use_fast_accum=True), with use_fast_accum=False
shown beside it. On the CPU: torch._scaled_mm is replaced by a stand-in that records its mode,
perf.grade and perf.compare_all by stand-ins that time nothing."""

import ast

import pytest
import torch

from bench import _notebook, _report, hopper_gemm
from grader.runtime import perf, timing

NOTEBOOK = "09_hopper"


@pytest.fixture
def modes(monkeypatch):
    """The use_fast_accum of every torch._scaled_mm call, in order; each call returns the product
    of the scaled inputs, rounded to its out_dtype."""
    seen = []

    def scaled_mm(a, b, *, scale_a, scale_b, out_dtype, use_fast_accum=False, out=None):
        seen.append(use_fast_accum)
        product = ((scale_a * a.float()) @ (scale_b * b.float())).to(out_dtype)
        return product if out is None else out.copy_(product)

    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm)
    return seen


def mode_of(fn, modes) -> list[bool]:
    before = len(modes)
    fn()
    return modes[before:]


def test_the_reference_kernel_sums_as_cublas_fast_accumulation():
    tree = ast.parse(_notebook.cell(NOTEBOOK, "fp8-kernel"))
    dots = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "dot"
    ]
    assert dots, "the fp8-kernel cell has no tl.dot: where does the float8 kernel multiply?"
    promoted = [
        ast.unparse(d) for d in dots if any(k.arg == "max_num_imprecise_acc" for k in d.keywords)
    ]
    assert not promoted, (
        f"the reference float8 kernel now promotes its sum to float32 ({promoted}): it no longer "
        "sums as _scaled_mm(use_fast_accum=True) does; grade it against use_fast_accum=False in "
        "scaled_mm_baselines (solutions/09_hopper/hopper.py) and say so in the notebook"
    )


def test_the_speed_cell_grades_against_fast_accumulation_and_shows_the_other(monkeypatch, modes):
    nb = _notebook.load(NOTEBOOK, ["fp8-kernel"], ["HOPPER", "TILES", "require_fp8", "grade_fp8"])
    monkeypatch.setattr(nb, "HOPPER", True)  # as on sm_90
    monkeypatch.setattr(nb, "SPEED_N", 16, raising=False)
    graded = []
    monkeypatch.setattr(perf, "grade", lambda *cases, **kw: graded.extend(cases) or 0.0)
    nb.grade_fp8()
    (case,) = graded
    by_mode = {b.name: mode_of(b.fn, modes) for b in case.baselines}
    needed = {b.name: b.at_least for b in case.baselines}
    assert sorted(by_mode.values()) == [[False], [True]], by_mode
    for name, mode in by_mode.items():
        if mode == [True]:
            assert needed[name] is not None, f"{name} sums as the kernel does: it is graded"
        else:
            assert needed[name] is None, f"{name} is the other mode: shown, not graded"


def test_the_bench_goal_is_against_fast_accumulation_with_the_other_mode_beside(monkeypatch, modes):
    ref = hopper_gemm.load()
    if not ref.FP8_HERE:
        pytest.skip("float8 runs in the interpreter and on sm_90 only")
    timed = {}

    def compare_all(candidate, baselines, *, name, verify, **options):
        candidate()
        verify()
        results = []
        for i, (label, fn) in enumerate(baselines.items()):
            timed[label] = mode_of(fn, modes)
            theirs = timing.Timing((1.0 + 0.25 * (i + 1),), 1, True)  # a ratio per baseline
            results.append(perf.Comparison(name, timing.Timing((1.0,), 1, True), label, theirs))
        return results

    monkeypatch.setattr(perf, "compare_all", compare_all)
    section = _report.Section("hopper", "test")
    ratio, detail = hopper_gemm._fp8(section, ref, 32)
    assert sorted(timed.values()) == [[False], [True]], timed
    rows = {r.baseline: r for r in section.rows}
    assert rows.keys() == timed.keys() and all("error: kernel" in r.note for r in rows.values())
    (fast,) = [label for label, mode in timed.items() if mode == [True]]
    (accurate,) = [label for label, mode in timed.items() if mode == [False]]
    assert ratio == rows[fast].ratio, "the goal is the ratio against use_fast_accum=True"
    assert f"beside it {accurate}: {rows[accurate].ratio:.3f}x" in detail, detail
