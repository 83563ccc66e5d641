"""The notebooks' own graded tests reject every known-wrong solution and accept the reference.

For each notebook with a module in tests/known_wrong/, one kernel runs the solution notebook top
to bottom, but for the demonstrations no answer or test cell needs (notebook_session.unneeded);
then, for each wrong source of an exercise (WRONG), the exercise cell is replaced by
it (and the given cells a `WithGiven` rewrites, by theirs) and the cells up to that exercise's
last test cell are run again: a test cell must fail. Where the module states the hint a failure
must carry (HINTS: a pattern of grader.runtime.hints, None for a bug that fits none, or a tuple
of those where the failure depends on memory a read past the end finds), the failure's message
must name that pattern, and only that one. A source a visible test rejects is rejected on every
run: the run drew nothing a later run would draw otherwise (the checks' seed is fixed outside
grading), or it fails a visible test in each of 30 runs.
A source whose hint is a compile error (Triton's GPU compiler refuses it, in interpreter mode
through grader.runtime.gpu_compile) must fail the visible test, where it is first launched.
Slow-but-correct sources (SLOW, GPU only) must pass every test and score 0 in every speed cell.
Right sources written other ways than the reference (OTHER_WAYS: `tl.where`, exp2 with log2(e)
folded in, libdevice, Triton's tutorials' forms) must pass every test cell of their exercise,
hidden lines included, in interpreter mode as on a GPU.
Partial submissions (PARTIAL) must pass every test of the exercises they get right and fail one
of each exercise they do not, where said with the message the module states.
Every answer cell as course/ releases it (nbgrader's stub) must fail every test cell of its
exercise, hidden lines included: what the released notebook earns is nothing, exercise by
exercise, and every graded cell belongs to an exercise.
The reference and the given cells are put back afterwards (tests/test_nbgrader.py proves that
the reference passes).
On a GPU, each source and the reference also run in a second kernel in interpreter mode: every
correctness test cell must give the same verdict there as on the GPU.
"""

import importlib
import json
import os
import pkgutil
import re
from contextlib import contextmanager

import nbformat
import pytest

import tests.known_wrong
from grader.authoring import build
from grader.runtime import device, doctor, handin
from tests.known_wrong import WithGiven
from tests.notebook_session import Session, segments

pytestmark = pytest.mark.slow

MODULES = [
    importlib.import_module(f"tests.known_wrong.{m.name}")
    for m in pkgutil.iter_modules(tests.known_wrong.__path__)
]
CASES = [
    (m.NOTEBOOK, grade_id, name)
    for m in MODULES
    for grade_id, variants in m.WRONG.items()
    for name in variants
]
SOURCES = {
    (m.NOTEBOOK, g, n): src for m in MODULES for g, v in m.WRONG.items() for n, src in v.items()
}
PARTIAL_CASES = [
    (m.NOTEBOOK, name, partial)
    for m in MODULES
    for name, partial in getattr(m, "PARTIAL", {}).items()
]
HINTS = {
    (m.NOTEBOOK, g, n): pattern
    for m in MODULES
    for g, v in getattr(m, "HINTS", {}).items()
    for n, pattern in v.items()
}
# Cases that only the interpreter's bounds check rejects (grader.runtime.bounds): a read past the
# end whose lanes the store masks gives the right output on a GPU.
INTERPRETER_ONLY = {
    (m.NOTEBOOK, g, n)
    for m in MODULES
    for g, names in getattr(m, "INTERPRETER_ONLY", {}).items()
    for n in names
}
OTHER_WAYS = {
    (m.NOTEBOOK, g, n): src
    for m in MODULES
    for g, v in getattr(m, "OTHER_WAYS", {}).items()
    for n, src in v.items()
}
SLOW_CASES = [
    (m.NOTEBOOK, grade_id, name, source)
    for m in MODULES
    for grade_id, variants in getattr(m, "SLOW", {}).items()
    for name, source in variants.items()
]


