"""Feedback keeps the hidden tests hidden, by construction (grader.grading.feedback). Failing
students of three notebooks are graded end to end by `python -m grader autograde` on the CPU
(00's in tests/test_autograde.py's class): one blank (every check fails on its stub) and one
whose kernel passes the visible tests and fails inside the hidden region, where IPython's
traceback quotes the hidden lines around the failing call. No feedback page may hold a line of
the hidden regions; each page shows the outputs of the cells before the first hidden test, and
from there on each graded cell's score and status. The unit tests below pin the copy taken while
a notebook runs, the page made of it, and what grader.grading.hidden_tests still matches for the
instructor's findings.
(tests/test_hostile.py grades the students who encode what they read of the hidden tests.)"""

from __future__ import annotations

import ast
import contextlib
import copy
import csv
import functools
import io
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from grader import cli
from grader.authoring import build
from grader.grading import feedback, gradebook, hidden_tests
from grader.runtime.published import SPEED_MIMETYPE
from tests import hostile, shared
from tests.hostile.hidden_tests import page_keeps_hidden_tests_hidden

pytestmark = pytest.mark.tooling  # nbgrader grades; the unit tests below need nbgrader


def partial(m: hostile.Materials, grade_id: str, old: str, new: str) -> nbformat.NotebookNode:
    """The release with only `grade_id` answered, and answered wrong (`old` made `new`)."""
    nb = m.edited(m.answered(), grade_id, old, new)
    release = copy.deepcopy(m.release)
    m.cell(release, grade_id).source = m.cell(nb, grade_id).source
    return release


# {assignment: (the solution cell answered wrong, its tests' prefix, old, new)}: a kernel that
# passes the visible test and fails inside the hidden region. 00's blank and partial students are
# tests/test_autograde.py's class.
PARTIAL = {
    "02_first_kernels": ("add-kernel", "test-add", "pid * BLOCK +", "pid * 1024 +"),
    "06_online_softmax": (  # right with the given BLOCK only: the loops step 128 columns
        "long-softmax-kernel",
        "test-long-softmax",
        "range(0, n_cols, BLOCK)",
        "range(0, n_cols, 128)",
    ),
}
CLASSES = {
    a: {"blank": lambda m: m.release, "partial": lambda m, p=p: partial(m, p[0], *p[2:])}
    for a, p in PARTIAL.items()
}
CASES = [(a, s) for a, students in CLASSES.items() for s in students]


@functools.cache
def graded(assignment: str, base: Path, registered: Path) -> tuple[hostile.Graded, int, str]:
    """One notebook's class, graded: (what it left, exit code, what it printed)."""
    tmp = base / assignment
    root = shared.copy_course(registered, tmp / "course")
    (path,) = (root / "release" / assignment).glob("*.ipynb")
    release = nbformat.read(path, as_version=4)
    source = nbformat.read(root / "source" / assignment / path.name, as_version=4)
    m = hostile.Materials(assignment, path.stem, release, source)
    for student, notebook in CLASSES[assignment].items():
        (tmp / "inbox" / student / assignment).mkdir(parents=True)
        nbformat.write(notebook(m), tmp / "inbox" / student / assignment / path.name)
    argv = [
        "autograde", assignment, "--submissions", str(tmp / "inbox"), "--root", str(root),
        "--mode", "interpreter", "--jobs", "2", "--cell-timeout", "60",
        "--speed-cell-timeout", "60", "--timeout", "300", "--memory-limit", "3",
    ]  # fmt: skip
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli.main(argv)
    url = gradebook.sqlite_url(root / "gradebook.db")
    scores = {s: g.scores for s, g in gradebook.grades(url, assignment).items()}
    out = root / "grading" / assignment
    with open(out / "grades.csv", newline="") as f:
        review = {row["student_id"]: row["needs_review"] for row in csv.DictReader(f)}
    return hostile.Graded(root, out, scores, review, {}, m), code, printed.getvalue()


