"""What nbgrader needs to know to grade this course fairly: how long each cell may run, and which
stderr output is noise rather than a failure. `grader/grading/nbgrader_config.py` installs both.

Timeouts: nbclient (under nbgrader 0.9.6) has one timeout for every cell, `Execute.timeout`, and a
hook, `Execute.timeout_func(cell)`, that may give each cell its own; it reads no per-cell
metadata by itself. `cell_timeout` is that hook: speed cells (grade_id `speed-...`) compile,
autotune and time kernels, so they get the longer `SPEED_CELL_TIMEOUT`. Both can be set through
the environment (`python -m grader autograde --cell-timeout/--speed-cell-timeout` does that).

Noise: nbgrader scores a test cell 0 when it writes anything to stderr. Python warnings from
libraries (a deprecation in torch, a numpy RuntimeWarning in the interpreter) say nothing about the
student's answer, so `STDERR_NOISE` matches stderr text made only of warnings; nbgrader's
IgnorePattern preprocessor drops such output before the cell is scored. Anything else on stderr
still costs the cell, and errors are never stderr: they are error outputs.

Sizes: a notebook's outputs are kept up to `OUTPUT_LIMIT` bytes while it runs
(grader.grading.notebook_guards.JudgedExecute); past it, what a cell prints or displays is
dropped, and `OUTPUT_CUT` says so in the cell.

Metadata: `grade_id_of` reads a cell's grade_id. nbgrader's own processes import this module and
notebook_guards, and neither imports torch (grader.grading.findings does): each student's
nbgrader process starts without it.
"""

from __future__ import annotations

import os

CELL_TIMEOUT = 600  # seconds; interpreter-mode cells run kernels as Python on the CPU
SPEED_CELL_TIMEOUT = 900  # seconds; compilation, autotuning and timing in one cell
SUBMISSION_TIMEOUT = 1800  # seconds for one student's whole grading (grader.grading.autograde)
CELL_TIMEOUT_VARIABLE = "COURSE_CELL_TIMEOUT"
SPEED_CELL_TIMEOUT_VARIABLE = "COURSE_SPEED_CELL_TIMEOUT"
OUTPUT_LIMIT = 16 << 20  # bytes of output one notebook keeps while it is graded
OUTPUT_CUT = "[grader: this notebook's output passed {limit} MiB; the rest of it was dropped]"

# LMS downloads (`nbgrader zip_collect`): Canvas names files
# <login>[_late]_<user id>_<submission id>_<file name>; --regexp gives another LMS's pattern.
LMS_FILE_PATTERN = r".*/(?P<student_id>[^/_]+)_(?:late_)?\d+_\d+_(?P<file_id>[^/]+)$"

# One Python warning as `warnings` prints it ("path:line: SomeWarning: message", then the source
# line, indented), or a C++ warning from torch's logging ("[W... file.cpp:12] Warning: ...").
_WARNING = r"(?:\S[^\n]*:\d+: \w*Warning: [^\n]*|\[W[^\n]*\] Warning: [^\n]*)"
STDERR_NOISE = rf"\A(?:{_WARNING}\n?(?:[ \t]+[^\n]*\n?)*)+\Z"


def _seconds(variable: str, default: int) -> int:
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = int(float(text))
    except ValueError:
        raise ValueError(f"{variable}={text!r}: give a number of seconds") from None
    if value <= 0:
        raise ValueError(f"{variable}={text!r}: give a positive number of seconds")
    return value


def is_speed_cell(cell) -> bool:
    """True for a graded cell whose grade_id starts with `speed-`."""
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
    return grade_id.startswith("speed-")


def cell_timeout(cell) -> int:
    """Seconds `cell` may run before nbclient interrupts it (nbclient's `timeout_func`)."""
    base = _seconds(CELL_TIMEOUT_VARIABLE, CELL_TIMEOUT)
    if is_speed_cell(cell):
        return max(base, _seconds(SPEED_CELL_TIMEOUT_VARIABLE, SPEED_CELL_TIMEOUT))
    return base


def grade_id_of(cell) -> str | None:
    """The cell's grade_id, None where it has none (or its nbgrader metadata is malformed)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
    return grade_id if isinstance(grade_id, str) else None
