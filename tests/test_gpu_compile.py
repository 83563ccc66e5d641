"""grader.runtime.gpu_compile: in interpreter mode, a kernel that Triton's GPU compiler refuses
fails checks.check with the compiler's message and a hint, though the interpreter runs it right;
a kernel it compiles passes, once per program and launch; the configuration a heuristics or
autotuning wrapper launches is the one compiled; the launch's signature is the one a GPU launcher
would compile; on a GPU nothing is added."""

import importlib.util
import json

import pytest
import torch

from grader.runtime import checks, device, gpu_compile, launches, stubs
from tests import compile_kernels as ck

pytestmark = pytest.mark.skipif(device.current().is_gpu, reason="the check runs in the interpreter")


@pytest.fixture(autouse=True, scope="module")
def compiles_afresh(tmp_path_factory):
    """No verdict kept on disk by an earlier run: the helper compiles what these tests check."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        yield


def inputs(rows=3, cols=100):
    return lambda gen: (checks.randn((rows, cols), gen=gen),)


def check(launch, cols=100, kernels=()):
    checks.check(launch, ck.row_sum_reference, inputs(cols=cols), kernels=kernels)


def runs_right_in_the_interpreter(kernel, cols=100, **meta):
    """The kernel's launch outside a graded call: nothing compiles it, and its sums are right."""
    x = torch.randn(3, cols)
    out = ck.launcher(kernel, **meta)(x, torch.empty(3))
    return torch.allclose(out, x.sum(dim=1), rtol=1e-5, atol=1e-5)


def patterns(error) -> list[str]:
    return [h.pattern for h in error.hints]


@pytest.mark.parametrize(
    "kernel", [ck.row_sum_kernel, ck.chunked_sum_kernel], ids=lambda k: k.__name__
)
def test_a_kernel_the_gpu_compiles_passes_and_is_compiled_for_each_target(kernel):
    before = len(gpu_compile.COMPILED)
    check(ck.launcher(kernel), kernels=[kernel.__name__])
    compiled = gpu_compile.COMPILED[before:]
    assert [(c["kernel"], c["target"], c["error"]) for c in compiled] == [
        (kernel.__name__, 80, None),
        (kernel.__name__, 90, None),
    ]


def test_a_repeated_check_compiles_nothing_again():
    check(ck.launcher(ck.row_sum_kernel))
    before = len(gpu_compile.COMPILED)
    check(ck.launcher(ck.row_sum_kernel))
    assert len(gpu_compile.COMPILED) == before
    check(ck.launcher(ck.row_sum_kernel), cols=300)  # same signature: nothing new either
    assert len(gpu_compile.COMPILED) == before


@pytest.mark.parametrize(
    "kernel, variable",
    [(ck.float16_sum_kernel, "total"), (ck.reshaped_mask_kernel, "mask")],
    ids=["dtype changes", "shape changes"],
)
def test_a_loop_carried_variable_that_changes_fails_with_the_compilers_message(kernel, variable):
    assert runs_right_in_the_interpreter(kernel)
    with pytest.raises(gpu_compile.GPUCompileError) as caught:
        check(ck.launcher(kernel), kernels=[kernel.__name__])
    message = str(caught.value)
    assert message.startswith(
        f"Triton's compiler refuses `{kernel.__name__}` for the GPU (sm_80 and sm_90)"
    )
    assert patterns(caught.value) == ["loop-carried"]
    assert f"Likely cause [loop-carried]: `{variable}` is " in message
    assert "keep its type and shape the same on every iteration" in message
    assert f"Loop-carried variable {variable} has initial type" in message  # the compiler's words


def test_a_refusal_is_raised_in_place_of_what_the_interpreter_then_raised(monkeypatch):
    """The helper compiles while the interpreter runs the launch: where the interpreter fails
    too, the compiler's refusal is what the student reads, as when it came first."""

    def crashes(self, *args, **kwargs):
        raise RuntimeError("the interpreter's own error")

    monkeypatch.setattr(type(gpu_compile.interpreted(ck.float16_sum_kernel)), "run", crashes)
    with pytest.raises(gpu_compile.GPUCompileError, match="Loop-carried variable total") as caught:
        check(ck.launcher(ck.float16_sum_kernel))
    assert caught.value.__suppress_context__  # the interpreter's error is not shown as its cause
    with pytest.raises(RuntimeError, match="the interpreter's own error"):
        check(ck.launcher(ck.row_sum_kernel))  # compiled: the interpreter's error stands