# Prints what the GPU compile check compiled in a kernel (grader.runtime.gpu_compile.COMPILED),
# and the kernels the notebook declared to need some targets only (gpu_compile.NEEDS).
COMPILED = """
import json
from grader.runtime import gpu_compile
print(json.dumps({"compiled": gpu_compile.COMPILED, "needs": gpu_compile.NEEDS}))
"""


# Defines, in a kernel, `_mark()` and `_drew()`: whether the code run since the mark drew from a
# source a later run would draw from otherwise: a global generator (torch's, NumPy's, Python's)
# moved, or checks.new_seed gave a seed other than checks.VISIBLE_SEED (a fresh one, at grading).
DRAWS = """
import random as _random

import numpy as _numpy
import torch as _torch

from grader.runtime import checks as _checks


def _generators():
    cuda = _torch.cuda.get_rng_state_all() if _torch.cuda.is_initialized() else []
    state = _numpy.random.get_state()
    return [_torch.get_rng_state(), *cuda, _torch.from_numpy(state[1].copy())], (
        state[2:], _random.getstate())


def _mark():
    global _marked
    _marked = _generators()
    _seeds.clear()


def _drew():
    (tensors, rest), (now, now_rest) = _marked, _generators()
    moved = rest != now_rest or any(not _torch.equal(a, b) for a, b in zip(tensors, now))
    return moved or any(s != _checks.VISIBLE_SEED for s in _seeds)


def _recorded(new_seed=_checks.new_seed):
    _seeds.append(new_seed())
    return _seeds[-1]


_seeds = []
_checks.new_seed = _recorded
"""


def _sessions(**env):
    """A function that opens (once) the Session of a notebook, with `env` set for its kernel,
    and keeps what the solution's own run compiled for the GPU as `compiled_by_reference`;
    and, to close them, the ones it opened."""
    opened = {}

    def session(name):
        if name not in opened:
            # the reference's hidden tests are tests/test_nbgrader.py's to run
            opened[name] = Session(
                name,
                env={**os.environ, **env} if env else None,
                hidden_tests=False,
                needed_only=True,
            )
            printed = []
            status, detail = opened[name].run(COMPILED, printed)
            assert status == "ok", detail
            found = json.loads("".join(printed))
            opened[name].compiled_by_reference = found["compiled"]
            opened[name].needs = {k: tuple(v) for k, v in found["needs"].items()}
            assert opened[name].run(DRAWS)[0] == "ok"
        return opened[name]

    return session, opened


@pytest.fixture(scope="module")
def sessions():
    # as the student's copy runs: the checks draw from checks.VISIBLE_SEED, not afresh as while
    # nbgrader grades
    session, opened = _sessions()
    yield session
    for s in opened.values():
        s.close()


@pytest.fixture(scope="module")
def interpreted_sessions():
    """Sessions whose kernels run in interpreter mode, on a machine with a GPU."""
    session, opened = _sessions(COURSE_MODE="interpreter")
    yield session
    for s in opened.values():
        s.close()


def carries_its_hint(case, detail):
    """The failure names the pattern HINTS expects for `case` (no hint where it expects None);
    a case without an entry is not held to one."""
    if case not in HINTS:
        return
    named = re.findall(r"Likely cause \[([a-z0-9-]+)\]", detail)
    expected = HINTS[case] if isinstance(HINTS[case], tuple) else (HINTS[case],)
    assert len(named) <= 1 and (named[0] if named else None) in expected, (
        f"'{case[2]}' should carry the hint {' or '.join(map(str, expected))}, got {named}: "
        + detail
    )


# The hints of a kernel that Triton's GPU compiler refuses: it fails at its first launch. (Not
# `operand-dtype`: a dtype an operation refuses fails where that dtype is first tested.)
COMPILE_ERRORS = {"loop-carried", "gpu-compile", "shape"}


def fails_where_it_must(case, cell):
    """A source that does not compile for the GPU fails the visible test, as it would there."""
    if HINTS.get(case) in COMPILE_ERRORS:
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        assert grade_id.endswith("-visible"), (
            f"'{case[2]}' does not compile for the GPU, yet passed the visible test and failed "
            f"{grade_id}"
        )


