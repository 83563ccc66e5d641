"""grader.grading.nbgrader_policy: per-cell timeouts for nbclient, and the stderr noise nbgrader
must not score as a failure (only warnings: anything else on stderr still costs the cell)."""

import re

import pytest
from nbformat.v4 import new_code_cell

from grader.grading import nbgrader_policy as policy


def graded(grade_id):
    return new_code_cell("x", metadata={"nbgrader": {"grade": True, "grade_id": grade_id}})


def test_speed_cells_get_the_longer_timeout(monkeypatch):
    monkeypatch.delenv(policy.CELL_TIMEOUT_VARIABLE, raising=False)
    monkeypatch.delenv(policy.SPEED_CELL_TIMEOUT_VARIABLE, raising=False)
    assert policy.cell_timeout(graded("test-relu-visible")) == policy.CELL_TIMEOUT
    assert policy.cell_timeout(new_code_cell("print(1)")) == policy.CELL_TIMEOUT
    assert policy.cell_timeout(graded("speed-relu")) == policy.SPEED_CELL_TIMEOUT
    assert policy.SPEED_CELL_TIMEOUT > policy.CELL_TIMEOUT


def test_timeouts_come_from_the_environment(monkeypatch):
    monkeypatch.setenv(policy.CELL_TIMEOUT_VARIABLE, "20")
    monkeypatch.setenv(policy.SPEED_CELL_TIMEOUT_VARIABLE, "45")
    assert policy.cell_timeout(graded("test-relu-visible")) == 20
    assert policy.cell_timeout(graded("speed-relu")) == 45
    monkeypatch.setenv(policy.CELL_TIMEOUT_VARIABLE, "120")  # a speed cell gets at least that
    assert policy.cell_timeout(graded("speed-relu")) == 120


@pytest.mark.parametrize("value", ["soon", "0", "-5"])
def test_a_bad_timeout_is_refused(monkeypatch, value):
    monkeypatch.setenv(policy.CELL_TIMEOUT_VARIABLE, value)
    with pytest.raises(ValueError, match=policy.CELL_TIMEOUT_VARIABLE):
        policy.cell_timeout(graded("test-relu-visible"))


NOISE = [
    "/x/torch/cuda/__init__.py:61: UserWarning: TF32 is off\n  warnings.warn(msg)\n",
    "/x/a.py:3: DeprecationWarning: old\n  f()\n/x/b.py:9: RuntimeWarning: overflow\n  g()\n",
    "[W1215 10:00:00.000 ProcessGroup.cpp:12] Warning: something about threads\n",
]
REAL = [
    "Traceback (most recent call last):\n  ...\nAssertionError: out[3] is 2.0, expected 0.0\n",
    "relu:  50%|#####     | 1/2 [00:01<00:01]\r",  # tqdm in a graded cell
    "/x/a.py:3: UserWarning: fine\n  f()\nbut then this\n",
    "my own message\n",
]


@pytest.mark.parametrize("text", NOISE)
def test_warnings_are_noise(text):
    assert re.search(policy.STDERR_NOISE, text)


@pytest.mark.parametrize("text", REAL)
def test_anything_else_on_stderr_still_counts(text):
    assert not re.search(policy.STDERR_NOISE, text)
