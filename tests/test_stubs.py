"""What a student sees with nbgrader's stub still in place, on both paths Triton can take."""

import pytest
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime import JITFunction

from grader.runtime import checks, stubs
from tests import kernels


def test_launching_a_stub_kernel_becomes_one_sentence(dev):
    """Whatever the mode, launching the stub fails, and explain() names the kernel."""
    x = checks.randn(8, gen=checks.generator(0))
    with pytest.raises(Exception) as info:
        kernels.launch(kernels.relu_stub)(x, x.clone())
    raised = info.value
    if dev.is_gpu:  # the compiler rejects the `raise` statement
        assert isinstance(raised, triton.CompilationError), repr(raised)
    else:  # the interpreter runs it and wraps the NotImplementedError
        assert isinstance(raised.__cause__, NotImplementedError), repr(raised)
    print(
        f"Triton {triton.__version__} in {dev.mode} mode raised {type(raised).__name__}: "
        f"{str(raised)[-200:]!r}"
    )
    sentence = stubs.explain(raised)
    assert sentence is not None and sentence.startswith("`relu_stub` still holds the exercise stub")


def test_a_stub_in_a_helper_the_kernel_calls_is_named_in_the_interpreter(dev):
    """09's kernels call Exercise 1's `tile_coords`: left as the stub, it is the one named."""
    if dev.is_gpu:
        pytest.skip("the compiler's error names the kernel it compiles")
    x = checks.randn(8, gen=checks.generator(0))
    with pytest.raises(Exception) as info:
        kernels.launch(kernels.relu_calls_a_stub)(x, x.clone())
    sentence = stubs.explain(info.value)
    assert sentence is not None and sentence.startswith("`stub_helper` still holds the exercise")


def test_compiler_error_for_stub_kernel_becomes_one_sentence():
    """On a GPU the kernel is compiled; compile it for sm_90 here to get the compiler's error."""
    # In interpreter mode @triton.jit returns an interpreted function; compile the same code.
    compiled_kind = JITFunction(kernels.relu_stub.fn)
    source = ASTSource(
        fn=compiled_kind,
        signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        constexprs={"BLOCK": 128},
    )
    with pytest.raises(triton.CompilationError) as info:
        triton.compile(source, target=GPUTarget("cuda", 90, 32))
    assert "Raise" in str(info.value)  # the compiler's words: "unsupported AST node type: Raise"
    sentence = stubs.explain(info.value)
    assert sentence is not None
    assert sentence.startswith("`relu_stub` still holds the exercise stub")


def test_other_errors_are_left_alone():
    assert stubs.explain(ValueError("shape mismatch")) is None
    # Triton 3.9's `tl.make_block_ptr` raises a NotImplementedError that says why: not a stub
    removed = NotImplementedError("Block pointers have been removed in favor of the tensor ...")
    assert stubs.explain(removed) is None
    assert stubs.explain(RuntimeError("NotImplementedError mentioned in passing")) is None


def test_call_graded_passes_other_errors_through_unchanged():
    def broken():
        raise ValueError("bad shape")

    with pytest.raises(ValueError, match="bad shape"):
        checks.call_graded(broken)
