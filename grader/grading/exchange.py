"""Submissions of one assignment taken straight from nbgrader's exchange, in place of
`nbgrader collect`: `python -m grader autograde ASSIGNMENT --exchange [ROOT]`.

`nbgrader submit` hands an assignment in as a folder of `<root>/<course_id>/inbound/` named
`<student>+<assignment>+<timestamp>[+<random>]`, holding the student's files, `timestamp.txt` and
`submission_secret.txt` (which `nbgrader release_feedback` reads). Every student may write into
inbound/ (mode 2733), so an entry is whatever its writer made it, and `nbgrader collect` believes
it: the name says whose it is (a different owner only earns a console warning) and when it was
handed in (the newest name replaces an earlier collected one), and its copy follows symbolic
links, into the instructor's course folder or anywhere the instructor may read.

Here an entry is data, checked before anything of it is used (`import_exchange`):

- No link is followed. An entry that is a link, or holds one, is refused. Every folder and file
  is opened relative to its parent's descriptor without following links (os.fwalk, O_NOFOLLOW),
  so nothing can be swapped for a link between the check and the copy.
- The entry and everything in it must belong to the account of the student it names (`pwd`), or
  it is refused, naming the owner: no student can hand in for another.
- Only plain files and folders; a file over autograde.MAX_FILE_BYTES is left out, as on the other
  routes.
- The time it was handed in is the latest status change (st_ctime) of the entry and of everything
  in it. The kernel sets it on every write, rename or change of mode, and no owner can set it
  back (utime sets the access and modification times only): a student can make an entry look
  later, never earlier. Neither the name nor the student's timestamp.txt is read; the import
  writes timestamp.txt from that time, in nbgrader's format, so late penalties follow the file
  system.
- Of a student's entries that pass, the newest by that time is imported into
  submitted/<student>/<assignment>/, replacing what was there.

Every refusal is an autograde.Refused row (refused.json), which the class report lists as "not
imported"; every entry looked at, with its time and what became of it, is listed in
exchange.json beside the report.
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
from grader.grading import autograde
from grader.grading.autograde import (
    MAX_FILE_BYTES,
    TOO_LARGE,
    AutogradeError,
    Batch,
    Refused,
    _copy_capped,
    printable,
    student_id_problem,
)

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
    """The course's inbound folder as nbgrader finds it from `course_dir`: CourseDirectory.course_id
    and Exchange.root of nbgrader's config (its default root where none is set); `root` given
    replaces the config's."""
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


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _check(shown: str, mode: os.stat_result, uid: int, student: str) -> None:
    """Refuse what is not a plain file or folder of `student` (uid `uid`)."""
    if mode.st_uid != uid:
        owner = _owner(mode.st_uid)
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


def _read_entry(inbound_fd: int, name: str, student: str, into: Path | None) -> tuple[int, list]:
    """Check the entry `name` of inbound/ (the folder `inbound_fd`) as the module's docstring
    says, and with `into`, copy its files there (all but its timestamp.txt). Returns the latest
    st_ctime of the entry and its files, in nanoseconds, and the files left out (over the size
    limit); raises _Refusal."""
    try:
        uid = pwd.getpwnam(student).pw_uid
    except KeyError:
        raise _Refusal(
            f"no account named {student} on this machine (the exchange names each submission "
            "by its student's login)"
        ) from None
    latest, left_out = 0, []
    try:
        _lstat(name, inbound_fd, "the entry", uid, student)
        for where, folders, files, fd in os.fwalk(name, dir_fd=inbound_fd, follow_symlinks=False):
            relative = Path(where).relative_to(name)
            mode = os.fstat(fd)  # the folder opened, which fwalk made sure is the one it listed
            _check(
                f"{printable(str(relative))}/" if relative.parts else "the entry",
                mode,
                uid,
                student,
            )
            latest = max(latest, mode.st_ctime_ns)
            for folder in folders:
                _lstat(folder, fd, printable(str(relative / folder)), uid, student)
            for file in files:
                shown = printable(str(relative / file))
                _lstat(file, fd, shown, uid, student)
                opened = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
                with open(opened, "rb") as read:
                    mode = os.fstat(opened)  # what was opened, whatever the name is now
                    _check(shown, mode, uid, student)
                    latest = max(latest, mode.st_ctime_ns)
                    if mode.st_size > MAX_FILE_BYTES:
                        left_out.append(f"{shown}: {TOO_LARGE}")
                    elif into is not None and relative / file != Path(WRITTEN_BY_SUBMIT):
                        (into / relative).mkdir(parents=True, exist_ok=True)
                        if _copy_capped(read, into / relative / file, MAX_FILE_BYTES) is None:
                            left_out.append(f"{shown}: {TOO_LARGE}")
    except OSError as exc:  # gone meanwhile, a link opened (ELOOP), unreadable, too deep
        raise _Refusal(f"could not be read ({exc.strerror or exc})") from None
    except RecursionError:
        raise _Refusal("its folders are nested too deep to be read") from None
    return latest, left_out


