"""The nbgrader round trip: the solution, submitted as a student's notebook, earns every
correctness point; course/'s notebook, as students receive it, earns nothing (it passes no test)
and grading it does not crash.

Assignments are graded side by side, each in a course directory (and gradebook) of its own."""

import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from grader.authoring import build
from grader.runtime import device
from tests import shared

ASSIGNMENTS = build.assignments()
WORKERS = max(2, os.cpu_count() or 1)
pytestmark = [pytest.mark.slow, pytest.mark.tooling]


def autograde(registered, root, assignment):
    """Submit the solution of `assignment`, as generated (with every other assignment, by
    `generate_assignment "*"` as `make release` runs it), and its folder of course/ untouched, as
    two students in a course directory of its own, and autograde both."""
    shared.copy_course(registered, root)
    submitted = root / "submitted"
    shutil.copytree(root / "source" / assignment, submitted / "solution" / assignment)
    shutil.copytree(build.COURSE / assignment, submitted / "blank" / assignment)
    return build.nbgrader("autograde", assignment, "--force", root=root, check=False)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, registered_course):
    """{assignment: (course directory, autograde's completed process)}."""
    tmp = tmp_path_factory.mktemp("graded")
    roots = {a.name: tmp / a.name for a in ASSIGNMENTS}
    with ThreadPoolExecutor(WORKERS) as pool:
        runs = pool.map(lambda name: autograde(registered_course, roots[name], name), roots)
        return {name: (roots[name], run) for name, run in zip(roots, runs, strict=True)}


def scores(root, assignment, student):
    from nbgrader.api import Gradebook  # the GPU runner collects this file without nbgrader

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        submission = gb.find_submission(assignment, student)
        return {g.name: (g.score, g.max_score) for nb in submission.notebooks for g in nb.grades}


@pytest.mark.parametrize("assignment", [a.name for a in ASSIGNMENTS])
def test_solution_earns_every_correctness_point(graded, assignment):
    root, run = graded[assignment]
    assert run.returncode == 0, run.stderr[-3000:]
    got = scores(root, assignment, "solution")
    assert got, "no graded cells found"
    for grade_id, (score, max_score) in got.items():
        if grade_id.startswith("speed-") and not device.current().grades_speed:
            assert score == 0, f"{grade_id}: speed cells score 0 off the GPU"
        else:
            assert score == max_score, f"{grade_id}: {score} of {max_score}"


@pytest.mark.parametrize("assignment", [a.name for a in ASSIGNMENTS])
def test_the_course_notebook_passes_no_test_and_grading_survives(graded, assignment):
    """What `nbgrader validate --invert` checks of course/, through the autograder: every graded
    cell scores 0."""
    root, run = graded[assignment]
    assert run.returncode == 0, run.stderr[-3000:]
    assert list((root / "autograded" / "blank" / assignment).glob("*.ipynb"))
    got = scores(root, assignment, "blank")
    assert got and all(score == 0 for score, _ in got.values()), got
