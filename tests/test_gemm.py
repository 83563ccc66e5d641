"""The course's tuned matmul (solutions/05_autotuning/gemm.py, released with 05): both paths are
correct on awkward shapes and layouts, the path is chosen from the layout, and the config lists
of 05's reference answer, which the benchmarks tune over, are well formed. Runs in the interpreter
here and compiled on a GPU."""

import sys

import pytest
import torch
import triton

from bench import matmul as bench_matmul
from grader.runtime import checks, device
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "solutions" / "05_autotuning"))
import gemm  # noqa: E402

SMALL = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2, "num_warps": 4, "num_stages": 2}


def as_triton(config: dict) -> triton.Config:
    """A config dict (meta-parameters, num_warps, num_stages) as a triton.Config."""
    meta = {k: v for k, v in config.items() if k.isupper()}
    return triton.Config(meta, num_warps=config["num_warps"], num_stages=config["num_stages"])


def reference(a, b):
    return a @ b


def inputs(M, N, K, dtype, transposed=False):
    def make(gen):
        a = checks.randn((M, K), gen=gen, dtype=dtype)
        if transposed:
            b = checks.randn((N, K), gen=gen, dtype=dtype).t()
        else:
            b = checks.randn((K, N), gen=gen, dtype=dtype)
        return a, b

    return make


@pytest.mark.parametrize("tma", [True, False], ids=["descriptors", "pointers"])
@pytest.mark.parametrize("shape", [(64, 48, 80), (48, 96, 16), (80, 32, 112)])
def test_both_paths_are_correct_on_aligned_shapes(tma, shape):
    if tma and not gemm.tma_supported():
        pytest.skip("tensor descriptors need sm_90 (or the interpreter)")
    checks.check(
        lambda a, b, out: gemm.launch(gemm.matmul_kernel, a, b, out, tma=tma, **SMALL),
        reference,
        inputs(*shape, torch.float16),
        atol=1e-3,
    )


@pytest.mark.parametrize("shape", [(160, 96, 80), (48, 96, 16)])
def test_the_persistent_variant_is_correct(shape):
    if not gemm.tma_supported():
        pytest.skip("the persistent variant uses tensor descriptors: sm_90 (or the interpreter)")
    tuned = gemm.autotuned([as_triton(SMALL)], kernel=gemm.matmul_kernel_persistent)
    for kernel, meta in ((gemm.matmul_kernel_persistent, SMALL), (tuned, {})):
        checks.check(
            lambda a, b, out, kernel=kernel, meta=meta: gemm.launch_persistent(
                kernel, a, b, out, **meta
            ),
            reference,
            inputs(*shape, torch.float16),
            atol=1e-3,
        )


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_odd_shapes_and_transposed_operands_take_the_pointer_path(dtype):
    make = inputs(37, 53, 71, dtype, transposed=True)
    a, b = make(checks.generator(1))
    out = torch.empty(37, 53, dtype=dtype, device=a.device)
    assert not gemm.tma_ok(a, b, out)
    checks.check(
        lambda a, b, out: gemm.launch(gemm.matmul_kernel, a, b, out, **SMALL),
        reference,
        make,
        atol=1e-3,
    )


def test_the_layout_decides_the_path():
    dev = device.current().torch_device
    a = torch.empty(64, 32, dtype=torch.float16, device=dev)
    b = torch.empty(32, 48, dtype=torch.float16, device=dev)
    c = torch.empty(64, 48, dtype=torch.float16, device=dev)
    assert gemm.descriptor_layout(a, b, c)
    assert gemm.tma_ok(a, b, c) == gemm.tma_supported()
    assert not gemm.tma_ok(a, b.t().contiguous().t(), c)  # column-major B: no unit row stride
    assert not gemm.descriptor_layout(a, b.t().contiguous().t(), c)
    unaligned = torch.empty(64, 33, dtype=torch.float16, device=dev)[:, :32]  # 66-byte rows
    assert not gemm.tma_ok(unaligned, b, c) and not gemm.descriptor_layout(unaligned, b, c)
    offset = torch.empty(64 * 32 + 1, dtype=torch.float16, device=dev)[1:].view(64, 32)
    assert not gemm.descriptor_layout(offset, b, c)  # its base 2 bytes past an aligned one


