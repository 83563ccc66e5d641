"""The checker's diagnosis of a failure (grader.runtime.hints), the re-runs of checks.check that
add to it, and the same verdict in the interpreter as on a GPU for tl.dot in TF32
(grader.runtime.precision). Each pattern is shown to appear where it fits and to stay silent
where it does not."""

import math

import pytest
import torch
import triton
import triton.language as tl

from grader.runtime import bounds, checks, hints, precision


def failure(actual, expected, **tolerance) -> checks.KernelCheckError:
    with pytest.raises(checks.KernelCheckError) as caught:
        checks.compare(actual, expected, **tolerance)
    return caught.value


def patterns(error: checks.KernelCheckError) -> list[str]:
    assert all(f"[{h.pattern}]" in str(error) for h in error.hints), "every hint is rendered"
    return [h.pattern for h in error.hints]


def gen(seed=0):
    return checks.generator(seed, where="cpu")


def test_wrong_only_in_the_last_tile_points_at_the_mask():
    expected = checks.randn(1000, gen=gen())
    actual = expected.clone()
    actual[896:] += 1.0  # the last partial tile of 128
    error = failure(actual, expected)
    assert patterns(error) == ["missing-mask"]
    assert "elements 896 to 999 of 1000 are wrong (896 is a multiple of 128" in str(error)


def test_never_written_from_an_index_on_points_at_the_grid():
    expected = checks.randn((40, 30), gen=gen())
    actual = expected.clone()
    actual[32:] = checks.poisoned((8, 30), torch.float32, where="cpu")
    error = failure(actual, expected)
    assert patterns(error) == ["coverage"] and "rows 32 to 39 of 40" in str(error)


def test_errors_spread_over_the_output_are_not_blamed_on_the_mask():
    expected = checks.randn((40, 30), gen=gen())
    actual = expected.clone()
    actual[3, 7] += 1.0
    actual[35, 2] -= 2.0
    assert "missing-mask" not in patterns(failure(actual, expected))


def test_a_wrong_last_row_of_a_few_is_not_blamed_on_the_mask():
    """A softmax that never rescales its running sum is wrong in the rows whose maximum comes
    after the first chunk; of 4 rows, now and then in the last one alone."""
    expected = torch.softmax(checks.randn((4, 1000), gen=gen()), dim=1)
    actual = expected.clone()
    actual[3] *= 0.8
    error = failure(actual, expected)
    assert patterns(error) == ["row-normalisation"], str(error)


def test_a_constant_factor_is_a_scale_and_log2e_is_named():
    expected = checks.randn((16, 64), gen=gen())
    error = failure(expected * 0.125, expected)
    assert patterns(error) == ["wrong-scale"] and "0.125 times" in str(error)
    error = failure(expected * math.log2(math.e), expected)
    assert patterns(error) == ["wrong-scale"] and "log2(e)" in str(error)


def test_a_factor_per_row_is_the_normaliser():
    expected = torch.softmax(checks.randn((6, 50), gen=gen()).double(), dim=1)
    factors = torch.linspace(0.5, 0.9, 6, dtype=torch.float64)[:, None]
    error = failure((expected * factors).float(), expected)
    assert patterns(error) == ["row-normalisation"]


def test_the_right_values_in_the_wrong_places():
    expected = checks.randn((20, 20), gen=gen())
    assert patterns(failure(expected.t().contiguous(), expected)) == ["misplaced"]


def test_float16_numbers_in_a_float32_output_are_low_precision():
    """A sum of float16 numbers in float16, not the right result rounded once (store-dtype,
    tests/test_hint_causes.py)."""
    a, b = (checks.randn((64, 64), gen=gen(seed), scale=3.0) for seed in (0, 1))
    error = failure((a.half() + b.half()).float(), a.double() + b.double())
    assert patterns(error) == ["low-precision"] and "float16 number" in str(error)


def test_a_float16_output_a_few_units_off_is_low_precision():
    expected = checks.randn((64, 64), gen=gen(), scale=3.0).double()
    actual = (expected * (1 + 3e-3)).half()
    assert patterns(failure(actual, expected)) == ["low-precision"]
    assert "wrong-scale" in patterns(failure((expected * 1.1).half(), expected))


