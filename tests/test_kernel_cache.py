"""grader.grading.kernel_cache: the release notebooks run once per batch in a sandbox, as grading
runs them, with Triton's cache in a folder of the batch's; each student's sandbox starts from a
copy of it. A real Triton kernel, compiled for sm_90 (which needs no GPU), must then be found in
a student's cache; the other checks stand a notebook that writes a metadata group in for Triton."""

from __future__ import annotations

import os

import nbformat
import pytest

from grader.grading import autograde, devices, jail, kernel_cache
from tests.test_jail import probe

pytestmark = [
    pytest.mark.tooling,  # nbclient and a Python kernelspec come with nbgrader
    pytest.mark.skipif(
        not jail.available() or os.geteuid() != 0,
        reason=f"the grading sandbox needs bwrap ({jail.INSTALL}) and root",
    ),
]
ENV, KERNEL = dict(os.environ), autograde.KERNEL  # nbgrader's environment, as the batch's

COMPILE = """import os, pathlib
folder = pathlib.Path(os.environ["TRITON_CACHE_DIR"]) / {name!r}
folder.mkdir(parents=True)
(folder / "__grp__{name}.json").write_text(repr(RUN_BENCHMARKS))"""

# A kernel compiled for sm_90 without a GPU; `hits` says whether Triton found it in its cache.
TWICE = """import os
os.environ.pop("TRITON_INTERPRET", None)
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def twice(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets) * 2)


hits = []
triton.knobs.compilation.listener = lambda **seen: hits.append(seen["cache_hit"])
source = ASTSource(twice, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, constexprs={"BLOCK": 16})
triton.compile(source, target=GPUTarget("cuda", 90, 32))
"""


def _course(tmp_path, *cells: str):
    """A course directory whose assignment's release notebook has `cells`, after a parameters
    cell that turns the benchmarks on; its source, the answers', compiles one more kernel."""
    source, release = (tmp_path / "course" / step / "00_setup" for step in ("source", "release"))
    release.mkdir(parents=True)
    source.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    parameters = nbformat.v4.new_code_cell("RUN_BENCHMARKS = True")
    parameters.metadata["tags"] = ["parameters"]
    nb.cells = [parameters, *map(nbformat.v4.new_code_cell, cells)]
    nbformat.write(nb, release / "setup.ipynb")
    nb.cells.append(nbformat.v4.new_code_cell(COMPILE.format(name="reference")))
    nbformat.write(nb, source / "setup.ipynb")
    return autograde.Batch("00_setup", "gpu", root=tmp_path / "course", timeout=300)


def _hits_in_a_students_sandbox(tmp_path, kernels) -> list[bool]:
    """What Triton's cache said to TWICE's compilation in a student's sandbox (test_jail's probe),
    the batch's `kernels` handed to it (None: none)."""
    course = tmp_path / "student"
    work = course / "autograded" / "me" / "00_setup"
    work.mkdir(parents=True, exist_ok=True)
    (work / "twice.py").write_text(TWICE)
    run = "runpy.run_path('twice.py', run_name='__main__')"  # as a notebook's cell: __main__
    code = f"import json, runpy; print(json.dumps({run}['hits']))"
    return probe(course, code, scratch=256 << 20, timeout=300, kernels=kernels)


def test_a_kernel_the_release_compiled_is_found_in_each_students_sandbox(tmp_path):
    batch = _course(
        tmp_path,
        COMPILE.format(name="given"),
        "raise NotImplementedError('an answer cell, unanswered')",
        TWICE,
    )
    with kernel_cache.seeded(batch, devices.Pool([]), ["a"], ENV, KERNEL) as built:  # no GPU needed
        assert batch.kernels == built.folder and not built.problem, built.problem
        assert built.kernels == 2 and "2 kernels" in built.line()  # "given" and Triton's own
        # run as grading runs it: the benchmarks off, past the failing cell
        assert (built.folder / "given" / "__grp__given.json").read_text() == "False"
        assert not (built.folder / "reference").exists()  # nothing of the authors' solutions
        for path in [built.folder, *built.folder.rglob("*")]:  # root's, readable by the sandbox
            assert path.stat().st_uid == 0 and path.stat().st_mode & 0o004
        assert _hits_in_a_students_sandbox(tmp_path, built.folder) == [True]
        assert _hits_in_a_students_sandbox(tmp_path, None) == [False]
        with autograde.kernel_sandbox(batch, devices.Gpu(0, 0, "GPU-fake")) as (options, _):
            run = next(o.split("=", 1)[1] for o in options if o.startswith("--KernelManager.ip="))
            spec = jail.read(os.path.join(os.path.dirname(os.path.dirname(run)), "spec.json"))
        argv = jail.command(spec, str(tmp_path / "work"), "unused")
        at = argv.index(jail.KERNEL_CACHE)
        assert argv[at - 2 : at] == ["--ro-bind", str(built.folder)]
        assert argv[argv.index(jail.DROP) + 5] == jail.KERNEL_CACHE  # what the sandbox copies
    assert batch.kernels is None and not built.folder.exists()  # the batch's alone


def test_a_run_that_dies_keeps_what_it_compiled_and_says_why(tmp_path):
    batch = _course(tmp_path, COMPILE.format(name="given"), "import os; os._exit(3)")
    built = kernel_cache.build(batch, ENV, KERNEL, tmp_path / "kernels", None)
    assert built.kernels == 1 and "ended early" in built.problem and built.problem in built.line()
    for notebook in batch.folder("release").rglob("*.ipynb"):
        notebook.unlink()  # a release without notebooks: nothing compiled, nothing handed on
    built = kernel_cache.build(batch, ENV, KERNEL, tmp_path / "none", None)
    assert built.folder is None and built.kernels == 0 and not built.problem


def test_only_a_sandboxed_gpu_batch_with_students_compiles_first(tmp_path):
    batch = _course(tmp_path, COMPILE.format(name="given"))
    gpus = devices.Pool([])
    for mode, jailed, asked, students in [
        ("interpreter", True, True, ["a"]),  # the interpreter keeps no compiled kernels
        ("gpu", False, True, ["a"]),  # without the sandbox, kernels share the host's cache
        ("gpu", True, False, ["a"]),  # --no-kernel-cache
        ("gpu", True, True, []),  # nobody to grade
    ]:
        batch.mode, batch.jailed, batch.kernel_cache = mode, jailed, asked
        with kernel_cache.seeded(batch, gpus, students, ENV, KERNEL) as built:
            assert built is None and batch.kernels is None
