"""kernelguard as a layer beside the scan (grader.grading.detectors): each attack of the course's
corpus that it adds to the scan is flagged, naming its cell; the reference solutions and the
slow-but-honest variants of tests/known_wrong/ are not; a cell it cannot read is reported, not a
reason to stop; and its routes reach the findings of a submission. The evaluation behind it:
results/2026-11-26-kernelguard.md."""

import importlib
import pkgutil
from functools import cache

import nbformat
import pytest

import tests.known_wrong
from grader.authoring import build
from grader.grading import assemble, detectors, findings, roles
from tests import hostile
from tests.conftest import ROOT
from tests.hostile import kept_outputs

CHEATING = "matches kernelguard's rule"


@cache
def materials(assignment: str) -> hostile.Materials:
    (path,) = (ROOT / "course" / assignment).glob("*.ipynb")
    release = nbformat.read(path, as_version=4)
    source = build.to_notebook(build.SOLUTIONS / assignment / f"{path.stem}.py")
    return hostile.Materials(assignment, path.stem, release, source)


def routes(nb, assignment: str) -> list[str]:
    release = materials(assignment).release
    found = detectors.routes(detectors.answer_cells(nb, release), detectors.entry_points(release))
    return [f"{r.kind}: {r}" for r in found]


def appended(assignment: str, grade_id: str, code: str):
    """The answered notebook with `code` at the end of the answer cell `grade_id`."""
    m = materials(assignment)
    return m.appended(m.answered(), grade_id, code)


def replaced(assignment: str, grade_id: str, source: str):
    """The answered notebook with the answer cell `grade_id` replaced by `source`."""
    m = materials(assignment)
    nb = m.answered()
    m.cell(nb, grade_id).source = source
    return nb


def _attention_kernels(*names: str) -> str:
    """tests/attention_kernels.py up to its launchers, with the variants `names` after it."""
    text = (ROOT / "tests" / "attention_kernels.py").read_text()
    head = text[: text.index("def torch_fallback")]
    return head + "".join(
        text[text.index(f"def {n}(") :].split("\n\n\n")[0] + "\n\n\n" for n in names
    )


def _known_wrong(notebook: str, grade_id: str, name: str) -> str:
    for info in pkgutil.iter_modules(tests.known_wrong.__path__):
        module = importlib.import_module(f"tests.known_wrong.{info.name}")
        if module.NOTEBOOK == notebook:
            return module.WRONG[grade_id][name]
    raise KeyError(notebook)


# Each attack the scan does not flag and kernelguard does: (notebook, the submission, its cell).
ADDED = {
    "02: a launcher that keeps its outputs by address": (
        "02_first_kernels",
        lambda: appended("02_first_kernels", "fused-kernel", kept_outputs.INLINE),
        "fused-kernel",
    ),
    "02: the speed cheats' caching wrapper around the launcher": (
        "02_first_kernels",
        lambda: appended(
            "02_first_kernels", "fused-kernel", kept_outputs.WRAPPER + "\n\n" + kept_outputs.WRAPPED
        ),
        "fused-kernel",
    ),
    "07: tests/attention_kernels.py's address cache as the launcher": (
        "07_flash_attention",
        lambda: replaced(
            "07_flash_attention",
            "flash-attention-kernel",
            _attention_kernels("address_cache") + "flash_attention = address_cache()\n",
        ),
        "flash-attention-kernel",
    ),
    "08: the known-wrong fix that remembers results by input address": (
        "08_verify",
        lambda: replaced(
            "08_verify",
            "attention-fixed",
            _known_wrong(
                "08_verify", "attention-fixed", "address-cache: results remembered by input address"
            ),
        ),
        "attention-fixed",
    ),
    "08: draft_b handed in as the fix, its address cache left in": (
        "08_verify",
        lambda: replaced(
            "08_verify",
            "attention-fixed",
            (ROOT / "course" / "08_verify" / "drafts" / "draft_b.py").read_text(),
        ),
        "attention-fixed",
    ),
}


@pytest.mark.parametrize("attack", list(ADDED))
def test_an_attack_the_scan_misses_is_flagged_in_its_cell(attack):
    notebook, submission, cell = ADDED[attack]
    found = routes(submission(), notebook)
    assert found, attack
    assert all(f.startswith(f"cheating: cell {cell} {CHEATING}") for f in found), found
    assert any("(result reuse)" in f for f in found), found


def test_a_wrapper_defined_in_one_cell_and_applied_in_another_is_flagged_in_both():
    m = materials("02_first_kernels")
    nb = m.appended(m.answered(), "add-kernel", kept_outputs.WRAPPER)
    nb = m.appended(nb, "fused-kernel", kept_outputs.WRAPPED)
    found = routes(nb, "02_first_kernels")
    assert [f.split(" matches")[0] for f in found] == [
        "cheating: cell add-kernel",
        "cheating: cell fused-kernel",
    ], found
    assert all(f.endswith("(result reuse) with the other answer cells") for f in found), found