def test_inf_where_the_reference_is_finite_is_an_overflow():
    expected = checks.randn(500, gen=gen())
    actual = expected.clone()
    actual[::7] = float("inf")
    assert patterns(failure(actual, expected)) == ["non-finite"]


def test_numbers_where_the_reference_is_nan():
    expected = torch.softmax(checks.randn((8, 20), gen=gen()).double(), dim=1)
    expected[[5, 7]] = float("nan")  # rows of -inf, in the last half: not a tail
    actual = expected.float()
    actual[[5, 7]] = 0.0
    assert patterns(failure(actual, expected)) == ["expected-nan"]


def test_nan_in_the_first_row_of_every_head_is_the_causal_diagonal():
    expected = checks.randn((2, 3, 16, 8), gen=gen())
    actual = expected.clone()
    actual[..., 0, :] = float("nan")
    actual[..., 1:, :] += 0.1
    assert patterns(failure(actual, expected)) == ["causal-off-by-one"]


def test_unrelated_errors_get_no_hint():
    expected = checks.randn((30, 40), gen=gen())
    actual = expected + checks.randn((30, 40), gen=gen(1))
    error = failure(actual, expected)
    assert error.hints == () and "Likely cause" not in str(error)


def test_a_store_outside_the_output_is_the_mask():
    from tests import kernels

    # the guards around `out` see it on a GPU; in the interpreter, grader.runtime.bounds does
    with pytest.raises((checks.KernelCheckError, bounds.OutOfBoundsError)) as caught:
        checks.check(
            kernels.KNOWN_WRONG["store without mask"],
            kernels.relu_reference,
            lambda g: (checks.randn(1000, gen=g),),
        )
    assert patterns(caught.value) == ["missing-mask"]


# -- re-runs in checks.check ---------------------------------------------------------------------


def assumes_contiguous(x, out):
    """Reads x as if its rows were packed (row stride = number of columns)."""
    rows, cols = x.shape
    out.copy_(torch.as_strided(x, (rows, cols), (cols, 1)) * 2)


def doubles_wrongly(x, out):
    out.copy_(x * 3)


def strided_inputs(g):
    return (checks.randn((9, 20), gen=g)[:, ::2],)  # every other column


def test_right_on_contiguous_copies_points_at_the_strides():
    with pytest.raises(checks.KernelCheckError) as caught:
        checks.check(assumes_contiguous, lambda x: x * 2, strided_inputs)
    assert patterns(caught.value) == ["assumes-contiguous"]
    with pytest.raises(checks.KernelCheckError) as caught:  # wrong on any layout: no such hint
        checks.check(doubles_wrongly, lambda x: x * 2, strided_inputs)
    assert "assumes-contiguous" not in patterns(caught.value)


# -- tl.dot in TF32 ------------------------------------------------------------------------------


