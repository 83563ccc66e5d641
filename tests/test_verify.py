"""The audit: the reference and a correct kernel pass every case; each planted defect kind fails
a case built to catch it (int32-offset: the offset review); crashes stay in their case; the table
and the report say what failed, where and by how much."""

import math

import pytest
import torch

from grader.runtime import attention as attn
from grader.runtime import verify
from tests import attention_kernels as ak

CASES = attn.cases(tile=ak.TILE)


def reference_as_candidate(q, k, v, causal=False, sm_scale=None):
    return attn.reference(q, k, v, causal, sm_scale).to(q.dtype)


def test_taxonomy_ids_are_the_documented_eleven():
    assert list(verify.TAXONOMY) == [
        "missing-mask",
        "wrong-scale",
        "no-rescale",
        "causal-off-by-one",
        "zero-fill",
        "fp16-accum",
        "int32-offset",
        "assumes-contiguous",
        "uninit-read",
        "torch-fallback",
        "address-cache",
    ]
    table = verify.taxonomy_table()
    assert all(kind in table for kind in verify.TAXONOMY)


def test_flops_and_the_sdpa_baselines():
    assert attn.flops(1, 1, 2, 3) == 4 * 2 * 2 * 3
    assert attn.flops(4, 16, 4096, 64, causal=True) == 4 * 4 * 16 * 4096**2 * 64 / 2
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 33, 16, generator=gen) for _ in "qkv")
    for causal in (False, True):  # the flash backend runs on CPUs and GPUs alike
        want = attn.reference(q, k, v, causal).float()
        torch.testing.assert_close(attn.sdpa("FLASH_ATTENTION")(q, k, v, causal), want)
        torch.testing.assert_close(attn.flash(q, k, v, causal), want)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError):  # the backend cannot run here: the caller says so
            attn.sdpa("CUDNN_ATTENTION")(q, k, v)


def test_every_runnable_defect_has_a_case_built_to_catch_it():
    built = {kind for case in CASES for kind in case.catches}
    assert built == set(verify.TAXONOMY) - {"int32-offset"}
    assert all(kind in verify.TAXONOMY for kind in built)


def test_the_sweep_covers_sizes_dtypes_strides_flags_and_extremes():
    sizes = set()
    for case in CASES:
        q, k, v = case.make_inputs(torch.Generator().manual_seed(0))
        sizes.add(q.shape[-2])
        assert q.shape == k.shape == v.shape
    assert 1 in sizes and any(n % ak.TILE for n in sizes) and max(sizes) >= 3 * ak.TILE
    assert {c.kwargs.get("causal") for c in CASES} == {True, False}
    dtypes = {c.make_inputs(torch.Generator().manual_seed(0))[0].dtype for c in CASES}
    assert {torch.float32, torch.float16} <= dtypes
    strided = [c for c in CASES if "assumes-contiguous" in c.catches][0]
    assert not any(t.is_contiguous() for t in strided.make_inputs(torch.Generator()))
    flat = [c for c in CASES if "fp16-accum" in c.catches][0]
    assert flat.make_inputs(torch.Generator().manual_seed(0))[2].abs().min() > 500


def test_the_reference_passes_every_case():
    report = verify.audit(reference_as_candidate, attn.reference, CASES, forbid=(), show=False)
    assert report.passed, report.table()


def test_a_correct_kernel_passes_every_case_and_the_offset_review(capsys):
    review = verify.offset_review(ak.attention_kernel, attn.LARGE_SHAPES)
    report = verify.audit(ak.launcher(), attn.reference, CASES, review=review)
    assert report.passed, report.table()
    printed = capsys.readouterr().out
    assert f"{len(CASES)} of {len(CASES)} cases pass" in printed and "verdict: ok" in printed
    report.check()


def test_fuzz_cases_cover_ragged_causal_heads_and_batch():
    fuzz = attn.fuzz_cases(count=8, seed=1)
    shapes = [c.make_inputs(torch.Generator().manual_seed(0))[0].shape for c in fuzz]
    assert any(s[0] > 1 and s[1] > 1 for s in shapes)
    assert {c.kwargs["causal"] for c in fuzz} == {True, False}
    assert len({s[-1] for s in shapes}) >= 2 and len({s[-2] for s in shapes}) >= 4
    report = verify.audit(ak.launcher(), attn.reference, fuzz[:3], show=False)
    assert report.passed, report.table()