@pytest.fixture(scope="module")
def batches(tmp_path_factory, registered_course):
    base = tmp_path_factory.mktemp("feedback")
    return lambda assignment: graded(assignment, base, registered_course)


@pytest.mark.slow
@pytest.mark.parametrize("assignment,student", CASES, ids=[f"{a}-{s}" for a, s in CASES])
def test_feedback_shows_no_hidden_test_source(batches, assignment, student):
    result, code, printed = batches(assignment)
    assert code == 0, printed[-3000:]
    page_keeps_hidden_tests_hidden(result, student)


@pytest.mark.slow
@pytest.mark.parametrize("assignment", sorted(CLASSES))
def test_partial_students_fail_only_the_hidden_tests(batches, assignment):
    result, _, _ = batches(assignment)
    tests = PARTIAL[assignment][1]
    url = gradebook.sqlite_url(result.root / "gradebook.db")
    points = gradebook.max_scores(url, assignment)
    scores = result.scores["partial"]
    assert scores[f"{tests}-visible"] == points[f"{tests}-visible"], scores
    assert scores[f"{tests}-hidden"] == 0, scores


# -- the copy taken while a notebook runs --------------------------------------------------------


def _graded(source: str, grade_id: str, points: float = 1, **more) -> nbformat.NotebookNode:
    meta = {"grade": True, "grade_id": grade_id, "points": points, "solution": False, **more}
    return new_code_cell(source, metadata={"nbgrader": meta})


HIDDEN_CELL = "check(1)\n### BEGIN HIDDEN TESTS\n{}\n### END HIDDEN TESTS"


def test_the_copy_is_taken_as_the_first_hidden_test_starts(tmp_path):
    """A real kernel run by CappedExecute: a later cell rewrites an earlier display, a widget
    and the prompt numbers, none of which reaches the copy; a copy the submission brought is
    replaced."""
    from grader.grading.notebook_guards import CappedExecute

    early = (
        'h = display({"text/plain": "early"}, raw=True, display_id=True)\n'
        'import ipywidgets\nw = ipywidgets.Textarea(value="w-early")\ndisplay(w)'
    )
    late = (
        'h.update({"text/plain": "late"}, raw=True)\nw.value = "w-late"\n'
        "get_ipython().execution_count = 4242\nget_ipython().kernel.execution_count = 4241"
    )
    nb = new_notebook(
        cells=[
            new_code_cell(early),
            new_markdown_cell("the visible test"),
            _graded('print("visible test passed")', "test-x-visible"),
            _graded(HIDDEN_CELL.format(late).replace("check(1)", 'print("one")'), "test-x-hidden"),
            new_code_cell('print("after")\n0.5'),
        ]
    )
    forged = [[], [], [], [new_output("stream", name="stdout", text="the hidden tests")]]
    nb.metadata[feedback.SNAPSHOT] = {"cells": 5, "outputs": forged}
    CappedExecute(kernel_name="python3", timeout=60).preprocess(nb, {"unique_key": "t"})

    assert nb.cells[0].outputs[0].data["text/plain"] == "late", "nbclient no longer rewrites"
    assert "w-late" in str(nb.metadata.widgets) and nb.cells[4].execution_count == 4242
    copied = nb.metadata[feedback.SNAPSHOT]
    assert copied["cells"] == 5 and len(copied["outputs"]) == 3, "taken at the hidden-test cell"
    assert copied["outputs"][0][0]["data"]["text/plain"] == "early"
    # outputs that did not change after the copy are held once, in the cell
    assert copied["outputs"][1:] == [feedback.UNCHANGED, feedback.UNCHANGED]

    for cell in nb.cells:  # GetGrades
        if cell.metadata.get("nbgrader"):
            cell.metadata.nbgrader.update(score=1.0, points=1.0)
    feedback.page(nb)
    assert nb.cells[0].outputs[0].data == {"text/plain": "early"}
    assert nb.cells[0].outputs[1].data == {"text/plain": "Textarea(value='w-early')"}
    assert [o.text for o in nb.cells[2].outputs] == ["visible test passed\n"]
    assert "widgets" not in nb.metadata and feedback.SNAPSHOT not in nb.metadata
    assert [o.text for o in nb.cells[3].outputs] == ["test-x-hidden: 1 of 1 points; passed.\n"]
    assert nb.cells[4].outputs[0].text == f"[{feedback.HIDDEN} {feedback.RUN_IT}]\n"
    assert [c.execution_count for c in nb.cells[3:]] == [None, None]


