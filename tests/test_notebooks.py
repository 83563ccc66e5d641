"""Every solution notebook executes top to bottom with papermill, within the time budget; its
graded cells pass without writing to stderr (nbgrader would score such a cell 0); and on a GPU
its speed cells award full points, while elsewhere they award none."""

import nbformat
import pytest

from grader import build, device, execute

ASSIGNMENTS = build.assignments()
# Interpreter mode with the CI parameters: at most ~90 s a notebook; on a GPU, 2 minutes.
BUDGET_SECONDS = 120 if device.current().is_gpu else 90


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
    assert outcome.seconds < BUDGET_SECONDS, f"took {outcome.seconds:.0f} s"

    nb = nbformat.read(output, as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        for out in cell.outputs:
            assert out.output_type != "error", f"{cell.id}: {out.get('evalue')}"
            assert not (out.output_type == "stream" and out.name == "stderr"), (
                f"{cell.id} wrote to stderr, which nbgrader scores 0:\n{out.text}"
            )
        if meta["grade_id"].startswith("speed-"):
            # the reference solution must clear its speed threshold on every GPU run
            result = [o for o in cell.outputs if o.output_type == "execute_result"]
            assert result, f"{cell.id} must end with its score"
            score = float(result[-1].data["text/plain"])
            want = meta["points"] if device.current().grades_speed else 0.0
            printed = "".join(o.get("text", "") for o in cell.outputs)
            assert score == want, f"{cell.id} scored {score} of {meta['points']}:\n{printed}"
