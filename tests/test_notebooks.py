"""Every solution notebook executes top to bottom with papermill, within the time budget; its
graded cells pass without writing to stderr (nbgrader would score such a cell 0); and on a GPU
its speed cells award full points, while elsewhere they award none (execute.read_grades, the
check `python -m grader run` makes on the GPU runner).

The budget holds the notebook's wall time on a GPU. In interpreter mode it holds the CPU seconds
its kernel used, which is what the notebook costs a student's core: the test shares the machine's
cores with the suite's other workers and whatever else runs, so its wall time measures them too
(00 took 21 s of wall time for 3.4 s of CPU on a busy machine)."""

import resource

import pytest

from grader.authoring import build, execute
from grader.runtime import device

ASSIGNMENTS = build.assignments()
DEVICE = device.current()


@pytest.fixture(scope="session")
def sources():
    build.build_sources(build.BUILD)
    return build.BUILD / "source"


def children_cpu_seconds() -> float:
    """User + system seconds of this process's children that have ended (the kernels)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS, ids=lambda a: a.name)
def test_solution_executes(assignment, sources):
    source = sources / assignment.name / assignment.notebook_name
    output = build.BUILD / "executed" / assignment.name / assignment.notebook_name
    before = children_cpu_seconds()
    outcome = execute.run_notebook(source, output)
    kernel = children_cpu_seconds() - before  # papermill has shut the kernel down and reaped it
    assert outcome.error is None, f"{assignment.name} failed at {outcome.error}"
    budget = execute.budget_for(DEVICE)
    outcome = execute.assess(
        outcome, grades_speed=DEVICE.grades_speed, budget=budget if DEVICE.is_gpu else None
    )
    assert not outcome.problems, "\n".join(outcome.problems)
    assert outcome.grades.total > 0, f"{assignment.name} has no graded cell"
    if not DEVICE.is_gpu:
        assert kernel > 0, "the kernel's CPU time was not measured"
        assert kernel <= budget, (
            f"{assignment.name}'s kernel used {kernel:.0f} CPU seconds, over the notebook's "
            f"budget of {budget:.0f} s (wall time {outcome.seconds:.0f} s)"
        )