RUNNABLE = [kind for kind in verify.TAXONOMY if kind != "int32-offset"]


@pytest.mark.parametrize("kind", RUNNABLE)
def test_each_planted_defect_fails_a_case_built_to_catch_it_as_it_fails(kind):
    built = [c for c in CASES if kind in c.catches]
    report = verify.audit(ak.variant(kind), attn.reference, built, show=False)
    assert not report.passed
    with pytest.raises(verify.AuditFailed, match="FAIL"):
        report.check()
    why = {c.name: report.unshown(verify.TAXONOMY[kind], c.name) for c in built}
    assert None in why.values(), f"{kind} is shown by no case built to catch it: {why}"


def test_int32_offsets_are_caught_by_the_review_and_int64_ones_pass():
    bad = verify.offset_review(ak.attention_kernel_int32, attn.LARGE_SHAPES)
    assert not bad.ok and bad.needs_int64
    assert [f.product for f in bad.findings] == ["off_hz * stride_h"]
    assert "FAIL" in str(bad) and "off_hz * stride_h" in str(bad)
    small = verify.offset_review(ak.attention_kernel_int32, [(2, 3, 100, 16)])
    assert small.ok and not small.needs_int64  # the same code is fine while offsets fit
    good = verify.offset_review(ak.attention_kernel, attn.LARGE_SHAPES)
    assert good.ok and not good.findings


def test_int32_wrap_is_twos_complement():
    assert verify.int32_wrap(2**31 - 1) == 2**31 - 1
    assert verify.int32_wrap(2**31) == -(2**31)
    assert verify.int32_wrap(4095 * 2**20) == 4095 * 2**20 - 2**32
    assert verify.int32_wrap(-5) == -5


def test_a_crash_stays_in_its_case():
    kernel = ak.launcher()

    def crashes_on_one(q, k, v, causal=False, sm_scale=None):
        if q.shape[-2] == 1:
            raise RuntimeError("illegal memory access (pretend)")
        return kernel(q, k, v, causal, sm_scale)

    report = verify.audit(crashes_on_one, attn.reference, CASES[:3], show=False)
    assert [r.passed for r in report.results] == [False, True, True]
    assert report.results[0].message.startswith("crashed: RuntimeError: illegal memory")


def test_a_stub_and_an_unwritten_output_are_named():
    def stub(q, k, v, causal=False, sm_scale=None):
        raise NotImplementedError()

    def never_writes(q, k, v, causal=False, sm_scale=None):
        return torch.empty_like(q)

    report = verify.audit(stub, attn.reference, CASES[:1], show=False)
    assert "still holds the exercise stub" in report.results[0].message
    report = verify.audit(never_writes, attn.reference, CASES[1:2], show=False)
    assert report.results[0].message.startswith("poison at")


def test_the_table_shows_case_error_index_and_message():
    def off_by_a_bit(q, k, v, causal=False, sm_scale=None):
        out = attn.reference(q, k, v, causal, sm_scale).to(q.dtype)
        out[0, 0, 0, 3] += 0.5
        return out

    report = verify.audit(off_by_a_bit, attn.reference, CASES[1:2], forbid=(), show=False)
    result = report.results[0]
    assert not result.passed and result.first_mismatch == (0, 0, 0, 3)
    assert math.isclose(result.max_abs_error, 0.5, rel_tol=1e-3)
    table = report.table()
    for column in ("case", "verdict", "max abs err", "first mismatch", "message"):
        assert column in table
    assert "[0, 0, 0, 3]" in table and "5.00e-01" in table and "wrong at 1/" in table
    assert "seed" in report.explain(CASES[1].name)


def test_inputs_must_come_back_unchanged():
    kernel = ak.launcher()

    def scribbles(q, k, v, causal=False, sm_scale=None):
        out = kernel(q, k, v, causal, sm_scale)
        k.mul_(1.0)
        k[0, 0, 0, 0] += 1
        return out

    report = verify.audit(scribbles, attn.reference, CASES[1:2], show=False)
    assert "wrote to input 1" in report.results[0].message


def test_poisoned_allocations_hold_the_graders_nan():
    with verify.PoisonAllocations():
        a = torch.empty(5)
        b = torch.empty_like(a, dtype=torch.float16)
        c = a.new_empty((3,))
        z = torch.zeros(2)
    for t in (a, b, c):
        assert bool(verify.checks.poison_mask(t).all())
    assert bool((z == 0).all())


