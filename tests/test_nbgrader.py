"""The nbgrader round trip: the solution, submitted as a student's notebook, earns every
correctness point. (That course/'s notebook, as students receive it, earns nothing is
tests/test_known_wrong.py's to show, exercise by exercise; tests/test_feedback.py grades blank
notebooks end to end.)

The solution's run is also the check that every solution notebook executes top to bottom (with
its hidden tests) within its CPU budget, its graded cells passing without writing to stderr
(nbgrader would score such a cell 0) and its speed cells awarding no points (execute.read_grades):
nbgrader runs here without the grading device and the GPU activity log that speed is read from,
on a GPU too. On a GPU, `make test-gpu-notebooks` checks the notebooks at full size and `make
test-gpu-grading` grades each solution with speed, one at a time.

Assignments are graded side by side, each in a course directory (and gradebook) of its own."""

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import nbformat
import pytest

from grader.authoring import build, execute, nbgrader_main
from grader.runtime import device
from tests import shared

ASSIGNMENTS = build.assignments()
DEVICE = device.current()
WORKERS = max(2, os.cpu_count() or 1)
pytestmark = [pytest.mark.slow, pytest.mark.tooling]


def autograde(registered, root, assignment):
    """Submit the solution of `assignment`, as generated (with every other assignment, by
    `generate_assignment "*"` as `make release` runs it), as a student in a course directory of
    its own, and autograde it: nbgrader's completed process and the CPU seconds it used, its
    kernel's included."""
    shared.copy_course(registered, root)
    submitted = root / "submitted"
    shutil.copytree(root / "source" / assignment, submitted / "solution" / assignment)
    command = nbgrader_main.command(
        "autograde", assignment, "--force", f"--CourseDirectory.root={root}"
    )
    with open(root / "stdout.txt", "w+") as out, open(root / "stderr.txt", "w+") as err:
        child = subprocess.Popen(
            command, cwd=root, env=build.nbgrader_env(), stdout=out, stderr=err
        )
        _, status, usage = os.wait4(child.pid, 0)  # its rusage counts the kernels it reaped
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        run = subprocess.CompletedProcess(command, child.returncode, out.read(), err.read())
    return run, usage.ru_utime + usage.ru_stime


@pytest.fixture(scope="module")
def graded(tmp_path_factory, registered_course):
    """{assignment: (course directory, autograde's completed process, its CPU seconds)}."""
    tmp = tmp_path_factory.mktemp("graded")
    roots = {a.name: tmp / a.name for a in ASSIGNMENTS}
    with ThreadPoolExecutor(WORKERS) as pool:
        runs = pool.map(lambda name: autograde(registered_course, roots[name], name), roots)
        return {name: (roots[name], *run) for name, run in zip(roots, runs, strict=True)}


def scores(root, assignment, student):
    from nbgrader.api import Gradebook  # the GPU runner collects this file without nbgrader

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        submission = gb.find_submission(assignment, student)
        return {g.name: (g.score, g.max_score) for nb in submission.notebooks for g in nb.grades}


@pytest.mark.parametrize("assignment", [a.name for a in ASSIGNMENTS])
def test_solution_earns_every_correctness_point(graded, assignment):
    root, run, _ = graded[assignment]
    assert run.returncode == 0, run.stderr[-3000:]
    got = scores(root, assignment, "solution")
    assert got, "no graded cells found"
    for grade_id, (score, max_score) in got.items():
        if grade_id.startswith("speed-"):
            assert score == 0, f"{grade_id}: speed cells score 0 without the grading device"
        else:
            assert score == max_score, f"{grade_id}: {score} of {max_score}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS, ids=lambda a: a.name)
def test_solution_executes_within_its_budget(graded, assignment):
    """Every graded cell of the solution ran and passed without stderr, its speed cells scored 0
    off the GPU, and the kernel's CPU seconds, which is what the notebook costs a student's core,
    are within the notebook's budget. The figure measured is stricter than the budget asks: it
    holds nbgrader's own process too."""
    root, run, cpu_seconds = graded[assignment.name]
    assert run.returncode == 0, run.stderr[-3000:]
    executed = root / "autograded" / "solution" / assignment.name / assignment.notebook_name
    grades = execute.read_grades(nbformat.read(executed, as_version=4), grades_speed=False)
    assert not grades.problems, "\n".join(grades.problems)
    assert grades.total > 0, f"{assignment.name} has no graded cell"
    budget = execute.budget_for(DEVICE)
    assert 0 < cpu_seconds <= budget, (
        f"grading {assignment.name}'s solution used {cpu_seconds:.0f} CPU "
        f"seconds, over the solution notebook's budget of {budget:.0f} s"
    )
