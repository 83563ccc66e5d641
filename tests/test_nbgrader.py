"""The nbgrader round trip: the solution, submitted as a student's notebook, earns every
correctness point; the blank release earns nothing and grading it does not crash; and
`nbgrader validate --invert` finds that course/ passes no test.

Assignments are graded side by side, each in a course directory (and gradebook) of its own."""

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from grader.authoring import build
from grader.runtime import device
from tests import shared

ASSIGNMENTS = build.assignments()
WORKERS = max(2, os.cpu_count() or 1)
pytestmark = [pytest.mark.slow, pytest.mark.tooling]


def autograde(registered, root, assignment):
    """Submit the solution and the blank release of `assignment`, as generated (with every other
    assignment, by `generate_assignment "*"` as `make release` runs it), as two students in a
    course directory of its own, and autograde both."""
    shared.copy_course(registered, root)
    for student, folder in (("solution", "source"), ("blank", "release")):
        shutil.copytree(root / folder / assignment, root / "submitted" / student / assignment)
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
def test_blank_release_earns_nothing_and_grading_survives(graded, assignment):
    root, run = graded[assignment]
    assert run.returncode == 0, run.stderr[-3000:]
    assert list((root / "autograded" / "blank" / assignment).glob("*.ipynb"))
    got = scores(root, assignment, "blank")
    assert got and all(score == 0 for score, _ in got.values()), got


@pytest.fixture(scope="module")
def validated():
    """`nbgrader validate --invert` on every notebook of course/, side by side."""

    def validate(assignment):
        notebook = build.COURSE / assignment.name / assignment.notebook_name
        command = [sys.executable, "-m", "nbgrader", "validate", "--invert", str(notebook)]
        return subprocess.run(
            command, capture_output=True, text=True, env=build.nbgrader_env(), timeout=600
        )

    with ThreadPoolExecutor(WORKERS) as pool:
        return dict(
            zip([a.name for a in ASSIGNMENTS], pool.map(validate, ASSIGNMENTS), strict=True)
        )


@pytest.mark.parametrize("assignment", [a.name for a in ASSIGNMENTS])
def test_course_notebooks_pass_no_test(validated, assignment):
    result = validated[assignment]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Success! The notebook does not pass any tests." in result.stdout, result.stdout
