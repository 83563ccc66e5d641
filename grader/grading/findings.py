"""What a human should look at in one student's submission, and why, read from its files: the
submitted notebooks (readable at all? what of them grading left out? answer cells that reach
into their own process, grader.grading.detectors), the autograded notebooks (cells that timed
out, ran out of memory, or failed the integrity checks; the speed the judge measured), how the
grading run ended, and the scores nbgrader recorded."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from grader.grading import assemble, detectors, nbgrader_policy, verdicts
from grader.grading.nbgrader_policy import grade_id_of
from grader.runtime.published import Verdict

# Every reason a submission needs a human look, in the order the report lists them.
KINDS = {
    "not-imported": "not imported",
    "not-a-notebook": "not a notebook",
    "missing-notebook": "missing notebook",
    "crashed": "crashed",
    "timed-out": "timed out",
    "out-of-memory": "out of memory",
    "cell-timeout": "a cell timed out",
    "output-cut": "output cut",
    "cheating": "cheating flagged",
    "dynamic-code": "dynamic code",
    "zero-score": "zero score",
    "late": "late",
    "grader-error": "grader error",
    "no-feedback": "no feedback page",
}
GRADER_TROUBLE = ("grader-error", "no-feedback")  # the grader's own failures, not the student's
MAX_NOTEBOOK_BYTES = assemble.MAX_NOTEBOOK_BYTES
OOM_ERRORS = ("MemoryError", "OutOfMemoryError")
# a graded call's result not from the exercise's kernel (grader.runtime.launches), or a name of
# the exercise bound to an object that is no function, kernel or data (grader.grading.judge)
CHEATING_ERRORS = ("IntegrityError", "NotAFunction")
OOM_TEXT = ("out of memory", "can't allocate memory", "cannot allocate memory")
OUTPUT_CUT = nbgrader_policy.OUTPUT_CUT.format(limit=nbgrader_policy.OUTPUT_LIMIT >> 20)
GPU_FAULT_TEXT = ("illegal memory access", "misaligned address", "unspecified launch failure")


@dataclass(frozen=True)
class Finding:
    """One reason for a human look: `kind` is a key of KINDS, `detail` says what was seen."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{KINDS[self.kind]}: {self.detail}"


@dataclass(frozen=True)
class CellError:
    cell: str  # grade_id, else the cell's id
    ename: str
    evalue: str

    def __str__(self) -> str:
        return f"cell {self.cell}: {self.ename}: {self.evalue}".rstrip(": ")


@dataclass(frozen=True)
class Speed:
    """A speed cell's verdict, from the records it published. `measured` and `needed` are a
    speedup ("x") or a share of the copy bandwidth ("%"), or, where `at_most`, the DRAM bytes
    counted over the fewest; for a cell that makes several comparisons, those of the one
    furthest short of (or least past) its threshold. None when the cell measured nothing, or
    where the batch does not grade speed (`graded_here` False)."""

    grade_id: str
    graded_here: bool
    passed: bool = False
    measured: float | None = None
    needed: float | None = None
    unit: str = ""
    comparisons: int = 0
    flags: tuple[str, ...] = ()  # why the figures could not be trusted (the cell scored 0)
    at_most: bool = False

    @property
    def relative(self) -> float | None:
        """How far past its threshold the figure is: 1 is the threshold, more is better."""
        return verdicts.margin(self.measured, self.needed, self.at_most)


@dataclass
class Submitted:
    """What the student handed in, compared with the released notebooks: which notebooks could
    not be read, what of the rest grading left out (grader.grading.assemble), and what the answer
    cells, the only code of theirs that runs, reach in their own process."""

    unreadable: dict[str, str] = field(default_factory=dict)  # notebook -> why
    missing: list[str] = field(default_factory=list)
    dropped: assemble.Dropped = field(default_factory=assemble.Dropped)
    patches: list[detectors.Route] = field(default_factory=list)  # what its answer cells reach
    unchanged_solutions: bool = False
    ran_on: dict[str, str] = field(default_factory=dict)  # assemble.ran_on


