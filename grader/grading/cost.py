"""Where the time of one student's grading goes, for bench/grading_cost.py.

With COURSE_GRADING_TIMINGS naming a file, nbgrader's Execute (notebook_guards.JudgedExecute)
appends one JSON line to it per notebook it runs: how long the kernel took to start and to shut
down, and how long each cell ran. Unset (as in every real batch), nothing is recorded. The
grading process writes the file, outside the student's sandbox, which never sees it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field

VARIABLE = "COURSE_GRADING_TIMINGS"


@dataclass
class NotebookTimes:
    """One notebook's run in nbgrader's Execute, in seconds."""

    notebook: str
    student: str = ""  # whose notebook: a batch grades several at once
    kernel_start: float = 0.0  # launch (the sandbox included) until the kernel answers
    kernel_stop: float = 0.0
    cells: list[float] = field(default_factory=list)  # each code cell's execution, in order
    execute: float = 0.0  # the whole Execute step: start, every cell, stop


class Recorder:
    """Times the steps of one Execute run; `save` appends them where VARIABLE says, if set."""

    def __init__(self, notebook: str, student: str = ""):
        self.times = NotebookTimes(notebook, student)
        self.started = time.perf_counter()

    def save(self) -> None:
        self.times.execute = time.perf_counter() - self.started
        if path := os.environ.get(VARIABLE):
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(asdict(self.times)) + "\n")


def read(path) -> list[NotebookTimes]:
    """The records appended to `path`, oldest first; none when it does not exist."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [NotebookTimes(**json.loads(line)) for line in f if line.strip()]
