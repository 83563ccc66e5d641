"""Class 8 of the attacks on grading, in the notebook: what nbgrader's own bookkeeping used to
turn into a zero for the whole notebook ("crashed"), or hold without limit. A graded cell
repeated, a grade_id the assignment does not have, or nbgrader metadata without one: grading now
runs the release with the answer cells (grader.grading.assemble), so none of these cells runs:
what grading runs is the answered notebook, byte for byte, and the report lists what did not
run. Output without
end (300 MB, or 20 MiB here to keep the test short): kept up to nbgrader_policy.OUTPUT_LIMIT,
the cells still scored as they ran, and flagged."""

import copy

from grader.grading import findings, nbgrader_policy
from tests import light
from tests.hostile import Attacker, Graded

KERNEL = "relu-kernel"


def _full_marks(student: str):
    """A check: `student` scored what the honest students did, cell by cell."""

    def check(result: Graded) -> None:
        assert result.scores[student] == result.scores["honest-1"], result.scores[student]

    return check


def _with_cell(m, metadata: dict | None, source: str = "x = 1"):
    """The answered notebook with a code cell added after the kernel's, carrying `metadata` as
    its nbgrader metadata (a copy of the kernel cell's when None)."""
    nb = m.answered()
    kernel = m.cell(nb, KERNEL)
    extra = copy.deepcopy(kernel)
    extra.pop("id", None)
    if metadata is not None:
        extra.source = source
        extra.metadata["nbgrader"] = metadata
    nb.cells.insert(nb.cells.index(kernel) + 1, extra)
    return m.files(nb)


def _bonus(m):
    """A graded test cell of the student's own, worth 100 points."""
    meta = {"grade": True, "grade_id": "bonus", "locked": False, "points": 100, "solution": False}
    return _with_cell(m, {**meta, "schema_version": 3})


def _flood(m):
    """The answered notebook printing 20 MiB from the answer cell, then 1 MiB to stderr."""
    code = (
        "import sys\nfor _ in range(20):\n    print('x' * (1 << 20))\n"
        "print('y' * (1 << 20), file=sys.stderr)"
    )
    return m.files(m.appended(m.answered(), light.ANSWER, code))


def _output_kept_small(result: Graded) -> None:
    (path,) = (result.root / "autograded" / "output-flood").rglob("*.ipynb")
    assert path.stat().st_size < nbgrader_policy.OUTPUT_LIMIT + (1 << 20), path.stat().st_size
    assert findings.OUTPUT_CUT in path.read_text()


ATTACKERS = [
    Attacker(
        "repeated-graded-cell",
        "00_setup",
        lambda m: _with_cell(m, None),
        dropped=f"answer cells repeated (the last one ran): {KERNEL}",
        base=lambda m: m.answered(),
        runs_as_base=True,
    ),
    Attacker(
        "unknown-grade-id",
        "00_setup",
        _bonus,
        dropped="1 code cell added",
        base=lambda m: m.answered(),
        runs_as_base=True,
    ),
    Attacker(
        "grade-id-missing",
        "00_setup",
        lambda m: _with_cell(m, {"grade": True, "points": 5, "schema_version": 3}),
        dropped="1 code cell added",
        base=lambda m: m.answered(),
        runs_as_base=True,
    ),
    Attacker(
        "output-flood",
        light.ASSIGNMENT,
        _flood,
        flags=frozenset({"output-cut"}),
        detail=f"from cell {light.ANSWER} on",
        total=None,
        check=lambda result: (_full_marks("output-flood")(result), _output_kept_small(result)),
    ),
]
