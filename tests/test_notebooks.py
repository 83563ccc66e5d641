"""Every solution notebook executes top to bottom with papermill, within the time budget; its
graded cells pass without writing to stderr (nbgrader would score such a cell 0); and on a GPU
its speed cells award full points, while elsewhere they award none (execute.read_grades, the
check `python -m grader run` makes on the GPU runner)."""

import pytest

from grader.authoring import build, execute
from grader.runtime import device

ASSIGNMENTS = build.assignments()
DEVICE = device.current()


@pytest.fixture(scope="session")
def sources():
    build.build_sources(build.BUILD)
    return build.BUILD / "source"


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS, ids=lambda a: a.name)
def test_solution_executes(assignment, sources):
    source = sources / assignment.name / assignment.notebook_name
    output = build.BUILD / "executed" / assignment.name / assignment.notebook_name
    outcome = execute.run_notebook(source, output)
    assert outcome.error is None, f"{assignment.name} failed at {outcome.error}"
    outcome = execute.assess(
        outcome, grades_speed=DEVICE.grades_speed, budget=execute.budget_for(DEVICE)
    )
    assert not outcome.problems, "\n".join(outcome.problems)
    assert outcome.grades.total > 0, f"{assignment.name} has no graded cell"
