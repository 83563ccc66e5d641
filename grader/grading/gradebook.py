"""Scores in nbgrader's gradebook, through its own API: read every submission of an assignment
cell by cell, register an assignment's due date, and record a submission nbgrader could not grade
(no notebook, or a file that is not one) the way nbgrader records a missing notebook: a score of 0
on each of its cells, never over a score already there."""

from __future__ import annotations

import os
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

# nbgrader 0.9.6 adds submissions in a way SQLAlchemy 2 warns about ("Object of type
# <SubmittedAssignment> not in session"); it works, and nothing here can act on the warning.
warnings.filterwarnings("ignore", message="Object of type <Submitted", module="nbgrader")

SQLITE_BUSY_SECONDS = 60  # students are graded side by side, each writing to the same file


def sqlite_url(path: Path) -> str:
    """The SQLAlchemy URL of a gradebook file, waiting for a lock rather than failing at once."""
    return f"sqlite:///{Path(path).resolve()}?timeout={SQLITE_BUSY_SECONDS}"


@contextmanager
def opened(db_url: str):
    """nbgrader's Gradebook on `db_url`. A new gradebook asks the `alembic` command for its
    schema version: it is looked for beside this Python, as build.nbgrader_env does."""
    from nbgrader.api import Gradebook

    here = str(Path(sys.executable).parent)
    if here not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join(p for p in (here, os.environ.get("PATH")) if p)
    with Gradebook(db_url) as gb:
        yield gb


@dataclass
class StudentGrades:
    """One student's submission of one assignment, as the gradebook has it. `scores` maps each
    graded cell's grade_id to its score, or None where nothing was recorded."""

    student: str
    scores: dict[str, float | None] = field(default_factory=dict)
    seconds_late: float = 0.0
    penalty: float = 0.0

    @property
    def total(self) -> float:
        return sum(s or 0.0 for s in self.scores.values()) - self.penalty


def max_scores(db_url: str, assignment: str) -> dict[str, float]:
    """{grade_id: points} for every graded cell of `assignment`, notebook by notebook."""
    from nbgrader.api import MissingEntry

    with opened(db_url) as gb:
        try:
            found = gb.find_assignment(assignment)
        except MissingEntry:
            return {}
        cells = (cell for notebook in found.notebooks for cell in notebook.grade_cells)
        return {cell.name: float(cell.max_score) for cell in cells}


def notebook_names(db_url: str, assignment: str) -> list[str]:
    """The notebooks of `assignment` (without .ipynb), as nbgrader registered them."""
    with opened(db_url) as gb:
        return [nb.name for nb in gb.find_assignment(assignment).notebooks]


def grades(db_url: str, assignment: str) -> dict[str, StudentGrades]:
    """{student: StudentGrades} for every submission of `assignment` in the gradebook."""
    found = {}
    with opened(db_url) as gb:
        for submission in gb.find_assignment(assignment).submissions:
            row = found[submission.student.id] = StudentGrades(
                submission.student.id,
                seconds_late=float(submission.total_seconds_late or 0.0),
                penalty=float(submission.late_submission_penalty or 0.0),
            )
            for grade in (g for notebook in submission.notebooks for g in notebook.grades):
                recorded = grade.manual_score is not None or grade.auto_score is not None
                row.scores[grade.name] = float(grade.score) if recorded else None
    return found


def set_duedate(db_url: str, assignment: str, duedate: str) -> None:
    """Record the due date nbgrader measures late submissions against."""
    with opened(db_url) as gb:
        gb.update_or_create_assignment(assignment, duedate=duedate)


def record_ungraded(
    db_url: str, assignment: str, student: str, notebooks: list[str], timestamp: str | None = None
) -> None:
    """Make sure `student` has a submission of `assignment` (handed in at `timestamp`, if
    known), and give each cell of `notebooks` that has no score a score of 0, as nbgrader does
    for a missing notebook."""
    with opened(db_url) as gb:
        gb.update_or_create_student(student)
        extra = {"timestamp": timestamp} if timestamp else {}
        gb.update_or_create_submission(assignment, student, **extra)
        for name in notebooks:
            for grade in gb.find_submission_notebook(name, assignment, student).grades:
                if grade.auto_score is None and grade.manual_score is None:
                    grade.auto_score = 0.0
                    grade.needs_manual_grade = False
        gb.db.commit()