def test_a_notebook_without_hidden_tests_keeps_every_output():
    from grader.grading.notebook_guards import CappedExecute

    nb = new_notebook(cells=[new_code_cell('print("one")'), _graded('print("two")', "test-y")])
    CappedExecute(kernel_name="python3", timeout=60).preprocess(nb, {"unique_key": "t"})
    assert len(nb.metadata[feedback.SNAPSHOT]["outputs"]) == 2
    feedback.page(nb)
    assert [c.outputs[0].text for c in nb.cells] == ["one\n", "two\n"]


# -- the page ------------------------------------------------------------------------------------


def _stream(text: str):
    return new_output("stream", name="stdout", text=text)


def _error(ename, evalue="payload"):
    """An error output as the kernel sends it, unvalidated: `ename` may be anything."""
    return nbformat.NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[])


PAYLOAD = "eJzLSM3JyVcozy/KSQEAGgQEXQ=="  # "hidden tests", compressed and encoded


def _notebook(copied: bool = True) -> nbformat.NotebookNode:
    """An autograded notebook after GetGrades: a solution, its visible and hidden tests, a speed
    cell, a cell of plain code and an empty one; with the copy CappedExecute takes before the
    hidden tests where `copied`, and what the student's process wrote after it."""
    solution = {"nbgrader": {"grade_id": "add", "solution": True, "grade": False}}
    nb = new_notebook(
        cells=[
            new_code_cell("def add(): ...", metadata=solution),
            _graded("check(add)", "test-add-visible", score=1.0),
            _graded(HIDDEN_CELL.format("check(add, 3)"), "test-add-hidden", points=2, score=0.0),
            _graded("grade_speed()", "speed-add", score=0.0),
            new_code_cell("show(add)"),
            new_code_cell(""),
        ]
    )
    nb.cells[0].outputs = [_stream("defined\n")]
    nb.cells[1].outputs = [_stream("visible test passed\n")]
    if copied:
        feedback.snapshot(nb, 2)
    for i, cell in enumerate(nb.cells):
        cell.execution_count = i + 1
        cell.metadata["execution"] = {"iopub.status.idle": "2099-01-01T00:00:00Z"}
        cell.outputs.insert(0, _stream(f"{PAYLOAD}\n"))
    nb.cells[2].outputs.append(_error("AssertionError", PAYLOAD))
    nb.metadata["widgets"] = {"state": {"w": {"value": PAYLOAD}}}
    return nb


def test_the_page_shows_the_copy_then_only_the_graders_words():
    nb = _notebook()
    feedback.page(nb)
    outputs = [[o.get("text") for o in c.outputs] for c in nb.cells]
    assert outputs == [
        ["defined\n"],
        ["visible test passed\n"],
        [
            "test-add-hidden: 0 of 2 points; failed: raised AssertionError.\n"
            f"{feedback.HIDDEN} {feedback.VISIBLE.format(test='test-add-visible')}\n"
        ],
        [
            f"speed-add: 0 of 1 points; failed.\n{feedback.NO_VERDICT}\n"
            f"{feedback.HIDDEN} {feedback.RUN_IT}\n"
        ],
        [f"[{feedback.HIDDEN} {feedback.RUN_IT}]\n"],
        [],
    ]
    assert [c.execution_count for c in nb.cells] == [1, 2, None, None, None, None]
    assert not [c for c in nb.cells if "execution" in c.metadata]
    assert "widgets" not in nb.metadata and feedback.SNAPSHOT not in nb.metadata