def test_a_global_the_gpu_compiler_refuses_in_a_helper_fails():
    assert runs_right_in_the_interpreter(ck.global_in_helper_kernel)
    with pytest.raises(gpu_compile.GPUCompileError) as caught:
        check(ck.launcher(ck.global_in_helper_kernel))
    assert patterns(caught.value) == ["gpu-compile"]
    assert "Cannot access global variable SCALE" in str(caught.value)


@pytest.mark.parametrize(
    "launch",
    [ck.launcher(ck.double_when_wide), ck.launcher(ck.double_tuned)],
    ids=["heuristics", "autotune"],
)
def test_the_configuration_a_wrapper_launches_is_the_one_compiled(launch):
    assert runs_right_in_the_interpreter(ck.maybe_double_kernel, DOUBLE=True)
    with pytest.raises(gpu_compile.GPUCompileError, match="maybe_double_kernel") as caught:
        check(launch, cols=100)
    assert patterns(caught.value) == ["loop-carried"]


def test_a_launch_whose_configuration_compiles_passes():
    check(ck.launcher(ck.double_when_wide), cols=64)  # DOUBLE=False


def test_the_stub_is_left_to_the_interpreter_which_names_it():
    with pytest.raises(stubs.StubNotFilled, match="`stub_kernel` still holds the exercise stub"):
        check(ck.launcher(ck.stub_kernel))


def test_the_signature_is_the_one_a_gpu_launch_compiles():
    x16 = torch.zeros(64, dtype=torch.float16)
    kernel = ck.maybe_double_kernel
    signature, constexprs, attrs, options = gpu_compile.specialization(
        kernel, (x16, x16[1:], 1), {"BLOCK": 32, "DOUBLE": False, "num_warps": 2}
    )
    assert signature == {
        "x_ptr": "*fp16",
        "out_ptr": "*fp16",
        "n_cols": "constexpr",  # an integer equal to 1 is compiled in
        "BLOCK": "constexpr",
        "DOUBLE": "constexpr",
    }
    assert constexprs == {
        "n_cols": {"value": 1},
        "BLOCK": {"value": 32},
        "DOUBLE": {"value": False},
    }
    assert attrs == [[0, [["tt.divisibility", 16]]]]  # x16 is 16-byte aligned, x16[1:] not
    assert options == {"num_warps": 2}
    meta = {"BLOCK": 32, "DOUBLE": False}
    signature, _, attrs, _ = gpu_compile.specialization(kernel, (x16, x16, 48), meta)
    assert signature["n_cols"] == "i32"
    assert [index for index, _ in attrs] == [0, 1, 2]  # 48 is a multiple of 16
    signature, _, _, _ = gpu_compile.specialization(kernel, (x16, x16, 2**40), meta)
    assert signature["n_cols"] == "i64"


def test_on_a_gpu_the_check_adds_nothing(monkeypatch):
    monkeypatch.setattr(device, "current", lambda: device.Device(device.GPU, "a GPU", (9, 0)))
    before = len(gpu_compile.COMPILED)
    x = torch.randn(3, 100)
    with launches.recording():
        ck.launcher(ck.float16_sum_kernel)(x, torch.empty(3))  # still interpreted here
    assert len(gpu_compile.COMPILED) == before


