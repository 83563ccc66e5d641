"""bench/grading_cost.py's report of where a student's grading goes, cell by cell, without
grading: the slowest cells named by grade id (else their first line of code), slowest first."""

from types import SimpleNamespace

import nbformat

from bench import grading_cost
from grader.grading.cost import NotebookTimes


def test_the_slowest_cells_are_named_by_grade_id_or_first_line(tmp_path):
    nb = nbformat.v4.new_notebook()
    setup = nbformat.v4.new_code_cell("# set up\nimport torch\n")
    speed = nbformat.v4.new_code_cell("perf.grade(case, points=1)")
    speed.metadata["nbgrader"] = {"grade_id": "speed-relu", "grade": True}
    nb.cells = [setup, nbformat.v4.new_markdown_cell("text"), speed]
    (tmp_path / "release" / "00_setup").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "release" / "00_setup" / "setup.ipynb")
    batch = SimpleNamespace(assignment="00_setup", folder=lambda step: tmp_path / step)
    times = [NotebookTimes("setup", cells=[3.25, 9.04])]
    found = grading_cost.slowest_cells(batch, times)
    assert found == [["speed-relu", 9.04], ["import torch", 3.25]]
    cost = grading_cost.Cost("00_setup", 4, 4, 1, 1.0, 2.0, 5, *[1.0] * 8, slowest=found)
    machine = {"device": "d", "sandbox": "bwrap", "kernel_cache": True}
    text = grading_cost.markdown([cost], {**machine, "versions": {}})
    assert "- 00_setup: `speed-relu` 9.0, `import torch` 3.2" in text
    assert "| 1.0, 2.0 (5), 1.0, 1.0 |" in text  # registration, the batch's 5 kernels, feedback...