def test_without_a_copy_the_page_shows_no_output_of_the_student():
    nb = _notebook(copied=False)
    feedback.page(nb)
    texts = [o.text for c in nb.cells for o in c.outputs]
    assert texts[0] == f"[{feedback.MISSING} {feedback.RUN_IT}]\n"
    assert texts[1].startswith("test-add-visible: 1 of 1 points; passed.")
    assert not [t for t in texts if "defined" in t or PAYLOAD in t]


def test_a_copy_of_another_notebook_counts_as_none():
    nb = _notebook()
    nb.cells.append(new_code_cell("print('added')"))  # the copy is of 6 cells, this has 7
    feedback.page(nb)
    assert nb.cells[0].outputs[0].text == f"[{feedback.MISSING} {feedback.RUN_IT}]\n"


@pytest.mark.parametrize(
    "outputs,execution_count,score,expected",
    [
        ([_error("NameError")], 1, 2.0, "passed"),  # the gradebook's score decides
        ([_error("KeyboardInterrupt"), _error(feedback.TIMEOUT)], 1, 0.0, "timed out"),
        ([_error("StubNotFilled")], 1, 0.0, "failed: raised StubNotFilled"),
        (
            [_error("ZeroDivisionError"), _error("RuntimeError")],
            1,
            0.0,
            "failed: raised ZeroDivisionError",
        ),
        ([_error(PAYLOAD)], 1, 0.0, "failed: raised an error"),
        ([_error(["AssertionError"])], 1, 0.0, "failed: raised an error"),
        ([], None, 0.0, "not run"),
        ([_stream("x")], 3, 1.5, "failed"),
    ],
    ids=["passed", "timeout", "course", "first", "unknown", "not-a-name", "not-run", "partial"],
)
def test_the_status_is_a_word_of_the_vocabulary(outputs, execution_count, score, expected):
    cell = _graded("check()", "test-z", points=2)
    cell.outputs, cell.execution_count = outputs, execution_count
    assert feedback.status(cell, score, 2.0) == expected


def _published(measured, needed, unit="x", flags=()):
    record = {"comparison": "eager", "measured": measured, "needed": needed, "unit": unit}
    passed = measured is not None and measured >= needed and not flags
    data = {SPEED_MIMETYPE: {**record, "flags": list(flags), "passed": passed}, "text/plain": ""}
    return new_output("display_data", data=data)


@pytest.mark.parametrize(
    "outputs,expected",
    [
        ([], feedback.NO_VERDICT),
        ([_stream("PASS 9.99x")], feedback.NO_VERDICT),
        (
            [_published(1.2345, 1.1), _published(3.0, 1.1)],
            "Speed: passed; the closest to its threshold: 1.2x (needs 1.1x).",
        ),
        (
            [_published(1.5, 1.2), _published(0.94123, 1.1)],
            "Speed: not passed; the furthest below its threshold: 0.94x (needs 1.1x).",
        ),
        (
            [_published(71.3, 80, "%")],
            "Speed: not passed; the furthest below its threshold: 71% (needs 80%).",
        ),
        ([_published(None, 80, "%", ("a side stream ran",))], "Speed: flagged"),
        ([nbformat.NotebookNode(output_type="display_data", data="forged")], feedback.NO_VERDICT),
        ([new_output("display_data", data={SPEED_MIMETYPE: "forged"})], feedback.NO_VERDICT),
    ],
    ids=["none", "printed", "passed", "not-passed", "percent", "flagged", "no-data", "malformed"],
)
def test_a_speed_verdict_says_little(outputs, expected):
    assert feedback.speed(outputs).startswith(expected)


def test_every_exception_of_the_course_runtime_has_its_name_shown():
    """COURSE_ERRORS names every exception class grader/runtime defines."""
    runtime = build.ROOT / "grader" / "runtime"
    errors = set(feedback.ERRORS)
    defined = set()
    for path in runtime.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
                if bases & errors and not node.name.startswith("_"):  # a module's own signal
                    defined.add(node.name)
    assert defined, "no exception class found in grader/runtime"
    assert defined <= errors, defined - errors


