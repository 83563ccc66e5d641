"""Feedback pages that carry no hidden test, by construction rather than by detection.

The hidden tests run in the student's process, which can read them there (the running cell's
source is in its frames and in IPython's line cache and `In` history) and show them in any form:
printed, compressed and encoded, as an error's message or its class name, in a display an
earlier cell created and a later one updates, in a widget's value, in a prompt number. No filter
of the outputs tells an encoded copy from noise, so the page shows nothing the student's process
produced once it could have seen a hidden test:

- `snapshot`, called by grader.grading.notebook_guards.CappedExecute in the trusted nbgrader
  process, copies every cell's outputs as the first cell holding hidden tests starts (a cell
  whose source holds nbgrader's `### BEGIN HIDDEN TESTS`, as OverwriteCells restored it from the
  gradebook), into the notebook's metadata under SNAPSHOT. The kernel cannot write there: nbclient
  turns its messages into outputs, prompt numbers, cell timings and widget state, nothing else;
  the folder it works in is a copy of its own (grader.grading.jail); and a SNAPSHOT the
  submission brought is dropped before the run. Until that cell starts, the kernel has never been
  sent a hidden line (its sandbox holds no notebook), so the copy needs no filter. (nbgrader
  lists ClearMetadataPreprocessor after execution; it is off unless configured, and were it on,
  the page would show no output of the student's process at all.) Once the run is over, `settle`
  drops the copy of each cell whose outputs are still the copied ones (a later display update is
  how they could change), so that the notebook does not hold its outputs twice.
- `page`, through `FeedbackPage`, the last of GenerateFeedback's preprocessors, shows the cells
  before that one with their copied outputs, and from it on only the trusted side's own words:
  for each graded cell its score and points from the gradebook (nbgrader's GetGrades), a status
  and, for a speed cell, its verdict; for every other code cell, a note that its output is not
  shown. Widget state, prompt numbers and cell timings, which later cells can set, are left out.

What the student's process still chooses is a few words of a fixed vocabulary: the status
(passed, failed, timed out, not run, or the error raised, named where its class is one of
ERRORS, else "an error"), whether a speed cell passed or was flagged, and the figure and
threshold of its worst comparison, rounded to 2 significant digits; scores are rounded to 2
decimals, as nbgrader's page shows them. That is a channel of a few bits a cell, too narrow to
copy a test through. The autograded notebook, the instructor's copy, keeps every output, and
grader.grading.findings flags hidden-test source shown plainly there.
"""

from __future__ import annotations

import builtins
import copy

from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor

from grader.grading import hidden_tests, nbgrader_policy, verdicts

