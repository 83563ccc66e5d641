"""The nbgrader round trip: the solution, submitted as a student's notebook, earns every
correctness point; the blank release earns nothing and grading it does not crash; and
`nbgrader validate --invert` finds that course/ passes no test."""

import shutil
import subprocess
import sys

import pytest

from grader import build, device

ASSIGNMENTS = build.assignments()
pytestmark = [pytest.mark.slow, pytest.mark.tooling]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A course directory with two submissions per assignment, autograded."""
    root = tmp_path_factory.mktemp("course")
    build.build_sources(root)
    runs = {}
    for a in ASSIGNMENTS:
        build.nbgrader("generate_assignment", a.name, "--force", root=root)
        for student, folder in (("solution", "source"), ("blank", "release")):
            target = root / "submitted" / student / a.name
            shutil.copytree(root / folder / a.name, target)
        runs[a.name] = build.nbgrader("autograde", a.name, "--force", root=root, check=False)
    return root, runs


def scores(root, assignment, student):
    from nbgrader.api import Gradebook  # the GPU runner collects this file without nbgrader

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        submission = gb.find_submission(assignment, student)
        return {g.name: (g.score, g.max_score) for nb in submission.notebooks for g in nb.grades}


@pytest.mark.parametrize("assignment", [a.name for a in ASSIGNMENTS])
def test_solution_earns_every_correctness_point(graded, assignment):
    root, runs = graded
    assert runs[assignment].returncode == 0, runs[assignment].stderr[-3000:]
    got = scores(root, assignment, "solution")
    assert got, "no graded cells found"
    for grade_id, (score, max_score) in got.items():
        if grade_id.startswith("speed-") and not device.current().grades_speed:
            assert score == 0, f"{grade_id}: speed cells score 0 off the GPU"
        else:
            assert score == max_score, f"{grade_id}: {score} of {max_score}"


@pytest.mark.parametrize("assignment", [a.name for a in ASSIGNMENTS])
def test_blank_release_earns_nothing_and_grading_survives(graded, assignment):
    root, runs = graded
    assert runs[assignment].returncode == 0, runs[assignment].stderr[-3000:]
    assert list((root / "autograded" / "blank" / assignment).glob("*.ipynb"))
    got = scores(root, assignment, "blank")
    assert got and all(score == 0 for score, _ in got.values()), got


@pytest.mark.parametrize("assignment", ASSIGNMENTS, ids=lambda a: a.name)
def test_course_notebooks_pass_no_test(assignment):
    notebook = build.COURSE / assignment.name / assignment.notebook_name
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", "validate", "--invert", str(notebook)],
        capture_output=True,
        text=True,
        env=build.nbgrader_env(),
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Success! The notebook does not pass any tests." in result.stdout, result.stdout
