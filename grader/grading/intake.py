"""What every route into a grading batch shares: the limits on one submission, the student ids a
batch can use, and the record of what was left out. grader.grading.autograde brings in a folder in
nbgrader's layout or an LMS download, grader.grading.exchange an nbgrader exchange; each writes
what it refused to refused.json, which the class report lists as "not imported"."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

from grader.grading.assemble import MAX_NOTEBOOK_BYTES, printable

MAX_FILE_BYTES = MAX_NOTEBOOK_BYTES  # one file handed in; a larger one is left out, not read
# One submission in all: room for four notebooks at the limit above, beside a few small files.
# What a student hands in is copied by the grader's user, so sparse files and floods of empty
# ones must not become gigabytes and inodes of the course directory: past either limit the
# submission is refused whole, counted before anything of it is copied.
MAX_SUBMISSION_BYTES = 4 * MAX_FILE_BYTES  # 256 MiB; the files over MAX_FILE_BYTES aside
MAX_SUBMISSION_FILES = 1000  # files and folders; an assignment's folder holds a handful
TOO_LARGE = f"over the {MAX_FILE_BYTES >> 20} MiB limit for one file, not read"
CHANGED = "changed while it was copied, so not taken; run the import again to take it as it is then"
GLOB_CHARACTERS = "*?[]"  # `nbgrader --student` takes a pattern: these would match others
REFUSED = "refused.json"  # beside the report


class AutogradeError(RuntimeError):
    """The batch cannot be graded as asked; the message says what to fix."""


@dataclass(frozen=True)
class Refused:
    """A file or folder of the submissions left out of the batch, and why. `student` is the
    student it belongs to (as the report may print it), else the file's own name."""

    student: str
    reason: str


def write_refused(out: Path, notes: list[Refused]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / REFUSED).write_text(json.dumps([asdict(n) for n in notes], indent=1))


def student_id_problem(name: str) -> str | None:
    """Why `name` cannot be a student id in the batch, or None when it can."""
    if printable(name) != name:
        return "the name is not printable UTF-8 text (a byte of another encoding, or a control)"
    if any(c in GLOB_CHARACTERS for c in name):
        return (
            "the name holds one of * ? [ ], which `nbgrader autograde --student` reads as a "
            "pattern matching other students"
        )
    if name.startswith(".") or not name.strip():
        return "the name is empty or starts with a dot (a hidden folder)"
    return None


class TooMuch(Exception):
    """A submission past MAX_SUBMISSION_BYTES or MAX_SUBMISSION_FILES; the message says which."""


@dataclass
class Budget:
    """What one submission may still hold, counted as its files are listed, before any is
    copied: each is then copied up to the size it was counted with (`copy_capped`)."""

    bytes_left: int = MAX_SUBMISSION_BYTES
    entries_left: int = MAX_SUBMISSION_FILES

    def count(self, size: int = 0) -> None:
        """Count a folder, or a file of `size` bytes (none over MAX_FILE_BYTES: it is left
        out); TooMuch past either limit."""
        self.entries_left -= 1
        self.bytes_left -= size if size <= MAX_FILE_BYTES else 0
        if self.entries_left < 0:
            raise TooMuch(
                f"more than {MAX_SUBMISSION_FILES} files and folders, the limit for one "
                "submission (intake.MAX_SUBMISSION_FILES): refused whole; the student hands in "
                "again without the extra files"
            )
        if self.bytes_left < 0:
            raise TooMuch(
                f"over {MAX_SUBMISSION_BYTES >> 20} MiB in all, the limit for one submission "
                "(intake.MAX_SUBMISSION_BYTES): refused whole; the student hands in again "
                "without the large files"
            )


def copy_capped(read: BinaryIO, target: Path, limit: int) -> bool:
    """Copy the binary stream `read` to `target` when it holds at most `limit` bytes; else
    write nothing and return False."""
    data = read.read(limit + 1)  # at most MAX_FILE_BYTES and one
    if len(data) > limit:
        return False
    target.write_bytes(data)
    return True
