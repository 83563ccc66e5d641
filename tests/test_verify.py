"""The audit: the reference and a correct kernel pass every case; each planted defect kind fails
a case built to catch it (int32-offset: the offset review); crashes stay in their case; the table
and the report say what failed, where and by how much."""

import math

import pytest
import torch

from grader.runtime import attention as attn
from grader.runtime import device, verify
from tests import attention_kernels as ak
from tests.known_wrong import nb08_verify

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
    catches = {
        "ragged": ("missing-mask",),
        "causal": ("causal-off-by-one", "zero-fill"),
        "whole": ("address-cache",),
    }
    rules_out = {"ragged": ("causal-off-by-one",), "causal": ("missing-mask",)}
    return verify.Report("draft_a", results, review, catches, rules_out)


def test_check_defects_says_what_is_wrong_with_the_form():
    report = _report()
    good = {"draft_a": {"missing-mask": "ragged", "causal-off-by-one": "causal"}}
    assert verify.check_defects(good, "draft_a", report) == {"missing-mask", "causal-off-by-one"}
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
    named = {"missing-mask": "ragged", "causal-off-by-one": "causal"}
    answer = {"draft_a": {**named, "int32-offset": verify.OFFSET_REVIEW}}
    review = verify.offset_review(ak.attention_kernel_int32, attn.LARGE_SHAPES)
    assert verify.check_defects(answer, "draft_a", _report(review), count=3) == set(
        answer["draft_a"]
    )
    with pytest.raises(
        AssertionError, match="draft_a has 4 defects; you named 3: for each id, find the line"
    ) as e:
        verify.check_defects(answer, "draft_a", _report(review), count=4)
    assert not any(defect in str(e.value) for defect in answer["draft_a"])
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


def test_check_defects_needs_ids_that_account_for_every_failure():
    review = verify.offset_review(ak.attention_kernel_int32, attn.LARGE_SHAPES)

    def why(named, review=None):
        answer = {"draft_a": named}
        with pytest.raises(AssertionError) as e:
            verify.check_defects(answer, "draft_a", _report(review), count=len(named))
        return str(e.value)

    # the NaN of the causal case: missing-mask never gives it
    assert why({"missing-mask": "ragged"}) == (
        "DEFECTS['draft_a']: draft_a shows NaN/inf in 'causal', and none of the ids named gives "
        "that there: which defect does?"
    )
    named = {"missing-mask": "ragged", "causal-off-by-one": "causal"}
    # an id that would give NaN, where the case rules it out, accounts for nothing
    report = _report()
    report.rules_out = {"causal": ("missing-mask", "causal-off-by-one")}
    with pytest.raises(AssertionError, match="'causal'.*rules out causal-off-by-one"):
        verify.check_defects({"draft_a": named}, "draft_a", report)
    # a failed offset review needs int32-offset
    assert "shows a failed review in 'offset review'" in why(named, review)


def test_each_defect_passes_every_case_that_rules_it_out():
    """What a case rules out holds: the defect planted alone, with key blocks of one tile, passes
    it; and the controls are built as their names say."""
    ruled = {kind: [c for c in CASES if kind in c.rules_out] for kind in RUNNABLE}
    for kind, cases in ruled.items():
        report = verify.audit(ak.variant(kind), attn.reference, cases, show=False)
        assert report.passed, f"{kind}:\n{report.table()}"
    assert {kind for kind, cases in ruled.items() if cases} == set(RUNNABLE) - {
        "uninit-read",
        "torch-fallback",
        "address-cache",
    }
    top = next(c for c in CASES if "top key" in c.name and c.kwargs["causal"])
    q, k, v = (t.double() for t in top.make_inputs(torch.Generator().manual_seed(0)))
    scores = q @ k.transpose(-2, -1)
    assert bool((scores.argmax(dim=-1) == 0).all())
    equal = next(c for c in CASES if c.name.startswith("equal values"))
    v = equal.make_inputs(torch.Generator().manual_seed(0))[2]
    assert bool((v == v[..., :1, :]).all())


# The answers to 08's Exercise 1 that put one wrong id for a right one and still pass its visible
# test, with the reason the audit cannot tell them apart. Every other such answer fails it.
TWINS = {
    # The rows of draft A's causal cases that see no key hold NaN, as a read of memory never
    # written would; no case rules uninit-read out, since scratch can go unwritten at any size.
    ("draft_a", "causal-off-by-one", "uninit-read"),
    # Draft B's fp16 accumulator overflows to inf in the flat case, where a read of its padding
    # would give NaN too; elsewhere its scale gives wrong values in every case it fails.
    ("draft_b", "fp16-accum", "no-rescale"),
    # wrong-scale and fp16-accum give wrong values at every size over one key, in fp32 and fp16
    # alike, and draft C gives wrong values everywhere it runs its kernel.
    ("draft_c", "no-rescale", "fp16-accum"),
    ("draft_c", "zero-fill", "wrong-scale"),
    ("draft_c", "zero-fill", "fp16-accum"),
}


def test_08s_visible_test_tells_each_defect_from_one_put_in_its_place():
    """For each draft of 08, every answer that puts one wrong id, shown by any case, in place of
    a right one fails the visible test (verify.check_defects), except the TWINS."""
    tile = device.current().pick(gpu=128, interpreter=32)
    drafts = nb08_verify.SOURCE.parent / "drafts"
    answer = {"verify": verify}
    exec(nb08_verify.SOLUTION, answer)
    passing = set()
    for draft, named in answer["DEFECTS"].items():
        module = verify.load_module(drafts / f"{draft}.py", BLOCK_M=tile, BLOCK_N=tile)
        kernel = next(k for k in vars(module).values() if hasattr(k, "fn"))
        review = verify.offset_review(kernel, attn.LARGE_SHAPES)
        report = verify.audit(
            module.attention, attn.reference, attn.cases(tile=tile), review=review, show=False
        )
        assert verify.check_defects({draft: named}, draft, report, count=len(named))
        witnesses = [*report.catches, verify.OFFSET_REVIEW]
        for right in named:
            for wrong in set(verify.TAXONOMY) - set(named):
                for witness in witnesses:
                    swapped = {**{d: w for d, w in named.items() if d != right}, wrong: witness}
                    try:
                        verify.check_defects({draft: swapped}, draft, report, count=len(named))
                    except AssertionError:
                        continue
                    passing.add((draft, right, wrong))
    assert passing == TWINS


def test_load_module_overrides_existing_names_only(tmp_path):
    path = tmp_path / "draft_x.py"
    path.write_text("BLOCK_M = 128\n\ndef block():\n    return BLOCK_M\n")
    module = verify.load_module(path, BLOCK_M=32)
    assert module.block() == 32
    assert not (tmp_path / "__pycache__").exists()  # course/ stays as built
    with pytest.raises(AttributeError, match="defines no BLOCK_Q"):
        verify.load_module(path, BLOCK_Q=32)
