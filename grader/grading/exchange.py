"""Submissions of one assignment taken straight from nbgrader's exchange, in place of
`nbgrader collect`: `python -m grader autograde ASSIGNMENT --exchange [ROOT]`.

`nbgrader submit` hands an assignment in as a folder of `<root>/<course_id>/inbound/` named
`<student>+<assignment>+<timestamp>[+<random>]`, holding the student's files, `timestamp.txt` and
`submission_secret.txt` (which `nbgrader release_feedback` reads). Every student may write into
inbound/ (mode 2733), so an entry is whatever its writer made it; `nbgrader collect` believes its
name for whose it is and when it was handed in, and follows symbolic links as it copies.

Here an entry is data, under the rules docs/instructors.md lists ("The exchange, on a
JupyterHub"). No link is followed: every folder and file is opened relative to its parent's
descriptor (os.fwalk, O_NOFOLLOW), so nothing can be swapped for a link between the check and the
copy. The time handed in is the latest st_ctime of the entry and everything in it, which no owner
can set back (utime sets only the access and modification times); the import writes
timestamp.txt from it, and refuses an entry that changed while it was copied.

Each refusal is an intake.Refused row (refused.json, "not imported" in the class report); every
entry, with its time and what became of it, is listed in exchange.json beside the report.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from grader.authoring import build
from grader.grading import intake
from grader.grading.assemble import printable
from grader.grading.intake import AutogradeError, Refused, student_id_problem

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's Exchange.timestamp_format, in UTC
WRITTEN_BY_SUBMIT = "timestamp.txt"  # the student's own is ignored; the import writes this one
LISTING = "exchange.json"

# nbgrader's own reading of its config, as `nbgrader collect` run in the course directory does
READ_CONFIG = """
import json
from nbgrader.apps.baseapp import NbGrader
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange.default.exchange import Exchange
app = NbGrader()
app.load_config_file()
print(json.dumps({
    "course_id": CourseDirectory(config=app.config).course_id,
    "root": Exchange(config=app.config).root,
}))
"""


@dataclass(frozen=True)
class Inbound:
    """Where one course's submissions wait in an exchange."""

    root: Path  # the exchange's root (nbgrader's Exchange.root)
    course_id: str

    @property
    def folder(self) -> Path:
        return self.root / self.course_id / "inbound"


