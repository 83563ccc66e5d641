"""The hostile class: synthetic students who attack grading, one module per kind of attack, each
with a list `ATTACKERS`. tests/test_hostile.py grades every attacker of a notebook in one batch
beside honest students and asserts each attacker's outcome: its score equals its honest base (what
its kernel earns without the attack), or it is flagged for a human look with the right reason;
and the honest students' scores are untouched by all of it. Scores are the judge's
(grader.grading.judge): what an attack in the student's process can reach decides nothing.

An attacker's files are built from the notebook as released and as written by its authors
(`Materials`), so that the class follows the notebooks as they change."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat


def printed(nb) -> list[str]:
    """What each code cell of an executed notebook printed, its stream outputs joined: the
    kernel sends buffered text as it flushes, so one print may arrive as several outputs."""
    return [
        "".join(o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream")
        for cell in nb.cells
        if cell.cell_type == "code"
    ]


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


@dataclass(frozen=True)
class Materials:
    """One notebook as students received it and as its authors wrote it."""

    assignment: str
    notebook: str  # file name without .ipynb
    release: nbformat.NotebookNode
    source: nbformat.NotebookNode

    def cell(self, nb, grade_id: str):
        (found,) = [c for c in nb.cells if _grade_id(c) == grade_id]
        return found

    def answered(self) -> nbformat.NotebookNode:
        """The release with every solution cell answered as in the source: full marks."""
        nb = copy.deepcopy(self.release)
        mine = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
        theirs = [c for c in self.source.cells if c.metadata.get("nbgrader", {}).get("solution")]
        for m, t in zip(mine, theirs, strict=True):
            m.source = "\n".join(
                line
                for line in t.source.split("\n")
                if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line
            )
        return nb

    def edited(self, nb, grade_id: str, old: str, new: str) -> nbformat.NotebookNode:
        """A copy of `nb` with `old` replaced by `new` in the cell `grade_id`."""
        nb = copy.deepcopy(nb)
        cell = self.cell(nb, grade_id)
        assert old in cell.source, f"{self.assignment}: {old!r} is gone from {grade_id}"
        cell.source = cell.source.replace(old, new)
        return nb

    def rewritten(self, nb, old: str, new: str) -> nbformat.NotebookNode:
        """A copy of `nb` with `old` replaced by `new` in the one cell that holds it (a given,
        ungraded cell that students may edit, such as a launcher)."""
        nb = copy.deepcopy(nb)
        (cell,) = [c for c in nb.cells if old in c.source]
        cell.source = cell.source.replace(old, new)
        return nb

    def appended(self, nb, grade_id: str, code: str) -> nbformat.NotebookNode:
        """A copy of `nb` with `code` run at the end of the cell `grade_id`."""
        nb = copy.deepcopy(nb)
        self.cell(nb, grade_id).source += "\n\n" + code
        return nb

    def added(self, nb, after: str, code: str) -> nbformat.NotebookNode:
        """A copy of `nb` with a code cell of `code` added after the one cell that holds
        `after`, as a student adds one (no nbgrader metadata)."""
        nb = copy.deepcopy(nb)
        (cell,) = [c for c in nb.cells if after in c.source]
        nb.cells.insert(nb.cells.index(cell) + 1, nbformat.v4.new_code_cell(code))
        return nb

    def files(self, nb, **beside: bytes) -> dict[str, object]:
        """The notebook, and files beside it ({path: bytes}, written as the student's)."""
        return {f"{self.notebook}.ipynb": nb, **beside}


@dataclass(frozen=True)
class Graded:
    """What a batch left behind, for an attacker's own check."""

    root: Path  # the course directory
    out: Path  # root/grading/<assignment>
    scores: dict[str, dict[str, float]]  # {student: {grade_id: score}} from the gradebook
    review: dict[str, str]  # {student: the CSV's needs_review}
    dropped: dict[str, str]  # {student: the CSV's dropped_at_grading}
    materials: Materials
    bases: dict[str, str] = field(default_factory=dict)  # {attacker: student graded as its base}


@dataclass(frozen=True)
class Attacker:
    """One synthetic student. `flags` are finding kinds (grader.grading.findings.KINDS) that
    must be reported for it, with `detail` in the reason where given. `total` is the score it
    must get, or None where only the flag is asserted; "base" means the score of `base(m)`, its
    honest self, which the test grades beside it. `dropped`: words the class report's
    "dropped at grading" must say of it (what it wrote outside its answers). Where
    `runs_as_base` is set, the notebook grading runs for it must be byte for byte its base's
    (grader.grading.assemble): checked on the CPU for every such attacker, and graded end to
    end where its notebook's batch runs (00 and 07 on the CPU; 05, 07 and 09 on a GPU:
    tests/test_hostile_gpu.py)."""

    student: str
    assignment: str
    files: Callable[[Materials], dict[str, object]]
    flags: frozenset[str] = frozenset()
    detail: str | None = None
    total: float | str | None = "base"
    base: Callable[[Materials], nbformat.NotebookNode] | None = None
    check: Callable[[Graded], None] | None = field(default=None, compare=False)
    dropped: str | None = None
    runs_as_base: bool = False
    gpu_only: bool = False  # an attack on speed: graded on a GPU alone (tests/test_hostile_gpu.py)

    def __post_init__(self):
        if (self.total == "base" or self.runs_as_base) and self.base is None:
            raise ValueError(f"{self.student}: total='base' and runs_as_base need base")


def on_blank(
    student: str,
    assignment: str,
    cell: str,
    code: str,
    flags: frozenset[str] = frozenset(),
    detail: str | None = None,
) -> Attacker:
    """An attacker whose `code` runs after the answer cell `cell` of `assignment`, left blank as
    released: it must score what the blank release scores (nothing), with `flags`."""
    return Attacker(
        student,
        assignment,
        lambda m: m.files(m.appended(m.release, cell, code)),
        flags=flags,
        detail=detail,
        base=lambda m: m.release,
    )


def everyone() -> list[Attacker]:
    """Every attacker of every module in this package."""
    import importlib
    import pkgutil

    found = []
    for info in pkgutil.iter_modules(__path__):
        found += importlib.import_module(f"{__name__}.{info.name}").ATTACKERS
    names = [a.student for a in found]
    assert len(names) == len(set(names)), "two attackers with one name"
    return found