REPEATS = 30  # runs in each of which a visible test must fail a known-wrong source


def fails_every_run(session, ran, name):
    """The visible test fails `name` in REPEATS runs of REPEATS. Where the pieces `ran` (the
    exercise, the cells after it up to the failing test, as (a test, hidden, code)) drew nothing
    a later run would draw otherwise, every run is this one; else they run again until there
    have been REPEATS runs, each of which must fail a visible test."""
    printed = []
    assert session.run("print(_drew())", printed)[0] == "ok"
    if "".join(printed).strip() == "False":
        return
    failed = 1
    for _ in range(REPEATS - 1):
        for test, hidden, code in ran:
            if session.run(code)[0] != "ok" and test and not hidden:
                failed += 1
                break
    assert failed == REPEATS, (
        f"'{name}' failed the visible test in {failed} runs of {REPEATS}: its inputs are drawn "
        "afresh (not from checks.new_seed's fixed seed), and some draws let it pass"
    )


def is_test(cell):
    meta = cell.metadata.get("nbgrader", {})
    return meta.get("grade") and not meta["grade_id"].startswith("speed-")


NOTEBOOKS = sorted({m.NOTEBOOK for m in MODULES})
JIT_KERNEL = re.compile(r"^@triton\.jit\s*\ndef (\w+)", re.MULTILINE)
# Graded kernels that are not in an exercise cell: 05's tuned matmul, in gemm.py beside it.
GRADED_ELSEWHERE = {"05_autotuning": {"matmul_kernel", "matmul_kernel_persistent"}}


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_solutions_kernels_compile_for_the_gpu(sessions, dev, notebook):
    """In interpreter mode, the solution's graded calls compiled the kernels they launched for
    sm_80 and sm_90 (grader.runtime.gpu_compile), every graded kernel among them (for the
    targets it was declared to need, where the notebook declared some: 09's float8 kernel), and
    the compiler refused none but the stub 00 shows on purpose."""
    if dev.is_gpu:
        pytest.skip("on a GPU the compiler itself runs at every launch")
    session = sessions(notebook)
    compiled = session.compiled_by_reference
    refused = [
        f"{c['kernel']} (sm_{c['target']}): {c['error']['message']}"
        for c in compiled
        if c["error"] is not None and "NotImplementedError" not in c["error"]["message"]
    ]
    assert not refused, "\n".join(refused)
    graded = set(GRADED_ELSEWHERE.get(notebook, ()))
    for cell in session.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            graded.update(JIT_KERNEL.findall(cell.source))
    clean = {(f, c["target"]) for c in compiled if c["error"] is None for f in c["functions"]}
    missing = [
        f"{k} (sm_{t})"
        for k in sorted(graded)
        for t in session.needs.get(k, (80, 90))
        if (k, t) not in clean
    ]
    assert not missing, f"never compiled for the GPU: {', '.join(missing)}"


@pytest.mark.parametrize(
    "notebook, grade_id, name", CASES, ids=[f"{n}:{g}:{w}" for n, g, w in CASES]
)
def test_known_wrong_solution_is_rejected(sessions, notebook, grade_id, name):
    """Each known-wrong source fails a test cell, with its hint; and a test the student can run
    (a visible test cell, or the visible lines of a hidden-test cell) fails, on every run
    (fails_every_run). After the first failure in a hidden region, only the visible lines of the
    test cells run on: the student's copy."""
    case = (notebook, grade_id, name)
    if case in INTERPRETER_ONLY and device.current().is_gpu:
        pytest.skip("only the interpreter's bounds check rejects it")
    session = sessions(notebook)
    with swapped_in(session, grade_id, SOURCES[case]) as (exercise, cells):
        assert session.run("_mark()")[0] == "ok"
        status, detail = session.run(exercise)
        if status != "ok":  # a wrong source may already fail to define itself; that counts
            carries_its_hint(case, detail)
            return
        ran = [(False, False, exercise)]  # (a test, hidden, code) of each piece run
        hidden_failure = None  # (grade_id, detail) of the first failure, in a hidden region
        for cell, source in cells:
            for hidden, code in segments(source) if is_test(cell) else [(False, source)]:
                if hidden and hidden_failure:
                    continue
                status, detail = session.run(code)
                ran.append((is_test(cell), hidden, code))
                if status == "ok" or not is_test(cell):
                    continue
                if hidden_failure is None:  # rejected, with `detail` as the student reads it
                    carries_its_hint(case, detail)
                    fails_where_it_must(case, cell)
                if not hidden:
                    fails_every_run(session, ran, name)
                    return
                hidden_failure = (cell.metadata["nbgrader"]["grade_id"], detail)
        if hidden_failure is None:
            pytest.fail(f"'{name}' passed every test of {grade_id}")
        pytest.fail(
            f"'{name}' passes every visible test of {grade_id} and fails only the hidden tests of "
            f"{hidden_failure[0]}: {hidden_failure[1]}"
        )