@dataclass
class Graded:
    """What the autograded notebooks show."""

    errors: list[CellError] = field(default_factory=list)
    speed: list[Speed] = field(default_factory=list)
    cut: list[str] = field(default_factory=list)  # cells whose output passed the limit


@dataclass(frozen=True)
class Run:
    """How the grading run for one student ended: "ok", "failed", "timeout", "memory", or
    "not-graded" (no readable notebook to run)."""

    status: str
    seconds: float = 0.0
    detail: str = ""
    limit: str = ""


# -- reading files ---------------------------------------------------------------------------


def read_notebook(path: Path):
    """(notebook, None), or (None, why it is not a notebook). A link is not followed."""
    if path.is_symlink():
        return None, "a symbolic link, not read"
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        return None, f"{size / (1 << 20):.0f} MiB, over the {MAX_NOTEBOOK_BYTES >> 20} MiB limit"
    data = assemble.read_plain(path, MAX_NOTEBOOK_BYTES)
    if data is None:
        return None, "not a plain file"
    return assemble.parse_notebook(data)


def solutions_unchanged(submitted, released) -> bool:
    """True when every solution cell is exactly as released: nothing was attempted."""
    given = detectors.answer_cells(released, released)
    theirs = {
        grade_id: source.strip() for grade_id, source in detectors.answer_cells(submitted, released)
    }
    return bool(given) and all(theirs.get(grade_id) == source.strip() for grade_id, source in given)


def inspect(found: assemble.Submission, released: dict[str, object]) -> Submitted:
    """What a submission, read and assembled (grader.grading.assemble.read), shows a human: what
    of it did not run, what its answer cells reach (grader.grading.detectors), and whether they
    were left as released."""
    result = Submitted(found.unreadable, found.missing, found.dropped, ran_on=found.ran_on)
    unchanged = []
    for name, nb in found.notebooks.items():
        answers = detectors.answer_cells(nb, released[name])
        result.patches += detectors.reaches(answers, released[name])
        result.patches += detectors.routes(answers, detectors.entry_points(released[name]))
        unchanged.append(solutions_unchanged(nb, released[name]))
    result.unchanged_solutions = bool(unchanged) and all(unchanged)
    return result


# -- autograded notebooks ----------------------------------------------------------------------


def speed_of(grade_id: str, records: list[Verdict]) -> Speed:
    """A speed cell's verdict from the records it published (none: it measured nothing)."""
    flags = tuple(f for r in records for f in r.flags)
    worst = verdicts.worst(records)
    if worst is None:  # nothing measured (the isolated measurement failed, or the cell did)
        return Speed(grade_id, graded_here=True, flags=flags)
    passed = all(r.passed for r in records)
    return Speed(grade_id, True, passed, worst.measured, worst.needed, worst.unit, len(records),
                 flags, worst.at_most)  # fmt: skip


def cell_score(cell) -> float | None:
    """The points nbgrader gives a graded cell of an autograded notebook (None: not graded)."""
    from nbgrader import utils

    if not utils.is_grade(cell) or cell.cell_type != "code":
        return None
    try:
        return utils.determine_grade(cell)[0]
    except ValueError:  # a result above the cell's points: nbgrader refuses it too
        return None


def inspect_graded(nb, *, grades_speed: bool = False) -> Graded:
    """Errors, speed verdicts and output cut short in an autograded notebook. Speed verdicts are
    read only where the batch grades speed, from the records the judge published in speed
    cells."""
    result = Graded()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        label = grade_id_of(cell) or cell.get("id") or f"#{i}"
        outputs = cell.get("outputs", [])
        for o in outputs:
            if o.output_type == "error":
                result.errors.append(CellError(label, o.get("ename", ""), o.get("evalue", "")))
        if cell_score(cell) is not None and label.startswith("speed-"):
            records = verdicts.published(outputs)
            result.speed.append(speed_of(label, records) if grades_speed else Speed(label, False))
        text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
        if OUTPUT_CUT in text:
            result.cut.append(label)
    return result