# -- what the findings still match in the instructor's copy ---------------------------------------

SOURCES = {
    "test-visible": "check(add, 1000)\nfor dtype in DTYPES:\n    check(add, 1, dtype)",
    "test-hidden": (
        "check(add, 1)\n### BEGIN HIDDEN TESTS\nfor dtype in DTYPES:\n"
        "    check(add, 100_003, dtype)  # a large prime\ntry:\n    pass\n"
        "### END HIDDEN TESTS"
    ),
}


@pytest.fixture
def hidden():
    return hidden_tests.Hidden.from_sources(SOURCES)


def test_hidden_lines_are_the_secret_lines_of_hidden_regions(hidden):
    assert hidden.cells == {"test-hidden"}
    assert hidden.leaks("for dtype in DTYPES: check(add, 100_003, dtype)")
    assert not hidden.leaks("check(add, 100_003, dtype, block)"), "another call"
    assert hidden.leaks("    check(add, 100_003, dtype)  # a large prime")
    assert hidden.leaks("### BEGIN HIDDEN TESTS")
    assert not hidden.leaks("for dtype in DTYPES:"), "a line the visible test shows is public"
    assert not hidden.leaks("try:") and not hidden.leaks("pass"), "too short to tell anything"
    assert not hidden.leaks("check(add, 1)")


@pytest.mark.parametrize(
    "shown",
    [
        "\x1b[0;32m      4\x1b[0m     check(add, 100_003, dtype)  \x1b[38;5;66m# a large prime",
        "----> 4     check(add, 100_003, dtype)  # a large prime",
        repr(SOURCES["test-hidden"]),
        '{"source": "check(add, 100_003, dtype)  # a large prime"}',
        "<span class='n'>check</span>(add,&#32;100_003, dtype) &nbsp;# a large prime",
    ],
    ids=["ansi", "traceback", "repr", "json", "html"],
)
def test_any_plain_quoting_of_a_hidden_line_is_found(hidden, shown):
    assert hidden.shows(f"before\n{shown}\nafter")
    cell = _graded("print(x)", "test-visible")
    cell.outputs = [_stream(f"before\n{shown}\nafter")]
    assert hidden_tests.shown_by(cell, hidden)


def test_a_hidden_cells_own_traceback_is_not_held_against_the_student(hidden):
    cell = _graded("check()", "test-hidden")
    cell.outputs = [
        new_output(
            "error",
            ename="CheckFailed",
            evalue="`add`: 3 of 100003 elements wrong (float16); mask the last block",
            traceback=["----> 4     check(add, 100_003, dtype)  # a large prime"],
        )
    ]
    assert not hidden_tests.shown_by(cell, hidden)


def _released_lines(source: str) -> list[str]:
    """The lines of a cell that students see: all but its hidden and solution regions."""
    shown, inside = [], False
    for line in source.split("\n"):
        inside = inside or hidden_tests.BEGIN in line or "BEGIN SOLUTION" in line
        if not inside:
            shown.append(line)
        inside = inside and hidden_tests.END not in line and "END SOLUTION" not in line
    return shown


@pytest.mark.parametrize("assignment", build.assignments(), ids=lambda a: a.name)
def test_no_line_of_a_released_notebook_counts_as_hidden(assignment):
    """What students see anyway (a helper's lines quoted in a visible test's traceback, a frame's
    signature) is not flagged."""
    import jupytext

    cells = jupytext.read(assignment.source).cells
    shown = ["\n".join(_released_lines(c.source)) for c in cells]
    hidden = hidden_tests.Hidden.from_sources(
        {f"cell-{i}": c.source for i, c in enumerate(cells)}, shown
    )
    assert not [line for s in shown for line in s.split("\n") if hidden.leaks(line)]