SNAPSHOT = "course_feedback"  # nb.metadata: {"cells": n, "outputs": [outputs of each cell shown]}
UNCHANGED = None  # in SNAPSHOT's outputs: the cell's outputs did not change after the copy
TIMEOUT = "CellTimeoutError"  # the error nbgrader's Execute records for a cell past its timeout
# Besides Python's own: the course's (grader/runtime; tests/test_feedback.py keeps this complete)
# and those of torch and Triton that an exercise's mistakes raise (out of memory, a kernel that
# does not compile, a tile that does not fit in shared memory).
COURSE_ERRORS = (
    "AuditFailed",
    "CensusUnavailable",
    "CheckUnavailable",
    "GPUCompileError",
    "HintedError",
    "IntegrityError",
    "KernelCheckError",
    "LLMError",
    "ModeError",
    "OutOfBoundsError",
    "ProfileError",
    "RecordingError",
    "StubNotFilled",
    "TimingUnavailable",
    "OutOfMemoryError",
    "CompilationError",
    "OutOfResources",
)
ERRORS = frozenset(
    {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
    | set(COURSE_ERRORS)
)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
HIDDEN = "Feedback shows no output from the first hidden test on: it could quote the hidden tests."
MISSING = (
    "Feedback shows no output of this notebook: the grader kept no copy of its outputs from "
    "before the hidden tests ran."
)
NO_VERDICT = "Speed: no verdict (speed is graded only on an NVIDIA GPU, sm_80 or newer)."
RUN_IT = "Run the notebook to see this cell's output."
VISIBLE = "{test}, the visible test of this exercise, checks fewer cases: run its checks on more."


def holds_hidden_tests(cell) -> bool:
    return cell.get("cell_type") == "code" and hidden_tests.BEGIN in cell.get("source", "")


def snapshot(nb, shown: int) -> None:
    """Record in `nb`'s metadata the outputs of its first `shown` cells, as they are now."""
    nb.metadata[SNAPSHOT] = {
        "cells": len(nb.cells),
        "outputs": [copy.deepcopy(c.get("outputs", [])) for c in nb.cells[:shown]],
    }


def settle(nb) -> None:
    """Once the run is over: each cell whose outputs are still those `snapshot` copied keeps no
    copy (UNCHANGED), so that the notebook does not hold its outputs twice (a cell's output is
    kept up to nbgrader_policy.OUTPUT_LIMIT, and the copy would double it)."""
    saved = nb.metadata[SNAPSHOT]
    saved["outputs"] = [
        UNCHANGED if outputs == cell.get("outputs", []) else outputs
        for outputs, cell in zip(saved["outputs"], nb.cells, strict=False)
    ]


def _copied(nb) -> list | None:
    """The outputs `snapshot` recorded, one list per cell shown (UNCHANGED: the cell's own);
    None where there is no record of this notebook's cells."""
    saved = nb.metadata.get(SNAPSHOT)
    if not isinstance(saved, dict) or saved.get("cells") != len(nb.cells):
        return None
    outputs = saved.get("outputs")
    if not isinstance(outputs, list) or len(outputs) > len(nb.cells):
        return None
    if not all(o is UNCHANGED or isinstance(o, list) for o in outputs):
        return None
    return outputs


def _static(output):
    """`output` without a widget view: the page embeds no widget state, so it shows the
    widget's plain-text form."""
    data = output.get("data")
    if isinstance(data, dict):
        data.pop(WIDGET_VIEW, None)
    return output


def _two(x: float) -> str:
    """`x` rounded to 2 significant digits: 0.9412 -> 0.94, 71.3 -> 71, 1234 -> 1200."""
    return f"{float(f'{x:.2g}'):g}"


def status(cell, score: float | None, points: float) -> str:
    """What became of a graded cell, in the fixed vocabulary."""
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if score is not None and points and score >= points:
        return "passed"
    if any(o.get("ename") == TIMEOUT for o in errors):
        return "timed out"
    if errors:
        name = errors[0].get("ename")
        return f"failed: raised {name if isinstance(name, str) and name in ERRORS else 'an error'}"
    if cell.get("execution_count") is None:
        return "not run"
    return "failed"


def speed(outputs: list) -> str:
    """A speed cell's verdict: passed or not, or flagged, and the figure that decided it."""
    readable = [o for o in outputs if isinstance(o.get("data", {}), dict)]
    records = [r for r in verdicts.published(readable) if isinstance(r, verdicts.Record)]
    if not records:
        return NO_VERDICT
    if any(r.flags for r in records):
        return "Speed: flagged, the figures cannot be trusted (the cell says why when you run it)."
    worst = verdicts.worst(records)
    bound = "at most" if worst.at_most else "needs"
    figure = f"{_two(worst.measured)}{worst.unit} ({bound} {_two(worst.needed)}{worst.unit})"
    if all(r.passed for r in records):
        return f"Speed: passed; the closest to its threshold: {figure}."
    return f"Speed: not passed; the furthest below its threshold: {figure}."


def verdict(cell, grade_ids: set[str], why: str = HIDDEN) -> str:
    """The trusted side's words on one graded cell: its score, status, speed verdict, and, where
    it did not pass, `why` its output is not shown and where to look instead. `grade_ids`: those
    of the notebook's cells."""
    meta = cell.metadata.nbgrader
    grade_id, score, points = meta["grade_id"], meta.get("score"), meta.get("points") or 0
    said = "not scored yet" if score is None else f"{round(score, 2):g} of {points:g} points"
    state = status(cell, score, points)
    lines = [f"{grade_id}: {said}; {state}."]
    if nbgrader_policy.is_speed_cell(cell):
        lines.append(speed(cell.get("outputs", [])))
    if state != "passed":
        visible = grade_id.removesuffix("-hidden") + "-visible"
        where = VISIBLE.format(test=visible) if visible in grade_ids - {grade_id} else RUN_IT
        lines.append(f"{why} {where}")
    return "\n".join(lines) + "\n"


def page(nb) -> None:
    """Make the autograded notebook `nb` its feedback page, in place (see the module's doc)."""
    copied = _copied(nb)
    nb.metadata.pop(SNAPSHOT, None)
    nb.metadata.pop("widgets", None)  # the widgets' state as the last cell left it
    shown = len(copied) if copied is not None else 0
    why = HIDDEN if copied is not None else MISSING
    grade_ids = {g for c in nb.cells if (g := nbgrader_policy.grade_id_of(c))}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        cell.metadata.pop("execution", None)  # times from the kernel's own message headers
        if index < shown:
            kept = cell.outputs if copied[index] is UNCHANGED else copied[index]
            cell.outputs = [_static(o) for o in kept]
            continue
        if cell.metadata.get("nbgrader", {}).get("grade") is True:
            said = [verdict(cell, grade_ids, why)]
        else:
            said = [f"[{why} {RUN_IT}]\n"] if cell.source.strip() else []
        cell.outputs = [new_output("stream", name="stdout", text=text) for text in said]
        cell.execution_count = None


class FeedbackPage(NbGraderPreprocessor):
    """GenerateFeedback's last step: the page `page` makes of the autograded notebook."""

    def preprocess(self, nb, resources):
        if _copied(nb) is None:
            self.log.warning(
                "%s: no record of its outputs before the hidden tests; the page shows none",
                resources.get("nbgrader", {}).get("notebook"),
            )
        page(nb)
        return nb, resources