def _report(review=None) -> verify.Report:
    """An audit of a draft with a missing mask and a causal off-by-one, as its table shows it."""
    results = [
        verify.Result("ragged", False, (1,), message="wrong at 3/4", kinds=("wrong",)),
        verify.Result("causal", False, (1,), message="NaN/inf at 1/4", kinds=("nonfinite",)),
        verify.Result("whole", True, (1,)),
    ]
    catches = {"ragged": ("missing-mask",), "causal": ("zero-fill",), "whole": ("address-cache",)}
    return verify.Report("draft_a", results, review, catches)


def test_check_defects_says_what_is_wrong_with_the_form():
    report = _report()
    good = {"draft_a": {"missing-mask": "ragged"}}
    assert verify.check_defects(good, "draft_a", report) == {"missing-mask"}
    with pytest.raises(AssertionError, match="DEFECTS\\['draft_b'\\] must map each defect id"):
        verify.check_defects(good, "draft_b", report)
    with pytest.raises(AssertionError, match="unknown ids"):
        verify.check_defects({"draft_a": {"off-by-one": "ragged"}}, "draft_a", report)
    with pytest.raises(AssertionError, match="empty"):
        verify.check_defects({"draft_a": {}}, "draft_a", report)
    for not_a_map in ("missing-mask", {"missing-mask"}):
        with pytest.raises(AssertionError, match="must map each defect id to the name of the case"):
            verify.check_defects({"draft_a": not_a_map}, "draft_a", report)
        with pytest.raises(AssertionError, match="must map each defect id to the name of the case"):
            verify.check_defects(not_a_map, "draft_a", report)


def test_check_defects_counts_one_drafts_ids_without_naming_them():
    answer = {"draft_a": {"missing-mask": "ragged", "int32-offset": verify.OFFSET_REVIEW}}
    review = verify.offset_review(ak.attention_kernel_int32, attn.LARGE_SHAPES)
    assert verify.check_defects(answer, "draft_a", _report(review), count=2) == set(
        answer["draft_a"]
    )
    with pytest.raises(
        AssertionError, match="draft_a has 3 defects; you named 2: for each id, find the line"
    ) as e:
        verify.check_defects(answer, "draft_a", _report(review), count=3)
    assert "missing-mask" not in str(e.value) and "int32-offset" not in str(e.value)
    with pytest.raises(AssertionError, match="empty: draft_a has 4 defects"):
        verify.check_defects({"draft_a": {}}, "draft_a", _report(), count=4)


def test_check_defects_needs_a_case_that_shows_each_defect_as_it_fails():
    report = _report()

    def why(defect, witness):
        with pytest.raises(AssertionError) as e:
            verify.check_defects({"draft_a": {defect: witness}}, "draft_a", report)
        return str(e.value)

    assert "no case is named 'ragged N=45'; their names: ragged, causal, whole" in why(
        "missing-mask", "ragged N=45"
    )
    case = verify.Case("ragged", lambda gen: ())  # the case itself, where its name is asked for
    assert "no case is named \"Case(name='ragged', " in why("missing-mask", case)
    assert "'causal' was not built to catch it; these were: ragged" in why("missing-mask", "causal")
    assert "draft_a passes 'whole'" in why("address-cache", "whole")
    # a NaN in a causal case is no fill of 0: a row filled with 0 keeps finite weights
    assert "fails 'causal' with NaN/inf at 1/4, where zero-fill fails as wrong at" in why(
        "zero-fill", "causal"
    )
    assert "the offset review passes" in why("int32-offset", verify.OFFSET_REVIEW)
    assert "was not built to catch it; these were: ragged" in why(
        "missing-mask", verify.OFFSET_REVIEW
    )


def test_load_module_overrides_existing_names_only(tmp_path):
    path = tmp_path / "draft_x.py"
    path.write_text("BLOCK_M = 128\n\ndef block():\n    return BLOCK_M\n")
    module = verify.load_module(path, BLOCK_M=32)
    assert module.block() == 32
    assert not (tmp_path / "__pycache__").exists()  # course/ stays as built
    with pytest.raises(AttributeError, match="defines no BLOCK_Q"):
        verify.load_module(path, BLOCK_Q=32)