@pytest.mark.parametrize(
    "notebook, grade_id, name",
    sorted(OTHER_WAYS),
    ids=[f"{n}:{g}:{w}" for n, g, w in sorted(OTHER_WAYS)],
)
def test_a_right_solution_written_another_way_passes(sessions, notebook, grade_id, name):
    """Each OTHER_WAYS source passes every test cell of its exercise, hidden lines included: a
    right kernel is not refused for the way it is written (in interpreter mode, libdevice's
    functions come from grader.runtime.interpreted)."""
    assert (notebook, grade_id, name) not in SOURCES, f"'{name}' is in WRONG too"
    session = sessions(notebook)
    with swapped_in(session, grade_id, OTHER_WAYS[notebook, grade_id, name]) as (exercise, cells):
        status, detail = session.run(exercise)
        assert status == "ok", f"'{name}' does not define itself: {detail}"
        for cell, source in cells:
            status, detail = session.run(source)
            assert status == "ok", f"'{name}' fails {cell.id}: {detail}"


# 10's `named_mistake` given the right dK and dV on `drawn` inputs, where dV dwarfs dK: dK
# without sm_scale is within 1% of the largest value as well, yet the right output is closer
RIGHT_OUTPUT_HINT = """
args = tuple(t.double() for t in gradient_inputs(1, 1, 40, 16, kind="drawn")(checks.generator(0)))
right = mistakes("dkdv", args, causal=False)[0]
print(named_mistake(lambda q, k, v, do, out: out.copy_(right), lambda gen: args, "dkdv", False))
"""


@pytest.mark.parametrize("notebook", ["10_flash_backward"])
def test_a_right_output_is_named_no_mistake(sessions, notebook):
    """A right kernel that fails a check on its rounding is told of no known mistake: a hint
    names one only where the output is closer to it than to the right answer."""
    printed = []
    status, detail = sessions(notebook).run(RIGHT_OUTPUT_HINT, printed)
    assert status == "ok", detail
    assert "".join(printed).strip() == "None", "".join(printed)


def _released() -> dict[tuple[str, str], str]:
    """{(notebook, grade_id): source} of every answer cell as course/ releases it."""
    found = {}
    for a in build.assignments():
        nb = nbformat.read(build.COURSE / a.name / a.notebook_name, as_version=4)
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("solution") and cell.cell_type == "code":
                found[a.name, meta["grade_id"]] = cell.source
    return found


RELEASED = _released()


def test_every_graded_cell_belongs_to_an_exercise():
    """A test cell above the first answer cell would be one no stub can fail: the release would
    earn its points."""
    for a in build.assignments():
        assert a.name in NOTEBOOKS, f"{a.name} has no module in tests/known_wrong/"
        nb = nbformat.read(build.COURSE / a.name / a.notebook_name, as_version=4)
        answered = False
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            answered = answered or bool(meta.get("solution"))
            if meta.get("grade") and not meta.get("solution"):
                assert answered, f"{a.name}: {meta['grade_id']} comes before any answer cell"


