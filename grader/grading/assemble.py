"""The notebook that grading runs, assembled on the trusted side: the release, cell for cell, with
the source of each answer cell taken from the student's submission. Nothing else the student
handed in reaches the run: not a given cell they edited (a reference function, a tolerance, a
threshold, a launcher), not a cell they added, not the notebook's metadata, not a file beside
the notebook. What a student wrote outside the answer cells therefore cannot change a score; what
was dropped (`Dropped`) goes to the class report, and the student's own hand-in check
(grader.runtime.handin) warned them before they handed in.

An answer cell is found by its nbgrader grade_id; of two with one grade_id, the last counts (as
nbgrader's own deduplication would keep one). One missing from the submission runs as released
(its stub), so its exercise scores nothing.

`read` reads a student's submission folder once, each file without following a link and within
the size limit for one file: the notebooks it assembles, what could not be read, the timestamp
and a digest of every file. `stage` writes what nbgrader's `autograde` reads of it into a folder
of its own (ASSEMBLED/<student>/<assignment>/): the assembled notebooks and, where the submission
has a well-formed one, nbgrader's `timestamp.txt`; nothing else, so no submitted file can reach
the kernel's working directory or its import path.
"""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from grader.grading import roles
from grader.grading.nbgrader_policy import grade_id_of
from grader.runtime import published

ASSEMBLED = "assembled"  # nbgrader's submitted_directory while it grades (see autograde)
MAX_NOTEBOOK_BYTES = 64 << 20  # a notebook file larger than this is not read, nor graded
TIMESTAMP = "timestamp.txt"
NOT_READ = f"not a plain file of at most {MAX_NOTEBOOK_BYTES >> 20} MiB (a link is not followed)"
MAX_TIMESTAMP_BYTES = 256


@dataclass
class Dropped:
    """What of one student's submission grading did not run, and why it does not count."""

    edited: list[str] = field(default_factory=list)  # given cells changed: "grade_id"
    added: int = 0  # code cells the student added
    missing: list[str] = field(default_factory=list)  # answer cells not found: run as released
    repeated: list[str] = field(default_factory=list)  # answer grade_ids given more than once
    files: list[str] = field(default_factory=list)  # files handed in beside the notebooks

    def merge(self, other: Dropped) -> None:
        """Add what another notebook of the same submission left out."""
        self.edited += other.edited
        self.added += other.added
        self.missing += other.missing
        self.repeated += other.repeated
        self.files += other.files

    def __bool__(self) -> bool:
        return bool(self.edited or self.added or self.missing or self.repeated or self.files)

    def describe(self) -> str:
        """One line for the class report."""
        parts = []
        if self.edited:
            parts.append(f"given cells edited: {', '.join(self.edited)}")
        if self.added:
            parts.append(f"{self.added} code cell{'s' * (self.added != 1)} added")
        if self.missing:
            parts.append(f"answer cells missing (run as released): {', '.join(self.missing)}")
        if self.repeated:
            parts.append(f"answer cells repeated (the last one ran): {', '.join(self.repeated)}")
        if self.files:
            parts.append(f"files beside the notebook: {', '.join(self.files)}")
        return "; ".join(parts)


def assemble(release, submitted) -> tuple[nbformat.NotebookNode, Dropped]:
    """The release with the source of each answer cell taken from `submitted`, and what of
    `submitted` was left out."""
    dropped = Dropped()
    mine: dict[str, object] = {}
    for cell in submitted.cells:
        grade_id = grade_id_of(cell)
        if grade_id is not None and grade_id in mine:
            dropped.repeated.append(grade_id)
        if grade_id is not None:
            mine[grade_id] = cell
    given = {grade_id_of(c): c for c in release.cells if grade_id_of(c) is not None}
    nb = copy.deepcopy(release)
    for cell in nb.cells:
        grade_id = grade_id_of(cell)
        if roles.kind(cell) == "answer":
            theirs = mine.get(grade_id)
            if theirs is None or theirs.get("cell_type") != cell.cell_type:
                dropped.missing.append(grade_id)
            else:
                cell.source = _text(theirs.get("source", ""))
        elif cell.cell_type == "code" and grade_id in mine:
            if _text(mine[grade_id].get("source", "")) != cell.source:
                dropped.edited.append(grade_id)
    dropped.added = sum(
        1 for c in submitted.cells if c.get("cell_type") == "code" and grade_id_of(c) not in given
    )
    dropped.repeated = sorted(set(dropped.repeated))
    return nb, dropped


def ran_on(nb) -> dict[str, str]:
    """The versions a submitted notebook last ran on, as its setup cell published them
    (grader.runtime.device); {} where it published none. The student's word, shown to a human
    beside the grader's own versions, never a verdict."""
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            found = output.get("data", {}).get(published.VERSIONS_MIMETYPE)
            if isinstance(found, dict):
                return {k: str(found.get(k))[:40] for k in (*published.TOOLCHAIN, "mode")}
    return {}


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else str(source)