# -- the verdict -------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{max(1, minutes)} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours < 48 else f"{hours // 24} days"


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def classify(
    *,
    run: Run | None,
    submitted: Submitted,
    graded: Graded | None,
    score: float | None,
    max_score: float,
    seconds_late: float = 0.0,
    penalty: float = 0.0,
) -> list[Finding]:
    """Every reason this submission needs a human look; empty when it needs none."""
    found = []
    for name, why in submitted.unreadable.items():
        found.append(Finding("not-a-notebook", f"{name}.ipynb is {why}"))
    for name in submitted.missing:
        files = submitted.dropped.files
        others = f"; handed in: {', '.join(files)}" if files else ""
        found.append(Finding("missing-notebook", f"no {name}.ipynb{others}"))
    readable = not submitted.unreadable and not submitted.missing
    if run is not None and run.status == "timeout":
        found.append(
            Finding("timed-out", run.detail or f"grading ran past {run.limit}; it was stopped")
        )
    elif run is not None and run.status == "memory":
        found.append(
            Finding("out-of-memory", f"the grading processes used more than {run.limit}; stopped")
        )
    elif run is not None and run.status == "failed" and readable:
        found.append(Finding("crashed", run.detail or "nbgrader failed; see the log"))
    errors = graded.errors if graded else []
    timeouts = [e.cell for e in errors if e.ename == "CellTimeoutError"]
    if timeouts:
        found.append(Finding("cell-timeout", f"interrupted: {', '.join(dict.fromkeys(timeouts))}"))
    memory = [
        e for e in errors if e.ename in OOM_ERRORS or any(t in e.evalue.lower() for t in OOM_TEXT)
    ]
    if memory:
        found.append(Finding("out-of-memory", _short(str(memory[0]))))
    faults = [e for e in errors if any(t in e.evalue.lower() for t in GPU_FAULT_TEXT)]
    if faults:
        found.append(Finding("crashed", _short(f"{faults[0]} (the GPU context is lost after it)")))
    if graded is not None and graded.cut:
        found.append(
            Finding(
                "output-cut",
                f"over {nbgrader_policy.OUTPUT_LIMIT >> 20} MiB of output, from cell "
                f"{graded.cut[0]} on; the rest was dropped, errors and results kept",
            )
        )
    cheats = [f"{e.cell}: {_short(e.evalue, 120)}" for e in errors if e.ename in CHEATING_ERRORS]
    routes = {kind: [str(r) for r in submitted.patches if r.kind == kind] for kind in KINDS}
    cheats += routes["cheating"]
    speed = graded.speed if graded else []
    cheats += [f"{s.grade_id}: {_short(flag, 120)}" for s in speed for flag in s.flags]
    if cheats:
        found.append(Finding("cheating", "; ".join(cheats)))
    if routes["dynamic-code"]:
        found.append(Finding("dynamic-code", "; ".join(routes["dynamic-code"])))
    if score is not None and score <= 0 < max_score and readable and run and run.status == "ok":
        if submitted.unchanged_solutions:
            why = "no solution filled in: every solution cell is as released"
        elif errors:
            first = next((e for e in errors if e.ename != "CellTimeoutError"), errors[0])
            why = _short(f"first error: {first}")
        else:
            why = "every graded cell failed"
        found.append(Finding("zero-score", why))
    if seconds_late > 0:
        applied = f"a penalty of {penalty:g} points" if penalty else "no penalty"
        found.append(Finding("late", f"{_duration(seconds_late)} after the due date; {applied}"))
    return found


def crash_detail(log: str) -> str:
    """One sentence on why nbgrader failed, from its log."""
    if "DeadKernelError" in log or "Kernel died" in log:
        return "the kernel died (os._exit, a segfault, or the system ran out of memory)"
    if "UnresponsiveKernelError" in log or "became unresponsive" in log:
        return "the kernel stopped responding and could not be interrupted"
    lines = [line for line in log.splitlines() if re.search(r"\w+(Error|Exception)\b", line)]
    return _short(lines[-1]) if lines else "nbgrader failed; see the log"
