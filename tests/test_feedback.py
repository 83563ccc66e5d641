"""Feedback keeps the hidden tests hidden, by construction: hidden-test code runs only in the
judge, and a failing hidden test shows its message alone (grader.grading.notebook_guards).
Failing students of two notebooks are graded end to end by `python -m grader autograde` on the
CPU (00's in tests/test_autograde.py's class): one blank (every check fails on its stub) and one
whose kernel passes the visible tests and fails inside the hidden region. No feedback page and no
output of the instructor's copy may hold a line of the hidden regions; each page shows what the
visible tests said. (tests/hostile/hidden_tests.py's students look for the hidden tests.)"""

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

from grader import cli
from grader.authoring import build
from grader.grading import gradebook
from tests import hostile, shared
from tests.hostile.hidden_tests import page_keeps_hidden_tests_hidden
from tests.notebook_session import segments

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


BARE = (ast.Tuple, ast.Name)  # an assert's message that names values but says nothing of them


def _parsed(source: str) -> ast.Module:
    """A code cell as Python, its IPython lines (magics, shell commands) left out."""
    kept = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return ast.parse("\n".join(kept))


def _unexplained(tree: ast.AST) -> list[str]:
    """The statements of `tree` that fail with no sentence to show: an `assert` without a message
    (or with a bare tuple or name for one), a `raise` of an exception made without arguments."""
    found = []
    for node in ast.walk(tree):
        bare = isinstance(node, ast.Assert) and (node.msg is None or type(node.msg) in BARE)
        if bare:
            found.append(ast.unparse(node))
        elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            if not node.exc.args and not node.exc.keywords:
                found.append(ast.unparse(node))
    return found


def _explanation_gaps(notebook: nbformat.NotebookNode) -> tuple[list[str], int]:
    """Each statement a test cell of `notebook` can fail on without a message, in the cell or in a
    function of a given cell that it calls (at any depth), as "grade_id: statement"; and how many
    test cells hold a hidden region. The course's runtime, which every other check goes through,
    raises with a message of its own (tests/test_checks.py); answer cells are the student's."""
    functions = {}
    for cell in notebook.cells:
        if cell.cell_type == "code" and not cell.metadata.get("nbgrader", {}).get("solution"):
            for node in ast.walk(_parsed(cell.source)):
                if isinstance(node, ast.FunctionDef):
                    functions[node.name] = node
    gaps, hidden = [], 0
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("grade") or meta.get("solution") or meta["grade_id"].startswith("speed-"):
            continue
        hidden += any(h for h, _ in segments(cell.source))
        reached, todo = set(), [_parsed(cell.source)]
        while todo:
            tree = todo.pop()
            gaps += [f"{meta['grade_id']}: {s}" for s in _unexplained(tree)]
            for node in ast.walk(tree):
                name = getattr(node.func, "id", None) if isinstance(node, ast.Call) else None
                if name in functions and name not in reached:
                    reached.add(name)
                    todo.append(functions[name])
    return gaps, hidden


@pytest.mark.parametrize("assignment", [a.name for a in build.assignments()])
def test_every_failing_test_says_why(assignment):
    """A failing hidden test reaches the feedback page as its message alone (the traceback would
    quote hidden lines): every way a test cell fails, in its hidden region or not, carries a
    sentence that explains it."""
    (a,) = [a for a in build.assignments() if a.name == assignment]
    gaps, hidden = _explanation_gaps(build.to_notebook(a.source))
    assert hidden, f"{assignment} has no test cell with a hidden region: is it read as released?"
    assert not gaps, "a failure with no message; give each a sentence:\n" + "\n".join(gaps)


def test_a_failure_without_a_message_is_found():
    """The search above finds a bare assert in a hidden region, one in a given function that a
    test calls through another, and a bare raise; and passes a test whose failures all speak."""
    cells = [
        nbformat.v4.new_code_cell(
            "def outer(x):\n    return inner(x)\n\n\ndef inner(x):\n    assert x"
        ),
        nbformat.v4.new_code_cell("def answer():\n    assert False"),
        nbformat.v4.new_code_cell(
            "outer(1)\n### BEGIN HIDDEN TESTS\nassert answer() is None, (1, 2)\n"
            "raise ValueError()\n### END HIDDEN TESTS\n"
        ),
        nbformat.v4.new_code_cell('assert answer() is None, "answer returns None"'),
    ]
    cells[1].metadata["nbgrader"] = {"solution": True, "grade_id": "answer"}
    cells[2].metadata["nbgrader"] = {"grade": True, "grade_id": "test-hidden"}
    cells[3].metadata["nbgrader"] = {"grade": True, "grade_id": "test-visible"}
    gaps, hidden = _explanation_gaps(nbformat.v4.new_notebook(cells=cells))
    assert hidden == 1
    assert gaps == [
        "test-hidden: assert answer() is None, (1, 2)",
        "test-hidden: raise ValueError()",
        "test-hidden: assert x",
    ], gaps