# -- reading and staging one student's files -------------------------------------------------


def printable(name: str) -> str:
    """`name` as text a report can hold: bytes that are not UTF-8 as \\xNN escapes, control
    characters as \\uNNNN."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)


def read_plain(path: Path, limit: int) -> bytes | None:
    """The bytes of `path` if it is a regular file, not a link, of at most `limit` bytes; else
    None. The file is opened without following a link, and checked once open."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ENXIO):
            return None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    return data if len(data) <= limit else None


def parse_notebook(data: bytes):
    """(notebook, None) from a notebook file's bytes, or (None, why they are not one)."""
    if data.startswith(b"%PDF"):
        return None, "a PDF file with an .ipynb name"
    if data.startswith(b"PK\x03\x04"):
        return None, "a zip archive with an .ipynb name"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "a binary file, not text"
    nested = "JSON nested too deeply to read (hundreds of levels, in its metadata or elsewhere)"
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    except RecursionError:
        return None, nested
    if not isinstance(raw, dict) or "cells" not in raw:
        return None, "JSON, but not a Jupyter notebook (no cells)"
    try:
        nb = nbformat.reads(text, as_version=4)
    except RecursionError:
        return None, nested
    except Exception as exc:  # nbformat's own reasons, whichever they are
        why = " ".join(str(exc).split())
        return (
            None,
            f"not a readable Jupyter notebook ({why[:157] + '...' if len(why) > 160 else why})",
        )
    return nb, None


def _stamp(data: bytes | None) -> str | None:
    """A timestamp.txt's text, when it is small text that nbgrader can read."""
    if data is None or len(data) > MAX_TIMESTAMP_BYTES:
        return None
    try:
        from nbgrader.utils import parse_utc

        text = data.decode("utf-8").strip()
        parse_utc(text)
    except Exception:  # not text, or nbgrader cannot read it: its own errors vary
        return None
    return text or None


def timestamp(folder: Path) -> str | None:
    """The submission's timestamp.txt, when it is a plain small file nbgrader can read."""
    return _stamp(read_plain(folder / TIMESTAMP, MAX_TIMESTAMP_BYTES))


@dataclass
class Submission:
    """A student's submission folder as `read` found it."""

    notebooks: dict[str, nbformat.NotebookNode] = field(default_factory=dict)  # name: assembled
    unreadable: dict[str, str] = field(default_factory=dict)  # name: why it is not a notebook
    missing: list[str] = field(default_factory=list)  # released notebooks not handed in
    dropped: Dropped = field(default_factory=Dropped)
    stamp: str | None = None  # its timestamp.txt, where nbgrader can read it
    digest: str = ""  # of every file's path and content
    ran_on: dict[str, str] = field(default_factory=dict)  # `ran_on` of its first notebook saying


def read(folder: Path, release: dict[str, object]) -> Submission:
    """Read every file of the submission folder `folder` once: each of the released notebooks
    {name: notebook} that it holds as a notebook is assembled, and what else it holds noted."""
    found, digest, handed = Submission(), hashlib.sha256(), {}
    names = {f"{name}.ipynb": name for name in release}
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:  # never into a link
        relative = str(path.relative_to(folder))
        if path.parent == folder and relative not in names and relative != TIMESTAMP:
            found.dropped.files.append(printable(relative))
        if path.is_dir() and not path.is_symlink():
            continue
        data = read_plain(path, MAX_NOTEBOOK_BYTES)
        digest.update(os.fsencode(relative) + b"\0" + (b"unreadable" if data is None else data))
        if relative == TIMESTAMP:
            found.stamp = _stamp(data)
        elif relative in names:
            handed[names[relative]] = data
    for name, given in release.items():
        if name not in handed:
            found.missing.append(name)
            continue
        data = handed[name]
        nb, why = (None, NOT_READ) if data is None else parse_notebook(data)
        if nb is None:
            found.unreadable[name] = why
        else:
            found.notebooks[name], dropped = assemble(given, nb)
            found.ran_on = found.ran_on or ran_on(nb)
            found.dropped.merge(dropped)
    found.digest = digest.hexdigest()
    return found


def stage(submitted: Path, release: dict[str, object], target: Path) -> Submission:
    """`read` the submission folder `submitted`, and write into `target` (emptied first) its
    assembled notebooks and its timestamp."""
    found = read(submitted, release)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name, nb in found.notebooks.items():
        nbformat.write(nb, target / f"{name}.ipynb")
    if found.stamp is not None:
        (target / TIMESTAMP).write_text(found.stamp + "\n")
    return found