def handed_in(ctime_ns: int) -> str:
    """A time in nanoseconds since the epoch as nbgrader writes it in timestamp.txt."""
    return datetime.fromtimestamp(ctime_ns / 1e9, UTC).strftime(TIMESTAMP_FORMAT)


def _claimed(name: str, assignment: str) -> str | None:
    """The student an entry's name claims, for an entry of `assignment`; None for another's."""
    student, _, rest = name.partition("+")
    return student if rest.startswith(f"{assignment}+") else None


def import_exchange(batch: Batch, inbound: Inbound) -> list[str]:
    """Import the newest acceptable entry of each student from the exchange into submitted/, as
    the module's docstring says. Returns the students imported; what was refused goes to
    refused.json, every entry to exchange.json."""
    inbound_fd = _open(inbound)
    notes: list[Refused] = []
    listed: list[Listed] = []
    try:
        entries = {
            n: s for n in sorted(os.listdir(inbound_fd)) if (s := _claimed(n, batch.assignment))
        }
        times: dict[str, int] = {}
        for name, student in entries.items():
            problem = student_id_problem(student)
            try:
                if problem:
                    raise _Refusal(problem)
                times[name] = _read_entry(inbound_fd, name, student, None)[0]
            except _Refusal as refusal:
                _refuse(notes, listed, name, student, refusal, set(entries.values()))
        newest = {}
        for name in sorted(times, key=times.get):
            newest[entries[name]] = name
        for name, ctime in sorted(times.items()):
            student = entries[name]
            if newest[student] != name:
                detail = f"the entry {printable(newest[student])} is newer"
                listed.append(Listed(printable(name), student, handed_in(ctime), "older", detail))
                continue
            try:
                ctime = _take(batch, inbound_fd, name, student, notes)
                listed.append(Listed(printable(name), student, handed_in(ctime), "imported"))
            except _Refusal as refusal:
                _refuse(notes, listed, name, student, refusal, set(entries.values()))
    finally:
        os.close(inbound_fd)
    batch.out.mkdir(parents=True, exist_ok=True)
    autograde._refused_path(batch).write_text(json.dumps([asdict(n) for n in notes], indent=1))
    listed.sort(key=lambda e: e.entry)
    (batch.out / LISTING).write_text(json.dumps([asdict(e) for e in listed], indent=1))
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


def _refuse(notes, listed, name: str, student: str, refusal: _Refusal, claimants: set[str]):
    """Note a refused entry for the student it names and, where another student of the exchange
    wrote it, for that student too."""
    shown, who = printable(name), printable(student)
    reason = f"inbound/{shown}: {refusal}"
    notes.append(Refused(who, reason))
    if refusal.owner and refusal.owner != student and refusal.owner in claimants:
        notes.append(Refused(refusal.owner, reason))
    listed.append(Listed(shown, who, None, "refused", str(refusal)))


def _take(batch: Batch, inbound_fd: int, name: str, student: str, notes: list[Refused]) -> int:
    """Copy the entry into submitted/<student>/<assignment>/ (checked again as it is copied),
    with timestamp.txt from the file system; its time."""
    staging = Path(tempfile.mkdtemp(prefix=".exchange-", dir=batch.root))
    try:
        ctime, left_out = _read_entry(inbound_fd, name, student, staging)
        (staging / WRITTEN_BY_SUBMIT).write_text(handed_in(ctime))
        target = batch.folder("submitted", student)
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    notes += [Refused(student, f"inbound/{printable(name)}/{f}") for f in left_out]
    return ctime