@pytest.mark.parametrize("notebook, grade_id", sorted(RELEASED), ids=lambda v: v)
def test_an_exercise_as_released_passes_none_of_its_tests(sessions, notebook, grade_id):
    """The release's answer cell in place of the reference (what the reference defined
    forgotten first, as a fresh kernel never had it), the cells after it run to its last test
    cell: every correctness test cell fails, its hidden lines included."""
    session = sessions(notebook)
    reference = session.cells[session.span(grade_id)[0]].source
    forget = "".join(f"globals().pop({n!r}, None)\n" for n in sorted(handin.names(reference).binds))
    with swapped_in(session, grade_id, RELEASED[notebook, grade_id]) as (exercise, cells):
        assert session.run(forget)[0] == "ok"
        session.run(exercise)  # a stub may raise here already; its tests must fail all the same
        passed = []
        for cell, source in cells:
            status, _ = session.run(source)
            if is_test(cell) and status == "ok":
                passed.append(cell.metadata["nbgrader"]["grade_id"])
    assert not passed, f"{grade_id} as released (the stub) passes {passed}"


@contextmanager
def swapped_in(session, grade_id, source):
    """Yields the exercise's replacement source and [(cell, the source to run)] for the cells
    after it up to its last test cell, where a `WithGiven` rewrites given cells; afterwards
    the reference and the given cells are put back."""
    index, last = session.span(grade_id)
    if not isinstance(source, WithGiven):
        source = WithGiven(source)
    cells = session.code_cells(index + 1, last + 1)
    rewritten = {}  # the given cells the source edits, by position in `cells`
    for old, new in source.given.items():
        (position,) = [i for i, c in enumerate(cells) if old in c.source and not is_test(c)]
        rewritten[position] = rewritten.get(position, cells[position].source).replace(old, new)
    try:
        yield source.exercise, [(c, rewritten.get(p, c.source)) for p, c in enumerate(cells)]
    finally:
        for cell in [session.cells[index], *(cells[p] for p in rewritten)]:
            status, detail = session.run(cell.source)  # the reference and given cells, back
            assert status == "ok", f"the reference no longer defines itself: {detail}"


@pytest.mark.parametrize(
    "notebook, name, partial", PARTIAL_CASES, ids=[f"{n}:{w}" for n, w, _ in PARTIAL_CASES]
)
def test_partial_solution_earns_its_exercises_only(sessions, notebook, name, partial):
    session = sessions(notebook)
    spans = {g: session.span(g) for g in (*partial.sources, *partial.earns, *partial.fails)}
    first = min(index for index, _ in spans.values())
    last = max(end for _, end in spans.values())
    status = {}  # test cell id -> (status, error), as the notebook runs top to bottom
    try:
        for cell in session.code_cells(first, last + 1):
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            if grade_id.startswith("speed-"):
                continue
            status[cell.id] = session.run(partial.sources.get(grade_id, cell.source))
        for grade_id in partial.earns:
            index, end = spans[grade_id]
            for cell in session.code_cells(index + 1, end + 1):
                if is_test(cell):
                    assert status[cell.id][0] == "ok", (
                        f"'{name}' loses {cell.id} of {grade_id}, which it gets right: "
                        f"{status[cell.id][1]}"
                    )
        for grade_id in partial.fails:
            index, end = spans[grade_id]
            tests = [c for c in session.code_cells(index + 1, end + 1) if is_test(c)]
            failed = [status[c.id][1] for c in tests if status[c.id][0] != "ok"]
            assert failed, f"'{name}' passed every test of {grade_id}"
            if grade_id in partial.says:
                assert partial.says[grade_id] in failed[0], (
                    f"'{name}' should say {partial.says[grade_id]!r} in {grade_id}: {failed[0]}"
                )
    finally:
        for grade_id in partial.sources:
            status_back, detail = session.run(session.cells[spans[grade_id][0]].source)
            assert status_back == "ok", f"the reference no longer defines itself: {detail}"


