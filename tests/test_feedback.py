"""Feedback keeps the hidden tests hidden. Failing students of three notebooks are graded end to
end by `python -m grader autograde` on the CPU: one blank (every check fails on its stub) and one
whose kernel passes the visible tests and fails inside the hidden region, where IPython's
traceback quotes the hidden lines around the failing call. No feedback page may hold a line of
the source notebook's hidden regions, and each failing check's message must still be shown.
The unit tests below pin what grader.grading.hidden_tests matches and what it leaves alone."""

from __future__ import annotations

import contextlib
import copy
import csv
import functools
import io
import re
from pathlib import Path

import nbformat
import pytest

from grader import cli
from grader.authoring import build
from grader.grading import findings, gradebook, hidden_tests
from tests import hostile, shared
from tests.hostile.hidden_tests import hidden_lines, leaked, page_text

pytestmark = pytest.mark.tooling  # nbgrader grades; the unit tests below need nbformat


def partial(m: hostile.Materials, grade_id: str, old: str, new: str) -> nbformat.NotebookNode:
    """The release with only `grade_id` answered, and answered wrong (`old` made `new`)."""
    nb = m.edited(m.answered(), grade_id, old, new)
    release = copy.deepcopy(m.release)
    m.cell(release, grade_id).source = m.cell(nb, grade_id).source
    return release


# {assignment: (the solution cell answered wrong, its tests' prefix, old, new)}: a kernel that
# passes the visible test and fails inside the hidden region
PARTIAL = {
    "00_setup": ("relu-kernel", "test-relu", "pid * BLOCK +", "pid * 1024 +"),
    "02_first_kernels": ("add-kernel", "test-add", "pid * BLOCK +", "pid * 1024 +"),
    "06_online_softmax": (  # NaN where both parts are empty
        "merge",
        "test-merge",
        "m_safe = torch.where(m == -math.inf, torch.zeros_like(m), m)",
        "m_safe = m",
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
    return hostile.Graded(root, out, scores, review, m), code, printed.getvalue()


@pytest.fixture(scope="module")
def batches(tmp_path_factory, registered_course):
    base = tmp_path_factory.mktemp("feedback")
    return lambda assignment: graded(assignment, base, registered_course)


def hidden_cells(nb) -> list:
    return [c for c in nb.cells if hidden_tests.BEGIN in c.source]


def errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.output_type == "error"]


@pytest.mark.slow
@pytest.mark.parametrize("assignment,student", CASES, ids=[f"{a}-{s}" for a, s in CASES])
def test_feedback_shows_no_hidden_test_source(batches, assignment, student):
    result, code, printed = batches(assignment)
    assert code == 0, printed[-3000:]
    m = result.materials
    autograded = nbformat.read(
        result.root / "autograded" / student / assignment / f"{m.notebook}.ipynb", as_version=4
    )
    failed = [c for c in hidden_cells(autograded) if errors(c)]
    assert failed, f"{student}: no hidden-test cell failed; the class no longer tests anything"
    shown = " ".join(  # the instructor's copy: the leak this test guards against
        re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(errors(c)[0].traceback)) for c in failed
    )
    quoted = [line for line in hidden_lines(m) if line in " ".join(shown.split())]
    if student == "partial":
        assert quoted, "the failure is no longer inside the hidden region; update the class"
    assert not leaked(result, student), (student, leaked(result, student))
    page = page_text((result.out / "feedback" / student / f"{m.notebook}.html").read_text())
    for cell in failed:  # the failing check's message says what to fix
        error = errors(cell)[0]
        message = " ".join(f"{error.ename}: {error.evalue}".split())
        assert message in page, (student, cell.metadata.nbgrader.grade_id, message)
    assert hidden_tests.NO_TRACEBACK in page
    assert findings.KINDS["hidden-tests"] not in result.review[student], "IPython's own quote"
    if student == "blank":  # its visible tests failed too
        assert "Traceback (most recent call last)" in page, "visible tests lost their tracebacks"


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


# -- what the matching catches and leaves alone --------------------------------------------------

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
def test_any_quoting_of_a_hidden_line_is_caught(hidden, shown):
    assert hidden.redact(f"before\n{shown}\nafter") == f"before\n{hidden_tests.REMOVED}\nafter"


def test_an_error_of_a_hidden_cell_keeps_its_message_only(hidden):
    error = nbformat.v4.new_output(
        "error",
        ename="CheckFailed",
        evalue="`add`: 3 of 100003 elements wrong (float16); mask the last block",
        traceback=["Traceback", "----> 4     check(add, 100_003, dtype)  # a large prime"],
    )
    hidden_tests.clean_output(error, hidden, hidden_cell=True)
    assert error.traceback == [
        f"\x1b[0;31mCheckFailed\x1b[0m: {error.evalue}",
        hidden_tests.NO_TRACEBACK,
    ]
    visible = nbformat.v4.new_output(
        "error", ename="E", evalue="x", traceback=["----> 1 check(add, 1000)", "E: x"]
    )
    hidden_tests.clean_output(visible, hidden, hidden_cell=False)
    assert visible.traceback == ["----> 1 check(add, 1000)", "E: x"]


def test_display_data_is_redacted(hidden):
    shown = nbformat.v4.new_output(
        "display_data",
        data={"text/plain": "check(add, 100_003, dtype)", "application/json": {"a": SOURCES}},
    )
    hidden_tests.clean_output(shown, hidden, hidden_cell=False)
    assert shown.data == {"text/plain": hidden_tests.REMOVED}


def test_widget_state_that_shows_hidden_tests_is_dropped(hidden):
    nb = nbformat.v4.new_notebook()
    nb.metadata.widgets = {"state": {"w": {"value": "check(add, 100_003, dtype)"}}}
    hidden_tests.clean(nb, hidden)
    assert "widgets" not in nb.metadata
    nb.metadata.widgets = {"state": {"w": {"value": "check(add, 1000)"}}}
    hidden_tests.clean(nb, hidden)
    assert "widgets" in nb.metadata


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
    signature) is neither removed from the feedback nor flagged."""
    import jupytext

    cells = jupytext.read(assignment.source).cells
    shown = ["\n".join(_released_lines(c.source)) for c in cells]
    hidden = hidden_tests.Hidden.from_sources(
        {f"cell-{i}": c.source for i, c in enumerate(cells)}, shown
    )
    assert not [line for s in shown for line in s.split("\n") if hidden.leaks(line)]