SOLUTIONS = sorted(p.name for p in (ROOT / "course").iterdir() if p.is_dir())


@pytest.mark.parametrize("notebook", SOLUTIONS)
def test_the_reference_solutions_are_not_flagged(notebook):
    nb = materials(notebook).answered()
    assert detectors.answer_cells(nb, materials(notebook).release), "no answer cell read"
    assert routes(nb, notebook) == []


SLOW = [
    (m.NOTEBOOK, grade_id, name, source)
    for m in (
        importlib.import_module(f"tests.known_wrong.{info.name}")
        for info in pkgutil.iter_modules(tests.known_wrong.__path__)
    )
    for grade_id, variants in getattr(m, "SLOW", {}).items()
    for name, source in variants.items()
]


@pytest.mark.parametrize(
    "notebook, grade_id, name, source", SLOW, ids=[f"{n}:{g}:{w}" for n, g, w, _ in SLOW]
)
def test_slow_but_honest_variants_are_not_flagged(notebook, grade_id, name, source):
    if not isinstance(source, str):  # a variant that also edits given cells
        source = source.exercise
    assert routes(replaced(notebook, grade_id, source), notebook) == []


def test_a_helper_that_keeps_a_scratch_buffer_is_not_flagged():
    """Only the functions the release's cells call are entry points: as one, this helper would
    match LAST_CALL_REPLAY."""
    helper = (
        "\n\n_SCRATCH = {}\n\n\ndef scratch(q):\n    key = (q.shape, q.dtype, q.device)\n"
        "    if key not in _SCRATCH:\n"
        "        _SCRATCH[key] = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)\n"
        "    return _SCRATCH[key]\n"
    )
    nb = appended("07_flash_attention", "flash-attention-kernel", helper)
    assert routes(nb, "07_flash_attention") == []


def test_a_cell_kernelguard_cannot_read_is_reported_and_the_others_are_still_read():
    m = materials("02_first_kernels")
    deep = "\n\ndef total(x):\n    return " + " + ".join(["x"] * 1000) + "\n"
    nb = m.appended(m.answered(), "add-kernel", deep)
    nb = m.appended(nb, "fused-kernel", kept_outputs.INLINE)
    found = routes(nb, "02_first_kernels")
    assert found[0] == (
        "dynamic-code: cell add-kernel is code that kernelguard cannot read (RecursionError)"
    ), found
    assert [f.split(" matches")[0] for f in found[1:]] == ["cheating: cell fused-kernel"], found


def test_a_cell_that_is_not_python_is_left_to_fail_when_it_runs():
    m = materials("02_first_kernels")
    nb = m.appended(m.answered(), "add-kernel", "def broken(:\n")
    nb = m.appended(nb, "fused-kernel", kept_outputs.INLINE)
    assert [f.split(" matches")[0] for f in routes(nb, "02_first_kernels")] == [
        "cheating: cell fused-kernel"
    ]


def test_only_the_answer_cells_are_read():
    """A cell added after the answer cells is not an answer (the trusted side drops it)."""
    m = materials("02_first_kernels")
    nb = m.answered()
    nb.cells.append(nbformat.v4.new_code_cell(kept_outputs.INLINE))
    assert routes(nb, "02_first_kernels") == []


def test_its_routes_reach_the_submissions_findings(tmp_path):
    m = materials("02_first_kernels")
    nb = m.appended(m.answered(), "fused-kernel", kept_outputs.INLINE)
    nbformat.write(nb, tmp_path / f"{m.notebook}.ipynb")
    submitted = findings.inspect(
        assemble.read(tmp_path, {m.notebook: m.release}), {m.notebook: m.release}
    )
    found = findings.classify(run=None, submitted=submitted, graded=None, score=None, max_score=0.0)
    cheating = [f for f in found if f.kind == "cheating"]
    assert len(cheating) == 1 and "cell fused-kernel matches kernelguard's rule" in str(
        cheating[0]
    ), [str(f) for f in found]


# -- reaches: what answer cells do to the student's own process ---------------------------------

REACHES = {
    "from grader.runtime import checks\nchecks.check = print": (
        "cheating",
        "replaces grader.runtime.checks.check",
    ),
    "import torch\ntorch.allclose = lambda *a, **k: True": ("cheating", "replaces torch.allclose"),
    "import grader.runtime.perf as p\np.__dict__['grade'] = print": (
        "cheating",
        "writes through grader.runtime.perf.__dict__",
    ),
    "from unittest import mock\nmock.patch('torch.sum').start()": (
        "cheating",
        "patches with unittest.mock",
    ),
    "import sys\nx = sys._getframe(1).f_back.f_locals": (
        "dynamic-code",
        "reads the caller's frames",
    ),
    "vars(m)['check'] = print": ("dynamic-code", "reaches a namespace through vars()"),
    "import ctypes": ("dynamic-code", "uses ctypes"),
    "exec('x = 1')": ("dynamic-code", "runs code from a string with exec"),
    "open('/proc/self/mem', 'rb')": ("dynamic-code", "names a process's memory"),
    "%%bash\necho hi": ("dynamic-code", "runs the magic %bash"),
}