def test_a_verdict_is_kept_for_later_processes(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(gpu_compile, "_VERDICTS", {})  # as in a new process
    with pytest.raises(gpu_compile.GPUCompileError):
        check(ck.launcher(ck.float16_sum_kernel))
    check(ck.launcher(ck.row_sum_kernel))
    assert len(list((tmp_path / "course-gpu-compile").glob("*.json"))) == 2

    def no_helper(request):
        raise AssertionError("the helper was asked for a verdict kept on disk")

    monkeypatch.setattr(gpu_compile, "_VERDICTS", {})
    monkeypatch.setattr(gpu_compile._HELPER, "ask", no_helper)
    before = len(gpu_compile.COMPILED)
    with pytest.raises(gpu_compile.GPUCompileError, match="Loop-carried variable total"):
        check(ck.launcher(ck.float16_sum_kernel))
    check(ck.launcher(ck.row_sum_kernel))
    assert len(gpu_compile.COMPILED) == before + 4  # two launches, two targets each


EDITED = """
import triton
import triton.language as tl


@triton.jit
def edited_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    total = tl.zeros((BLOCK,), tl.{dtype})
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=0.0)
        total += x
    tl.store(out_ptr + row, tl.sum(total, axis=0))
"""


def edited_kernel(folder, dtype):
    """`edited_kernel` of a module `edited` whose file, in `folder`, accumulates in `dtype`: the
    same kernel, module and launch, edited between runs (float16 changes type in its loop)."""
    path = folder / "edited.py"
    path.parent.mkdir()
    path.write_text(EDITED.format(dtype=dtype))
    spec = importlib.util.spec_from_file_location("edited", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.edited_kernel


def helper_requests(monkeypatch) -> list:
    """The requests the helper is asked from now on, in a process that has kept no verdict."""
    monkeypatch.setattr(gpu_compile, "_VERDICTS", {})
    asked, ask = [], gpu_compile._HELPER.ask
    monkeypatch.setattr(gpu_compile._HELPER, "ask", lambda request: asked.append(1) or ask(request))
    return asked


def test_an_edited_kernel_is_compiled_again_and_the_unedited_one_is_not(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    right, edited = (
        edited_kernel(tmp_path / "a", "float32"),
        edited_kernel(tmp_path / "b", "float16"),
    )
    asked = helper_requests(monkeypatch)
    check(ck.launcher(right))
    assert len(asked) == 1
    asked = helper_requests(monkeypatch)
    with pytest.raises(gpu_compile.GPUCompileError, match="Loop-carried variable total"):
        check(ck.launcher(edited))  # the first one's verdict, kept on disk, is not its
    assert len(asked) == 1
    asked = helper_requests(monkeypatch)
    check(ck.launcher(right))
    with pytest.raises(gpu_compile.GPUCompileError, match="Loop-carried variable total"):
        check(ck.launcher(edited))
    assert asked == []  # both verdicts come from the disk


def corrupted(text: str, passing: str) -> dict[str, str]:
    """Ways a kept verdict (`text`, a refusal) can go wrong; `passing`: another launch's entry,
    a kernel that compiles."""
    kept = json.loads(text)
    altered = [{**r, "error": None} for r in kept["results"]]
    return {
        "cut short": text[: len(text) // 2],
        "a bare list": json.dumps(altered),
        "altered": json.dumps({**kept, "results": altered}),
        "another launch's": passing,
    }


@pytest.mark.parametrize("how", ["cut short", "a bare list", "altered", "another launch's"])
def test_a_corrupted_verdict_on_disk_is_compiled_again_not_trusted(monkeypatch, tmp_path, how):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(gpu_compile, "_VERDICTS", {})
    kept = tmp_path / "course-gpu-compile"
    check(ck.launcher(ck.row_sum_kernel))
    (passing,) = kept.glob("*.json")
    with pytest.raises(gpu_compile.GPUCompileError):
        check(ck.launcher(ck.float16_sum_kernel))
    (refused,) = set(kept.glob("*.json")) - {passing}
    sound = refused.read_text()
    refused.write_text(corrupted(sound, passing.read_text())[how])
    asked = helper_requests(monkeypatch)
    with pytest.raises(gpu_compile.GPUCompileError, match="Loop-carried variable total"):
        check(ck.launcher(ck.float16_sum_kernel))
    assert len(asked) == 1
    assert refused.read_text() == sound  # kept anew


def test_a_helper_that_ends_without_an_answer_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(gpu_compile, "_VERDICTS", {})
    monkeypatch.setattr(gpu_compile, "_HELPER", gpu_compile._Helper())
    monkeypatch.setattr(gpu_compile.sys, "executable", "/bin/false")  # ends at once, status 1
    with pytest.raises(gpu_compile.CheckUnavailable, match=r"ended \(exit status 1\)") as caught:
        check(ck.launcher(ck.row_sum_kernel))
    assert "python -m grader doctor" in str(caught.value)


def test_a_kernel_declared_to_need_sm_90_is_compiled_for_sm_90_alone(monkeypatch):
    """gpu_compile.needs: 09's float8 kernel, which Triton refuses for sm_80, is checked for the
    targets that can run it; other kernels still go to every target."""
    monkeypatch.setattr(gpu_compile, "NEEDS", {})
    gpu_compile.needs("row_sum_kernel", "sm_90")
    assert gpu_compile.targets("row_sum_kernel") == [90]
    assert gpu_compile.targets("chunked_sum_kernel") == [80, 90]
    before = len(gpu_compile.COMPILED)
    check(ck.launcher(ck.row_sum_kernel), cols=33)
    assert [(c["kernel"], c["target"]) for c in gpu_compile.COMPILED[before:]] == [
        ("row_sum_kernel", 90)
    ]


def test_the_compiled_warp_count_is_read_from_the_compile():
    """gpu_compile.compiled_warps: a kernel without warp specialization runs the warps asked
    for (09's notebook checks that a specialized loop runs more, 12 for 4)."""
    x, out = torch.randn(3, 40), torch.empty(3)
    kernel = gpu_compile.interpreted(ck.row_sum_kernel)
    for warps in (2, 4):
        kwargs = {"BLOCK": ck.BLOCK, "num_warps": warps}
        assert gpu_compile.compiled_warps(kernel, (x, out, 40), kwargs, capability=90) == warps
