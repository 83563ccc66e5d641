"""grader.grading.tells: outputs an autograded test cell cannot have produced are named; the
outputs of honest runs, right or wrong, are not."""

from nbformat.v4 import new_code_cell, new_notebook, new_output

from grader.grading import tells

ANSWER = "def f(x):\n    return x"
STUB = "def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
TEST = "checks.check(f, ref, inputs)\nprint('visible test passed')"


def notebook(solution, *tests):
    cells = [new_code_cell(solution, metadata={"nbgrader": {"solution": True, "grade_id": "f"}})]
    for grade_id, source, outputs in tests:
        meta = {"nbgrader": {"grade": True, "grade_id": grade_id, "points": 1}}
        cell = new_code_cell(source, metadata=meta)
        cell.outputs = outputs
        cells.append(cell)
    return new_notebook(cells=cells)


def printed(text="visible test passed\n"):
    return new_output("stream", name="stdout", text=text)


def result(text):
    return new_output("execute_result", data={"text/plain": text}, execution_count=1)


def error():
    return new_output("error", ename="AssertionError", evalue="wrong", traceback=[])


SPEED = "perf.grade(case(f), points=1)"


def test_honest_runs_show_nothing():
    assert tells.tells(notebook(ANSWER, ("test-f", TEST, [printed()]))) == []
    assert tells.tells(notebook(ANSWER, ("test-f", TEST, [error()]))) == []  # wrong
    assert tells.tells(notebook(STUB, ("test-f", TEST, [error()]))) == []  # blank
    assert tells.tells(notebook(ANSWER, ("speed-f", SPEED, [printed("..."), result("0.0")]))) == []
    assert tells.tells(notebook(STUB, ("speed-f", SPEED, [result("0.0")]))) == []  # off the GPU


def test_a_result_the_last_line_cannot_show():
    found = tells.tells(notebook(ANSWER, ("test-f", TEST, [printed(), result("0.5")])))
    assert found == ["cell test-f shows a result, but its last line has none to show"]
    found = tells.tells(notebook(ANSWER, ("test-f", "x = 1", [result("1")])))
    assert found == ["cell test-f shows a result, but its last line has none to show"]


def test_silence_where_the_last_line_prints():
    found = tells.tells(notebook(ANSWER, ("test-f", TEST, [])))
    assert found == ["cell test-f printed nothing, but its last line prints"]


def test_a_stub_that_passes():
    found = tells.tells(notebook(STUB, ("test-f", TEST, [printed()])))
    assert found == ["cell test-f passed, but solution cell f still holds the stub"]
    attacked = STUB + "\n\nget_ipython().set_custom_exc((Exception,), lambda *a, **k: None)"
    found = tells.tells(notebook(attacked, ("test-f", TEST, [])))
    assert "cell test-f passed, but solution cell f still holds the stub" in found