@pytest.mark.parametrize("code", list(REACHES))
def test_reaching_into_the_students_own_process_is_named_in_its_cell(code):
    kind, what = REACHES[code]
    found = detectors.reaches([("add-kernel", code)])
    assert any(r.kind == kind and r.cell == "add-kernel" and what in r.what for r in found), found


def test_reaches_follows_imports_over_the_cells_in_order():
    found = detectors.reaches([("a", "import torch as t"), ("b", "t.matmul = print")])
    assert [(r.cell, r.what) for r in found] == [("b", "replaces torch.matmul")]


@pytest.mark.parametrize("notebook", SOLUTIONS)
def test_the_reference_solutions_reach_nothing(notebook):
    m = materials(notebook)
    assert detectors.reaches(detectors.answer_cells(m.answered(), m.release), m.release) == []


NOT_A_KERNEL = "binds attn_fwd_kernel to what is not a Triton kernel"
KERNEL_NAMES = {  # 07's kernel attn_fwd_kernel, bound or changed in an answer cell
    "class W:\n    pass\n\n\nattn_fwd_kernel = W()": NOT_A_KERNEL,
    "def attn_fwd_kernel(*args):\n    pass": NOT_A_KERNEL,
    "attn_fwd_kernel.run = print": "changes attn_fwd_kernel.run",
    "attn_fwd_kernel.__dict__['run'] = print": "changes attn_fwd_kernel.__dict__",
    "setattr(attn_fwd_kernel, 'run', print)": "changes attn_fwd_kernel with setattr",
    "from os import path as attn_fwd_kernel": NOT_A_KERNEL,
    "def f():\n    global attn_fwd_kernel\n    attn_fwd_kernel = print": NOT_A_KERNEL,
    "def f():\n    attn_fwd_kernel = print": None,  # a local of f's
    "@triton.jit\ndef attn_fwd_kernel(Q):\n    pass": None,
    "attn_fwd_kernel = triton.jit(_body)": None,
    "@triton.autotune(configs=[], key=[])\n@triton.jit\ndef attn_fwd_kernel(Q):\n    pass": None,
    "import triton\nimport triton.language as tl\nfrom triton import jit\n\n\n@jit\n"
    "def attn_fwd_kernel(Q):\n    pass": None,  # Triton's own decorator, imported
    # a decorator of the student's own under Triton's names: a kernel class whose run is theirs
    "def jit(fn):\n    return _Mine(fn)\n\n\nattn_fwd_kernel = jit(attn_fwd_kernel.fn)": (
        "binds jit, through which a kernel the grader launches is made"
    ),
    "import numpy as triton": "binds triton, through which a kernel the grader launches is made",
}


@pytest.mark.parametrize("code", list(KERNEL_NAMES))
def test_a_kernel_name_bound_to_anything_but_a_triton_kernel_is_flagged(code):
    """The judge launches the student's kernels by name in the student's process: a wrapper
    there could compute the output with torch and launch the kernel for show."""
    found = detectors.reaches(
        [("flash-attention-kernel", code)], materials("07_flash_attention").release
    )
    said = [r.what for r in found if r.kind == "cheating"]
    assert (KERNEL_NAMES[code] is None) == (not said), said
    assert KERNEL_NAMES[code] is None or any(KERNEL_NAMES[code] in w for w in said), said


def test_the_names_the_release_imports_are_known_to_reaches():
    m = materials("00_setup")
    found = detectors.reaches([("relu-kernel", "checks.check = print")], m.release)
    assert [(r.kind, r.what) for r in found] == [
        ("cheating", "replaces grader.runtime.checks.check")
    ]
    assert detectors.reaches([("relu-kernel", "checks.check = print")]) == []  # without it


def test_the_judge_launches_a_kernel_only_under_a_name_bound_to_it_alone():
    m = materials("07_flash_attention")
    answered = m.answered()
    assert {"attn_fwd_kernel", "attn_fwd_causal_kernel"} <= roles.launchable(answered)
    wrapped = m.appended(answered, "flash-attention-kernel", "attn_fwd_kernel = print")
    assert "attn_fwd_kernel" not in roles.launchable(wrapped)
    assert "attn_fwd_causal_kernel" in roles.launchable(wrapped)
    # a kernel made through a `jit` of the student's own, the other still through triton.jit
    own = "def jit(fn):\n    return fn\n\n\nattn_fwd_kernel = jit(attn_fwd_kernel.fn)"
    mine = m.appended(answered, "flash-attention-kernel", own)
    assert "attn_fwd_kernel" not in roles.launchable(mine)
    assert "attn_fwd_causal_kernel" in roles.launchable(mine)
    # `triton` itself rebound: nothing made through it is launched
    shadowed = m.appended(answered, "flash-attention-kernel", "import numpy as triton")
    assert not {"attn_fwd_kernel", "attn_fwd_causal_kernel"} & roles.launchable(shadowed)