def test_config_lists_are_well_formed():
    for full in (False, True):
        space = bench_matmul.reference_space(full)
        assert all(isinstance(c, triton.Config) for c in space)
        assert len({gemm.describe(c) for c in space}) == len(space), "duplicates"
        for c in space:
            assert set(c.kwargs) == {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"}
            for v in (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"]):
                assert v >= 16 and v & (v - 1) == 0
    default, full = bench_matmul.reference_space(), bench_matmul.reference_space(True)
    assert 4 <= len(default) <= 8 < len(full)
    assert gemm.describe(default[0]) == "128x256x64 G8 w8 s3"


def test_the_tuned_launcher_takes_the_persistent_path_where_descriptors_work():
    tuned = gemm.Tuned([as_triton(SMALL)])
    tuned.timed = False  # the layout alone decides, as in the interpreter
    for transposed, expected in ((False, "persistent"), (True, "pointers")):
        if not transposed and not gemm.tma_supported():
            continue  # no descriptors on this GPU: every layout takes the pointer path
        checks.check(tuned, reference, inputs(96, 80, 48, torch.float16, transposed), atol=1e-3)
        assert tuned.last is getattr(tuned, expected), f"transposed={transposed}"
        assert gemm.describe(tuned.best_config) == gemm.describe(as_triton(SMALL))
    config = as_triton(SMALL)
    checks.check(
        lambda a, b, out: gemm.launch_config(config, a, b, out),
        reference,
        inputs(40, 24, 56, torch.float16),
        atol=1e-3,
    )


@pytest.mark.parametrize("cheaper", ["persistent", "pointers"])
def test_where_both_kernels_run_the_cheaper_winner_per_call_is_kept(cheaper, monkeypatch):
    """Where the layout suits descriptors, both kernels are tuned and their winners timed back to
    back (here by a stand-in for per_call_ms, which needs a GPU): the cheaper one per call is
    kept for the layout, and last, best_config and later calls follow it."""
    if not gemm.tma_supported():
        pytest.skip("the persistent variant uses tensor descriptors: sm_90 (or the interpreter)")
    configs = [as_triton(SMALL), as_triton(SMALL | {"BLOCK_N": 16})]

    def prune(configs, named_args, **kwargs):  # a winner of each kernel's own, with no timing
        return [configs[0] if "NUM_PROGRAMS" in kwargs else configs[1]]  # persistent: [0]

    timed = []

    def per_call_ms(plan, a, b, out):
        timed.append(plan.kernel)
        plan(a, b, out)
        return (
            1.0
            if (plan.kernel is gemm.matmul_kernel_persistent) == (cheaper == "persistent")
            else 2.0
        )

    monkeypatch.setattr(gemm, "per_call_ms", per_call_ms)
    tuned = gemm.Tuned(configs, prune)
    tuned.timed = True
    checks.check(tuned, reference, inputs(96, 80, 48, torch.float16), atol=1e-3)
    assert sorted(k.fn.__name__ for k in timed) == ["matmul_kernel", "matmul_kernel_persistent"], (
        "each kernel's winner is timed once, on the layout's first call only"
    )
    assert tuned.last is getattr(tuned, cheaper)
    kept = configs[0] if cheaper == "persistent" else configs[1]
    assert gemm.describe(tuned.best_config) == gemm.describe(kept)
    assert len(tuned.plans) == 1 and len(tuned.cache) == 2, "one plan; both kernels' keys tuned"


def test_a_kept_plan_serves_only_its_layout_and_reads_each_calls_tensors():
    """The tuned launcher keeps one plan per layout; a later call with the same layout computes
    with its own tensors, and a change of strides, dtype or alignment gets a plan of its own."""
    dev = device.current().torch_device
    gen = checks.generator(3)
    tuned = gemm.Tuned([as_triton(SMALL)])
    tuned.timed = False  # the layout alone decides the kernel, as in the interpreter

    def call(a, b):
        out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=dev)
        tuned(a, b, out)
        want = (a.double() @ b.double()).to(a.dtype)
        torch.testing.assert_close(out, want, atol=1e-2, rtol=1e-2)
        return out

    def make(dtype, *shape):
        return checks.randn(shape, gen=gen, dtype=dtype)

    first = call(make(torch.float16, 64, 48), make(torch.float16, 48, 32))
    second = call(make(torch.float16, 64, 48), make(torch.float16, 48, 32))
    assert len(tuned.plans) == 1, "the same layout twice: one plan"
    assert not torch.allclose(first, second), "the check above tells the two calls apart"
    call(make(torch.float16, 64, 48), make(torch.float16, 32, 48).t())  # B column-major
    call(make(torch.float32, 64, 48), make(torch.float32, 48, 32))  # another dtype
    shifted = make(torch.float16, 64 * 48 + 1)[1:].view(64, 48)  # base not 16-byte aligned
    call(shifted, make(torch.float16, 48, 32))
    assert len(tuned.plans) == 4, "strides, dtype and alignment each get their own plan"
    assert tuned.last is tuned.pointers  # the misaligned call
    call(make(torch.float16, 64, 48), make(torch.float16, 48, 32))  # a kept plan again
    assert tuned.last is (tuned.persistent if gemm.tma_supported() else tuned.pointers)
    assert len({gemm.layout(*p) for p in _layouts(dev)}) == len(_layouts(dev))


def test_a_plan_reuses_its_descriptors_only_for_the_same_addresses(monkeypatch):
    """The persistent kernel's plan keeps the latest call's descriptors: new tensors (at new
    addresses, since the kept descriptors hold the old ones), another row stride and another
    dtype each compute with their own, and the same tensors with new values reuse them. A key
    that leaves out one of the three addresses reuses a stale descriptor when only that tensor
    is new: caught below for each."""
    if not gemm.tma_supported():
        pytest.skip("the persistent variant uses tensor descriptors: sm_90 (or the interpreter)")
    dev = device.current().torch_device
    gen = checks.generator(5)

    def new(dtype=torch.float16, row=48):
        """A (64, 48) with row stride `row`, B (48, 32) and C (64, 32), all new tensors."""
        a = checks.randn((64, row), gen=gen, dtype=dtype)[:, :48]
        b = checks.randn((48, 32), gen=gen, dtype=dtype)
        return [a, b, torch.empty(64, 32, dtype=dtype, device=dev)]

    def right(tuned, a, b, out):
        """Whether tuned(a, b, out) writes a @ b into out."""
        out.fill_(float("nan"))
        tuned(a, b, out)
        want = (a.double() @ b.double()).to(a.dtype)
        return bool(torch.allclose(out, want, atol=1e-2, rtol=1e-2))

    tuned = gemm.Tuned([as_triton(SMALL)])
    tuned.timed = False  # the persistent kernel is kept, as in the interpreter
    assert all(right(tuned, *new()) for _ in range(3)), "new tensors at new addresses"
    kept = new()
    assert right(tuned, *kept)
    kept[0].neg_()
    assert right(tuned, *kept), "the same tensors with new values"
    assert right(tuned, *new(row=64)), "another row stride"
    assert right(tuned, *new(dtype=torch.float32)), "another dtype"
    assert len(tuned.plans) == 3 and all(p.blocks for p in tuned.plans.values()), "persistent"

    for dropped, name in enumerate(("A", "B", "C")):
        monkeypatch.setattr(
            gemm,
            "_addresses",
            lambda *tensors, d=dropped: tuple(t.data_ptr() for t in tensors[:d] + tensors[d + 1 :]),
        )
        stale = gemm.Tuned([as_triton(SMALL)])
        stale.timed = False
        tensors = new()
        assert right(stale, *tensors) and right(stale, *tensors), "same tensors: right"
        tensors[dropped] = new()[dropped]  # only this tensor is new
        assert not right(stale, *tensors), f"a key without {name}'s address must go wrong"


def _layouts(dev):
    """Triples that differ in one thing each: the tensors' data aside, layout() must differ."""
    a, b, c = (torch.empty(32, 32, dtype=torch.float16, device=dev) for _ in range(3))
    return [
        (a, b, c),
        (a, b.t(), c),
        (a.float(), b.float(), c.float()),
        (torch.empty(32 * 32 + 1, dtype=torch.float16, device=dev)[1:].view(32, 32), b, c),
        (torch.empty(32, 40, dtype=torch.float16, device=dev)[:, :32], b, c),
        (a[:16], b, c[:16]),
    ]


def test_launch_config_keeps_a_plan_per_config_and_layout():
    config, other = as_triton(SMALL), as_triton(SMALL | {"BLOCK_N": 16})
    make = inputs(48, 40, 32, torch.float16)
    for cfg in (config, other, config):
        checks.check(lambda a, b, out, cfg=cfg: gemm.launch_config(cfg, a, b, out), reference, make)
    keys = {key[0] for key in gemm._plans}
    assert {tuple(sorted(c.all_kwargs().items())) for c in (config, other)} <= keys


def test_a_pruning_function_sees_the_same_plain_arguments_on_both_paths():
    """The autotuner calls a pruning function with plain data: the candidates as written (not the
    persistent kernel's hooked copies), the named and keyword arguments without the host-made
    descriptors and the grid. Grading sends them to the student's process, where a hooked
    config, a descriptor or a function cannot go. What it keeps comes back as the hooked copies
    the launches need."""
    from grader.runtime import wire
    from tests.served import Served

    if gemm.TensorDescriptor is None:
        pytest.skip("this Triton has no host-made tensor descriptors")
    seen = []

    def prune(configs, named_args, **kwargs):
        seen.append((configs, named_args, kwargs))
        return configs[1:]

    candidates = [as_triton(SMALL), as_triton({**SMALL, "num_stages": 3})]
    hooked = [gemm._with_block_shapes(c) for c in candidates]
    a = torch.randn(64, 32, device=device.current().torch_device)
    named = {"a_ptr": a, "a_desc": gemm.TensorDescriptor.from_tensor(a, [32, 16]), "M": 64}
    kept = gemm.pruning(prune, candidates, hooked, gemm._with_block_shapes)(
        hooked, named, grid=lambda meta: (1,), NUM_PROGRAMS=4
    )
    assert kept == [hooked[1]] and kept[0] is hooked[1]
    ((configs, args, kwargs),) = seen
    assert configs == candidates and all(c.pre_hook is None for c in configs)
    assert set(args) == {"a_ptr", "M"} and kwargs == {"NUM_PROGRAMS": 4}
    codec = wire.Codec(tensor_out=lambda t: wire.spec(t, 1), strict=True)
    for cannot_cross in (hooked, named, {"grid": lambda meta: (1,)}):  # what the autotuner holds
        with pytest.raises(wire.WireError):
            codec.encode(cannot_cross)
    served = Served({"prune": lambda configs, named_args, **kw: configs[1:]})
    try:  # the student's pruning function, called from the judge as at grading
        early = gemm.pruning(served.proxy("prune"), candidates, hooked, gemm._with_block_shapes)
        assert early(hooked, named, grid=lambda meta: (1,), NUM_PROGRAMS=4) == [hooked[1]]
    finally:
        served.close()
    new = as_triton({**SMALL, "BLOCK_K": 32})  # a config of the pruning function's own
    again = gemm.pruning(lambda c, n, **k: [new], candidates, hooked, gemm._with_block_shapes)(
        hooked, named
    )
    assert again[0].kwargs == new.kwargs and again[0].pre_hook is not None