@triton.jit
def matmul_default_precision(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    sam,
    sak,
    sbk,
    sbn,
    scm,
    scn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(
            a_ptr + rm[:, None] * sam + kk[None, :] * sak,
            mask=(rm[:, None] < M) & (kk[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + kk[:, None] * sbk + rn[None, :] * sbn,
            mask=(kk[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        )
        acc += tl.dot(a, b)  # the tutorial's call: TF32 on a GPU
    tl.store(
        c_ptr + rm[:, None] * scm + rn[None, :] * scn,
        acc,
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


@triton.jit
def matmul_given_precision(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    sam,
    sak,
    sbk,
    sbn,
    scm,
    scn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    PRECISION: tl.constexpr,
):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(
            a_ptr + rm[:, None] * sam + kk[None, :] * sak,
            mask=(rm[:, None] < M) & (kk[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + kk[:, None] * sbk + rn[None, :] * sbn,
            mask=(kk[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        )
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    tl.store(
        c_ptr + rm[:, None] * scm + rn[None, :] * scn,
        acc,
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


@triton.jit
def matmul_ieee_literal(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    sam,
    sak,
    sbk,
    sbn,
    scm,
    scn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(
            a_ptr + rm[:, None] * sam + kk[None, :] * sak,
            mask=(rm[:, None] < M) & (kk[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + kk[:, None] * sbk + rn[None, :] * sbn,
            mask=(kk[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        )
        acc = tl.dot(a, b, acc, "ieee")
    tl.store(
        c_ptr + rm[:, None] * scm + rn[None, :] * scn,
        acc,
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


def launcher(kernel, **meta):
    def matmul(a, b, out):
        M, K = a.shape
        N = b.shape[1]
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
        kernel[grid](
            a, b, out, M, N, K, *a.stride(), *b.stride(), *out.stride(), BM=16, BN=16, BK=16, **meta
        )

    return matmul


def matmul_inputs(dtype=torch.float32):
    return lambda g: (
        checks.randn((37, 71), gen=g, dtype=dtype),
        checks.randn((71, 53), gen=g, dtype=dtype),
    )


def check_matmul(fn, u=2.0**-24, dtype=torch.float32):
    """As 04 checks its matmul: atol = 4 sqrt(K) u max(|A| @ |B|) (u: float32's unit roundoff,
    or 2^-10 where TF32 is asked for)."""
    seed = checks.new_seed()
    a, b = matmul_inputs(dtype)(checks.generator(seed))
    atol = 4 * math.sqrt(71) * u * float((a.double().abs() @ b.double().abs()).max())
    checks.check(
        fn,
        lambda a, b: a @ b,
        matmul_inputs(dtype),
        seed=seed,
        trials=1,
        atol=atol + checks.tolerance(dtype)[1],
    )


def test_the_tutorials_tl_dot_on_float32_fails_as_on_a_gpu(dev):
    """In the interpreter, through the emulation; on a GPU, by itself, with the same hint."""
    with pytest.raises(checks.KernelCheckError) as caught:
        check_matmul(launcher(matmul_default_precision))
    error = caught.value
    assert patterns(error) == ["tf32"]
    assert "`matmul_default_precision` calls tl.dot on float32 blocks" in str(error)
    assert 'input_precision="ieee"' in str(error)
    assert ("on a GPU, `out` is wrong" in str(error)) != dev.is_gpu


@pytest.mark.parametrize(
    "fn, dtype, u",
    [
        (launcher(matmul_given_precision, PRECISION="ieee"), torch.float32, 2.0**-24),
        (launcher(matmul_ieee_literal), torch.float32, 2.0**-24),
        # float16 blocks: input_precision does not apply, and no TF32 is emulated
        (launcher(matmul_default_precision), torch.float16, 2.0**-24),
    ],
    ids=["ieee-constexpr", "ieee-positional", "float16-default"],
)
def test_ieee_or_float16_dots_pass(fn, dtype, u):
    check_matmul(fn, u=u, dtype=dtype)


def test_tf32_asked_for_passes_with_a_tf32_tolerance_and_fails_without():
    check_matmul(launcher(matmul_given_precision, PRECISION="tf32"), u=2.0**-10)
    with pytest.raises(checks.KernelCheckError, match=r"\[tf32\]"):
        check_matmul(launcher(matmul_given_precision, PRECISION="tf32"))


def test_dot_precisions_are_read_from_the_source_and_the_launch():
    x = torch.zeros(4)
    args = (x,) * 12
    (default,) = precision.dots(matmul_default_precision, args, {"BM": 16})
    assert default.precision == "tf32" and default.code == "tl.dot(a, b)"
    assert default.function == "matmul_default_precision"
    for value in ("ieee", "tf32", "tf32x3"):
        (given,) = precision.dots(matmul_given_precision, args, {"PRECISION": value})
        assert given.precision == value
    (unknown,) = precision.dots(matmul_given_precision, args, {})
    assert unknown.precision is None  # not passed: not known, never counted as TF32
    (literal,) = precision.dots(matmul_ieee_literal, args, {})
    assert literal.precision == "ieee"
    assert precision.tf32_dots(matmul_default_precision, args, {}) != []
    halves = (x.half(),) * 3 + (1,) * 9
    assert precision.tf32_dots(matmul_default_precision, halves, {}) == []


def test_tf32_rounding_keeps_ten_mantissa_bits_to_nearest_even():
    one = 1.0
    ulp = 2.0**-10
    values = torch.tensor(
        [
            one + ulp / 2,
            one + 3 * ulp / 2,
            one + ulp / 4,
            -(one + 0.75 * ulp),
            float("inf"),
            float("nan"),
            0.0,
        ],
        dtype=torch.float32,
    )
    rounded = precision.round_to_tf32(values)
    assert rounded[:4].tolist() == [one, one + 2 * ulp, one, -(one + ulp)]
    assert rounded[4] == float("inf") and rounded[5].isnan() and rounded[6] == 0
    x = checks.randn((8, 10), gen=gen())[:, ::3]
    copy = precision.tf32_copy(x)
    assert copy.stride() == x.stride() and copy.shape == x.shape
    assert torch.equal(copy, precision.round_to_tf32(x.contiguous()))
    bits = copy.contiguous().view(torch.int32)
    assert bool(((bits & 0x1FFF) == 0).all())


def test_a_hint_renders_its_pattern_evidence_and_cause():
    hint = hints.Hint("wrong-scale", "every output is 2 times the expected value", "a scale")
    error = checks.KernelCheckError("`out` is wrong\nmore", [hint])
    assert str(error) == (
        "`out` is wrong\nLikely cause [wrong-scale]: every output is 2 times the expected value; "
        "a scale\nmore"
    )
    assert error.detail == "`out` is wrong\nmore"


def test_the_known_wrong_corpus_states_a_hint_for_every_entry():
    """Each module of tests/known_wrong with HINTS names, for every WRONG entry and nothing else,
    the pattern its failure must carry (or None); each pattern named is one the checker knows."""
    import importlib
    import pkgutil

    import tests.known_wrong

    known = set(hints.PATTERNS)
    for info in pkgutil.iter_modules(tests.known_wrong.__path__):
        module = importlib.import_module(f"tests.known_wrong.{info.name}")
        if not hasattr(module, "HINTS"):
            continue
        assert module.HINTS.keys() == module.WRONG.keys(), info.name
        for grade_id, variants in module.WRONG.items():
            assert module.HINTS[grade_id].keys() == variants.keys(), (info.name, grade_id)
            stated = module.HINTS[grade_id].values()
            named = {p for s in stated for p in (s if isinstance(s, tuple) else (s,))} - {None}
            assert named <= known, (info.name, grade_id, named - known)


def test_the_audit_of_08_leaves_the_hints_out():
    """08's exercise is to name the defects (ids like the hints' patterns) from the audit."""
    from grader.runtime import verify

    case = verify.Case("doubled", lambda g: (checks.randn(64, gen=g),), {}, (), None, None)
    report = verify.audit(lambda x: x * 2, lambda x: x, [case], show=False)
    assert not report.passed
    assert "is wrong at" in report.explain("doubled") and "Likely cause" not in str(
        report.explain("doubled")
    )
    assert patterns(failure(checks.randn(64, gen=gen()) * 2, checks.randn(64, gen=gen()))) == [
        "wrong-scale"
    ]


def test_a_known_mistake_is_named_only_where_it_explains_the_output_better_than_the_right_one():
    right = torch.linspace(-1, 1, 100, dtype=torch.float64)
    halved = ("the right output halved", "wrong-scale", right / 2, "multiply by 2")
    overflow = ("inf", "non-finite", right / 0, "never named: not finite")
    found = hints.known_mistake((right / 2).float(), right, [overflow, halved])
    assert (found.pattern, found.evidence) == (
        "wrong-scale",
        "the output equals the right output halved",
    )
    assert hints.known_mistake(right.float(), right, [halved]) is None  # the right one is closer
    assert hints.known_mistake((right * 3).float(), right, [halved]) is None  # explains nothing