def configured(course_dir: Path, root: Path | None = None) -> Inbound:
    """The course's inbound folder from nbgrader's config as read in `course_dir` (its default
    Exchange.root where none is set); `root` given replaces the config's."""
    done = subprocess.run(
        [sys.executable, "-c", READ_CONFIG],
        cwd=course_dir,
        env=build.nbgrader_env(),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise AutogradeError(
            "nbgrader's config could not be read for the exchange's course id and root:\n"
            f"{done.stderr[-2000:]}\nfix the config file it names"
        )
    config = json.loads(done.stdout.strip().splitlines()[-1])
    if not config["course_id"]:
        raise AutogradeError(
            "nbgrader's config names no course: the exchange keeps each course's submissions in "
            "<root>/<course_id>/inbound/. Set c.CourseDirectory.course_id in the instructor's "
            "~/.jupyter/nbgrader_config.py, as for `nbgrader release_assignment` "
            "(docs/instructors.md, 'The exchange, on a JupyterHub')"
        )
    inbound = Inbound(Path(root or config["root"]), config["course_id"])
    if not inbound.folder.is_dir():
        raise AutogradeError(
            f"{inbound.folder}: no such folder. The exchange has no course "
            f"{inbound.course_id!r} at {inbound.root}: release an assignment there first "
            "(`nbgrader release_assignment`), or name the exchange's root: --exchange ROOT"
        )
    return inbound


@dataclass(frozen=True)
class Listed:
    """One entry of inbound/ and what became of it (exchange.json)."""

    entry: str
    student: str
    handed_in: str | None  # nbgrader's format, from the file system; None where refused
    outcome: str  # "imported", "older" (the student's newer entry was imported), "refused"
    detail: str = ""


class _Refusal(Exception):
    """Why an entry is not imported; `owner` is the account that wrote what was refused."""

    def __init__(self, reason: str, owner: str | None = None):
        super().__init__(reason)
        self.owner = owner


def _check(shown: str, mode: os.stat_result, uid: int, student: str) -> None:
    """Refuse what is not a plain file or folder of `student` (uid `uid`)."""
    if mode.st_uid != uid:
        try:
            owner = pwd.getpwuid(mode.st_uid).pw_name
        except KeyError:
            owner = f"uid {mode.st_uid}"
        raise _Refusal(f"{shown} belongs to {printable(owner)}, not to {student}", owner)
    if not stat.S_ISDIR(mode.st_mode) and not stat.S_ISREG(mode.st_mode):
        raise _Refusal(f"{shown} is not a plain file or folder")


def _lstat(name: str, dir_fd: int, shown: str, uid: int, student: str) -> None:
    """Refuse the entry `name` of the folder `dir_fd` when it is a link, or fails `_check`."""
    mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(mode.st_mode):
        target = printable(os.readlink(name, dir_fd=dir_fd))
        raise _Refusal(f"{shown} is a symbolic link (to {target}), not followed")
    _check(shown, mode, uid, student)


# Each folder and file of an entry (its path in the entry): inode, size, modification and status
# change times (ns), which any write, rename or change of mode changes
Status = dict[str, tuple[int, int, int, int]]


def _read_entry(
    inbound_fd: int, name: str, student: str, into: Path | None
) -> tuple[Status, list[str]]:
    """Check the entry `name` of inbound/ (the folder `inbound_fd`), and with `into`, copy its
    files there (all but its timestamp.txt). Returns its Status, each file's as it was opened,
    and the files left out (over the size limit); raises _Refusal."""
    try:
        uid = pwd.getpwnam(student).pw_uid
    except KeyError:
        raise _Refusal(
            f"no account named {student} on this machine (the exchange names each submission "
            "by its student's login)"
        ) from None
    seen: Status = {}
    left_out: list[str] = []
    budget = intake.Budget()
    try:
        _lstat(name, inbound_fd, "the entry", uid, student)
        for where, folders, files, fd in os.fwalk(name, dir_fd=inbound_fd, follow_symlinks=False):
            relative = Path(where).relative_to(name)
            shown = f"{printable(str(relative))}/" if relative.parts else "the entry"
            mode = os.fstat(fd)  # the folder opened, which fwalk made sure is the one it listed
            _check(shown, mode, uid, student)
            seen[str(relative)] = _status(mode)
            budget.count()
            for folder in folders:
                _lstat(folder, fd, printable(str(relative / folder)), uid, student)
            for file in files:
                shown = printable(str(relative / file))
                _lstat(file, fd, shown, uid, student)
                opened = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
                with open(opened, "rb") as read:
                    mode = os.fstat(opened)  # what was opened, whatever the name is now
                    _check(shown, mode, uid, student)
                    seen[str(relative / file)] = _status(mode)
                    budget.count(mode.st_size)
                    if mode.st_size > intake.MAX_FILE_BYTES:
                        left_out.append(f"{shown}: {intake.TOO_LARGE}")
                    elif into is not None and relative / file != Path(WRITTEN_BY_SUBMIT):
                        (into / relative).mkdir(parents=True, exist_ok=True)
                        if not intake.copy_capped(read, into / relative / file, mode.st_size):
                            raise _Refusal(intake.CHANGED)
    except intake.TooMuch as why:
        raise _Refusal(str(why)) from None
    except OSError as exc:  # gone meanwhile, a link opened (ELOOP), unreadable, too deep
        raise _Refusal(f"could not be read ({exc.strerror or exc})") from None
    except RecursionError:
        raise _Refusal("its folders are nested too deep to be read") from None
    return seen, left_out


def _status(mode: os.stat_result) -> tuple[int, int, int, int]:
    return mode.st_ino, mode.st_size, mode.st_mtime_ns, mode.st_ctime_ns


def _handed_in_ns(seen: Status) -> int:
    """The latest status change of an entry's folders and files."""
    return max(ctime for *_, ctime in seen.values())


def handed_in(ctime_ns: int) -> str:
    """A time in nanoseconds since the epoch as nbgrader writes it in timestamp.txt."""
    return datetime.fromtimestamp(ctime_ns / 1e9, UTC).strftime(TIMESTAMP_FORMAT)


def _claimed(name: str, assignment: str) -> str | None:
    """The student an entry's name claims, for an entry of `assignment`; None for another's."""
    student, _, rest = name.partition("+")
    return student if rest.startswith(f"{assignment}+") else None


def import_exchange(inbound: Inbound, assignment: str, root: Path, out: Path) -> list[str]:
    """Import each student's newest acceptable entry of `assignment` into the course directory
    `root`; the students imported. What was refused goes to refused.json in `out`, every entry
    to exchange.json there."""
    inbound_fd = _open(inbound)
    notes: list[Refused] = []
    listed: list[Listed] = []

    def refuse(name: str, student: str, refusal: _Refusal) -> None:
        """Note a refused entry for the student it names and, where another student of the
        exchange wrote it, for that student too."""
        shown, who = printable(name), printable(student)
        notes.append(Refused(who, f"inbound/{shown}: {refusal}"))
        if refusal.owner and refusal.owner != student and refusal.owner in entries.values():
            notes.append(Refused(refusal.owner, f"inbound/{shown}: {refusal}"))
        listed.append(Listed(shown, who, None, "refused", str(refusal)))

    try:
        entries = {n: s for n in sorted(os.listdir(inbound_fd)) if (s := _claimed(n, assignment))}
        times: dict[str, int] = {}
        for name, student in entries.items():
            try:
                if problem := student_id_problem(student):
                    raise _Refusal(problem)
                times[name] = _handed_in_ns(_read_entry(inbound_fd, name, student, None)[0])
            except _Refusal as refusal:
                refuse(name, student, refusal)
        newest = {entries[name]: name for name in sorted(times, key=times.get)}
        for name, ctime in sorted(times.items()):
            student = entries[name]
            if newest[student] != name:
                detail = f"the entry {printable(newest[student])} is newer"
                listed.append(Listed(printable(name), student, handed_in(ctime), "older", detail))
                continue
            try:
                target = root / "submitted" / student / assignment
                ctime, left_out = _take(inbound_fd, name, student, target)
            except _Refusal as refusal:
                refuse(name, student, refusal)
                continue
            listed.append(Listed(printable(name), student, handed_in(ctime), "imported"))
            notes += [Refused(student, f"inbound/{printable(name)}/{f}") for f in left_out]
    finally:
        os.close(inbound_fd)
    intake.write_refused(out, notes)
    listed.sort(key=lambda e: e.entry)
    (out / LISTING).write_text(json.dumps([asdict(e) for e in listed], indent=1))
    return sorted(e.student for e in listed if e.outcome == "imported")


def _open(inbound: Inbound) -> int:
    """A descriptor of the inbound folder. Below the root, which every student may write into,
    no link is followed: the course's folder and inbound/ must be the ones nbgrader made."""
    try:
        fd = os.open(inbound.root, os.O_RDONLY | os.O_DIRECTORY)
        for part in (inbound.course_id, "inbound"):
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            finally:
                os.close(fd)
            fd = inner
    except OSError as exc:
        raise AutogradeError(
            f"{inbound.folder}: cannot be opened ({exc.strerror}); it must be the folder that "
            "`nbgrader release_assignment` made, not a link, and readable by this user"
        ) from None
    return fd


def _take(inbound_fd: int, name: str, student: str, target: Path) -> tuple[int, list[str]]:
    """Copy the entry into `target`, checked again as it is copied, with timestamp.txt from the
    file system; its time and the files left out. Refused when anything of it changed while it
    was copied."""
    course = target.parents[2]  # target is <course>/submitted/<student>/<assignment>
    staging = Path(tempfile.mkdtemp(prefix=".exchange-", dir=course))
    try:
        copied, left_out = _read_entry(inbound_fd, name, student, staging)
        if _read_entry(inbound_fd, name, student, None)[0] != copied:
            raise _Refusal(intake.CHANGED)
        ctime = _handed_in_ns(copied)
        (staging / WRITTEN_BY_SUBMIT).write_text(handed_in(ctime))
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ctime, left_out
