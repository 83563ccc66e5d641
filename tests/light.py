"""A light assignment for the tests of grading's pipeline (what comes in, what stops a batch):
one answer and two graded tests, a visible one and one with hidden lines, in a notebook that
imports nothing. A graded student of it costs about 1 CPU-s, where one of 00, whose kernel imports
torch, costs about 3; the pipeline does the same for both. Registered in a course directory of its
own, as `make release` registers the course's (tests/conftest.py's `registered_light`)."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from grader.authoring import build

ASSIGNMENT, NOTEBOOK = "99_light", "light"
ANSWER = "double"  # the answer cell's grade_id
FULL = {"test-double-visible": 1.0, "test-double-hidden": 2.0}  # what the answer earns


def _cell(source: str, grade_id: str, *, solution=False, points=0) -> nbformat.NotebookNode:
    meta = {
        "grade_id": grade_id,
        "solution": solution,
        "grade": bool(points),
        "locked": not solution,
    }
    meta |= {"points": points} if points else {}
    return new_code_cell(source, metadata={"nbgrader": {**meta, "schema_version": 3}})


def source() -> nbformat.NotebookNode:
    """The notebook as its authors write it: the answer between nbgrader's markers."""
    nb = new_notebook(
        cells=[
            new_markdown_cell("# A light assignment\n\nWrite `double(x)`, which returns `2 * x`."),
            _cell(
                "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION",
                ANSWER,
                solution=True,
            ),
            _cell(
                'assert double(2) == 4\nprint("visible test passed: double(2) == 4")',
                "test-double-visible",
                points=1,
            ),
            _cell(
                "assert double(0) == 0\n### BEGIN HIDDEN TESTS\nassert double(-3) == -6\n"
                "assert double(2.5) == 5.0\n### END HIDDEN TESTS",
                "test-double-hidden",
                points=2,
            ),
            _cell('print("the end of the light assignment")', "the-end"),  # a cell after the tests
        ]
    )
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


def generate(root: Path) -> None:
    """A course directory holding the light assignment, released and registered."""
    folder = root / "source" / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(source(), folder / f"{NOTEBOOK}.ipynb")
    build.nbgrader("generate_assignment", ASSIGNMENT, "--force", root=root)