@pytest.mark.gpu
@pytest.mark.parametrize(
    "notebook, grade_id, name, source",
    SLOW_CASES,
    ids=[f"{n}:{g}:{w}" for n, g, w, _ in SLOW_CASES],
)
def test_slow_but_correct_solution_scores_no_speed_points(
    sessions, notebook, grade_id, name, source
):
    session = sessions(notebook)
    index, last = session.span(grade_id, speed=True)
    try:
        status, detail = session.run(source)
        assert status == "ok", f"'{name}' does not define itself: {detail}"
        speed_cells = 0
        for cell in session.code_cells(index + 1, last + 1):
            printed = []
            status, detail = session.run(cell.source, printed)
            assert status == "ok", f"'{name}' must be correct, but {cell.id} fails: {detail}"
            if cell.metadata.get("nbgrader", {}).get("grade_id", "").startswith("speed-"):
                speed_cells += 1
                score = float(printed[-1])
                shown = "".join(p if isinstance(p, str) else f"{json.dumps(p)}\n" for p in printed)
                assert score == 0.0, f"'{name}' earned {score} in {cell.id}:\n{shown}"
        assert speed_cells, f"{grade_id} has no speed cell"
    finally:
        status, detail = session.run(session.cells[index].source)
        assert status == "ok", f"the reference no longer defines itself: {detail}"


def verdict(session, grade_id, source) -> dict[str, bool]:
    """Whether each correctness test cell of `grade_id` passes with `source` in the exercise cell
    (the reference where `source` is None), every cell after it run in turn."""
    index, _ = session.span(grade_id)
    passed = {}
    with swapped_in(session, grade_id, source or session.cells[index].source) as (exercise, cells):
        defined = session.run(exercise)[0] == "ok"
        for cell, cell_source in cells:
            ok = defined and session.run(cell_source)[0] == "ok"
            if is_test(cell):
                passed[cell.metadata["nbgrader"]["grade_id"]] = ok
    return passed


def interpreter_unusable() -> str | None:
    """Why this machine's Triton and NumPy cannot run the course in interpreter mode, if so."""
    triton, numpy = doctor.version("triton"), doctor.version("numpy")
    fix = doctor.INTERPRETER_NUMPY_FIX
    if doctor._tuple(triton) < fix["triton"] and doctor._tuple(numpy) >= fix["numpy"]:
        return (
            f"Triton {triton} with NumPy {numpy} cannot run the interpreter (docs/versions.md, "
            "'Known-bad'): install numpy==2.3.5 beside it, or run with Triton 3.7 or newer"
        )
    return None


EXERCISES = sorted({(n, g) for n, g, _ in CASES})
VERDICT_CASES = [(n, g, None) for n, g in EXERCISES] + CASES + sorted(OTHER_WAYS)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize(
    "notebook, grade_id, name",
    VERDICT_CASES,
    ids=[f"{n}:{g}:{w or 'reference'}" for n, g, w in VERDICT_CASES],
)
def test_the_verdict_in_the_interpreter_is_the_verdict_on_the_gpu(
    sessions, interpreted_sessions, notebook, grade_id, name
):
    """Each known-wrong source, the reference and each right source written another way passes
    and fails the same correctness test cells in interpreter mode (where
    grader.runtime.gpu_compile stands in for the GPU's compiler) as on the GPU."""
    if (why := interpreter_unusable()) is not None:
        pytest.skip(why)
    if (notebook, grade_id, name) in INTERPRETER_ONLY:
        pytest.skip("only the interpreter's bounds check rejects it")
    source = None if name is None else {**SOURCES, **OTHER_WAYS}[notebook, grade_id, name]
    on_gpu = verdict(sessions(notebook), grade_id, source)
    in_interpreter = verdict(interpreted_sessions(notebook), grade_id, source)
    assert in_interpreter == on_gpu, (
        f"'{name or 'the reference'}' of {grade_id}: test cells passed in the interpreter "
        f"{in_interpreter}, on the GPU {on_gpu}"
    )
    if name is None:  # equal is not enough for the reference: it passes every test cell
        assert all(on_gpu.values()), f"the reference of {grade_id} fails on the GPU: {on_gpu}"
