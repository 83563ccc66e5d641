"""Where the cells of a graded notebook run (grader.grading.roles), and what a Nsight Compute
child replays of them before it makes the call it profiles."""

import nbformat

from grader.grading import roles


def cell(source: str, grade_id: str | None = None, **nbgrader) -> nbformat.NotebookNode:
    made = nbformat.v4.new_code_cell(source)
    if grade_id is not None:
        made.metadata["nbgrader"] = {"grade_id": grade_id, **nbgrader}
    return made


def test_a_profiled_call_replays_the_answers_and_the_given_cells_it_needs():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# the title"),
        cell("import torch\nDEVICE = 'cuda'"),  # the imports: always replayed
        cell("SHAPE = (8, 8)\nDEMO_SIZE = 3"),
        cell("demo = torch.ones(DEMO_SIZE)\nprint(demo)"),  # nothing reads `demo`
        cell("def scale(x):\n    return x * SCALE", "answer", solution=True),
        cell("SCALE = 2.0"),  # read by the answer cell, inside its function
        cell("def problem():\n    x = torch.ones(SHAPE)\n    return lambda: scale(x)"),
        cell("scale(torch.ones(2))", "test", grade=True, points=1),  # the judge's: never
        cell("after = problem()"),  # at or after the profiled cell: never
    ]
    plan = roles.plan(nb, *roles.answers(nb))
    kept = roles.replay(nb, plan, 8, "problem")
    first_lines = [k.splitlines()[1].strip() for k in kept]
    assert first_lines == [
        "import torch",
        "SHAPE = (8, 8)",
        "def scale(x):",
        "SCALE = 2.0",
        "def problem():",
    ]
    assert all(k.startswith("try:\n") for k in kept)  # one failing cell leaves the rest to run
    namespace: dict = {}
    exec("\n".join(kept).replace("'cuda'", "'cpu'"), namespace)
    assert namespace["problem"]().__call__().tolist() == [[2.0] * 8] * 8
    assert "demo" not in namespace
