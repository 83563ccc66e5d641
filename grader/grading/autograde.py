"""Grade every submission of one assignment with nbgrader, then write feedback, grades and the
class report. `python -m grader autograde` and `make autograde` run it; docs/instructors.md says
how it fits with the rest of nbgrader.

1. The course directory (build/ by default) must hold the assignment's source and its entry in
   the gradebook; `make release` makes both, and what is missing is generated here.
2. Submissions come in: a folder in nbgrader's layout (<student>/<assignment>/<notebook>.ipynb) is
   copied into submitted/; an LMS download (a zip, or a folder of its files) goes through
   `nbgrader zip_collect`; an nbgrader exchange's inbound/ is read by grader.grading.exchange,
   in place of `nbgrader collect`. A folder of submitted/ that holds a link or a file past the
   size limit is not graded, however it got there (`untrusted`).
3. Each student's notebooks are assembled (grader.grading.assemble): the release with the
   student's answer cells, nothing else they handed in. `nbgrader autograde <assignment>
   --student=<id>` grades those, one subprocess per student, several side by side on the CPU
   and one per GPU on GPUs (speed cells time kernels; grader.grading.devices),
   or one Slurm task per student (a `Grader`: grader.grading.slurm), each in
   grader.grading.sandbox: a submission that crashes, hangs or eats the memory costs itself
   alone, and every score already in the gradebook stays there. The Jupyter kernel that runs
   the student's code is in grader.grading.jail (bubblewrap), out of reach of the course
   directory, the other students and the network. A submission graded before
   and unchanged since is not graded again unless `force` is set.
4. `nbgrader generate_feedback`, then grades read back through nbgrader's Gradebook API, each
   submission inspected by grader.grading.findings, and grader.grading.classreport writes the
   outputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from grader.authoring import build, nbgrader_main
from grader.grading import (
    assemble,
    classreport,
    devices,
    findings,
    gradebook,
    hidden_tests,
    jail,
    jupyter_data,
    nbgrader_policy,
    sandbox,
    zygote,
)
from grader.grading.findings import printable
from grader.runtime import profile

if TYPE_CHECKING:
    from grader.grading import exchange

NBGRADER_VERSION = "0.9"
KERNEL = "python3"  # nbgrader_config.py's Execute.kernel_name; the jail runs its argv
LOCK_RETRIES = 2  # a run that lost a race for the SQLite file is run again
# What nbgrader's log says when a run lost such a race: the file locked by another student's run,
# or the row of the course (its id from nbgrader's config) added by another run a moment earlier.
LOST_RACES = ("database is locked", "UNIQUE constraint failed: course.id")
RELEASE_FEEDBACK_READS = ("timestamp.txt", "submission_secret.txt")  # besides the pages


class AutogradeError(RuntimeError):
    """The batch cannot be graded as asked; the message says what to fix."""


def require_nbgrader() -> None:
    """Fail with the command that installs nbgrader when this Python lacks it, and with what to
    do when nbconvert's templates for the feedback pages cannot be found."""
    try:
        import nbgrader
    except ImportError:
        raise AutogradeError(
            f"nbgrader is not installed for {sys.executable}. Grading needs it: run `make setup` "
            "(the course's environment, with nbgrader), or `pip install nbgrader==0.9.6` into "
            "this Python (it brings nbconvert, the gradebook's SQLAlchemy and psutil)."
        ) from None
    try:
        jupyter_data.require_templates(build.nbgrader_env())
    except jupyter_data.MissingTemplates as problem:
        raise AutogradeError(str(problem)) from None
    if not nbgrader.__version__.startswith(NBGRADER_VERSION):
        print(
            f"warning: nbgrader {nbgrader.__version__}; the course is set up for "
            f"{NBGRADER_VERSION}.x (pyproject.toml pins 0.9.6)",
            file=sys.stderr,
        )


@dataclass
class Batch:
    """One grading batch: which assignment, where, and with which limits."""

    assignment: str
    mode: str  # the grading device: grader.runtime.device.GPU or INTERPRETER
    root: Path = build.BUILD
    db_url: str | None = None  # any SQLAlchemy URL; default: root/gradebook.db
    out: Path | None = None  # default: root/grading/<assignment>
    jobs: int = 1
    cell_timeout: int = nbgrader_policy.CELL_TIMEOUT
    speed_cell_timeout: int = nbgrader_policy.SPEED_CELL_TIMEOUT
    timeout: int = nbgrader_policy.SUBMISSION_TIMEOUT
    memory_limit: int = field(default_factory=lambda: sandbox.default_memory_limit(1))
    force: bool = False
    jailed: bool = True  # each student's kernel in grader.grading.jail (bubblewrap)
    gpus: list[devices.Gpu] = field(default_factory=list)  # in GPU mode; none: all visible
    # forking nbgraders for the batch's runs while `forking` holds them (grader.grading.zygote)
    zygotes: zygote.Pool | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.root = Path(self.root).resolve()
        self.out = Path(self.out).resolve() if self.out else self.root / "grading" / self.assignment

    @property
    def url(self) -> str:
        return self.db_url or gradebook.sqlite_url(self.root / "gradebook.db")

    def folder(self, step: str, student: str | None = None) -> Path:
        """root/<step>/[<student>/]<assignment>, as nbgrader lays them out."""
        return self.root / step / student / self.assignment if student else self.root / step


# -- nbgrader --------------------------------------------------------------------------------


def environment(batch: Batch) -> dict[str, str]:
    """nbgrader's environment (build.nbgrader_env) plus the grading device and timeouts; the
    kernel inherits it."""
    env = jupyter_data.environment(build.nbgrader_env())
    env["COURSE_MODE"] = batch.mode
    env[nbgrader_policy.CELL_TIMEOUT_VARIABLE] = str(batch.cell_timeout)
    env[nbgrader_policy.SPEED_CELL_TIMEOUT_VARIABLE] = str(batch.speed_cell_timeout)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(build.ROOT), env.get("PYTHONPATH", "")) if p
    )
    if batch.mode != "gpu":  # side-by-side kernels should not each start a thread per core
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // batch.jobs)))
    return env


@contextmanager
def kernel_sandbox(
    batch: Batch, gpu: devices.Gpu | None = None
) -> Iterator[tuple[list[str], dict[str, str]]]:
    """nbgrader's extra options and environment for one student's run, on `gpu` alone where one
    is given: with `batch.jailed`, a kernel in grader.grading.jail of its own (a uid of its own
    while it runs, and only that GPU's device node), its private folders removed afterwards."""
    env = {**environment(batch), **(gpu.env if gpu else {})}
    if not batch.jailed:
        yield [], env
        return
    if batch.mode == "gpu" and gpu is None:
        raise devices.DeviceError(
            "a sandboxed kernel sees only the GPU it is handed, and none was: lease one for each "
            "student (devices.Pool(...).lease(), as grade_here does), or every cell that needs "
            "the GPU fails"
        )
    kernel = jail.kernel_argv(KERNEL)
    # Nsight Compute, for the speed cells that count DRAM bytes (perf.Traffic): its folder bound
    # in, and its ncu named, since the toolkit's bin/ncu looks for it outside /usr
    ncu = profile.installation() if gpu else None
    inside = dict(gpu.env) if gpu else {}
    if ncu is not None:
        inside[profile.NCU_ENV] = str(ncu / "ncu")
    with (
        jail.slot() as n,
        jail.prepared(
            kernel,
            uid=jail.UID_BASE + n,
            scratch_bytes=batch.memory_limit // 4,
            nproc=max(1024, 8 * (os.cpu_count() or 1)),
            gpu=gpu.minor if gpu else None,
            env=inside,
            tools=[str(ncu)] if ncu else [],
        ) as (spec, variables),
    ):
        yield jail.nbgrader_options(spec), {**env, **variables}


def nbgrader_args(batch: Batch, *args: str) -> list[str]:
    return [*args, f"--CourseDirectory.root={batch.root}", f"--CourseDirectory.db_url={batch.url}"]


def nbgrader_command(batch: Batch, *args: str) -> list[str]:
    return nbgrader_main.command(*nbgrader_args(batch, *args))


@contextmanager
def forking(batch: Batch) -> Iterator[None]:
    """`batch.zygotes` for as long as the block runs, where the batch has none yet: the nbgrader
    runs of its students and of its feedback are then forked (grader.grading.zygote)."""
    if batch.zygotes is not None:
        yield
        return
    with zygote.pool(batch.jobs, environment(batch), batch.root) as zygotes:
        batch.zygotes = zygotes
        try:
            yield
        finally:
            batch.zygotes = None


def run_sandboxed(
    batch: Batch, args: list[str], *, log: Path, env: dict[str, str], data_limit: int | None = None
) -> sandbox.Finished:
    """`nbgrader ARGS` within the batch's limits (grader.grading.sandbox), its output in `log`:
    forked from one of `batch.zygotes` where it has them, else started afresh."""
    with batch.zygotes.lease() if batch.zygotes else nullcontext() as forks:
        return sandbox.run(
            args if forks else nbgrader_main.command(*args),
            log=log,
            timeout=batch.timeout,
            memory_limit=batch.memory_limit,
            data_limit=data_limit,
            cwd=batch.root,
            env=env,
            zygote=forks,
        )


def run_nbgrader(batch: Batch, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(
        nbgrader_command(batch, *args),
        cwd=batch.root,
        env=environment(batch),
        capture_output=True,
        text=True,
        timeout=batch.timeout,
    )
    if check and done.returncode != 0:
        raise AutogradeError(
            f"`nbgrader {' '.join(args)}` failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done


def _registered(batch: Batch) -> bool:
    return bool(gradebook.max_scores(batch.url, batch.assignment))


def prepare(batch: Batch) -> None:
    """Make sure the course directory has the assignment's source, release and gradebook entry."""
    batch.root.mkdir(parents=True, exist_ok=True)
    if not batch.folder("source").joinpath(batch.assignment).is_dir():
        build.build_sources(batch.root)
    if not batch.folder("source").joinpath(batch.assignment).is_dir():
        known = ", ".join(a.name for a in build.assignments())
        raise AutogradeError(f"no assignment {batch.assignment!r}; the course has: {known}")
    if not _registered(batch) or not batch.folder("release").joinpath(batch.assignment).is_dir():
        print(f"registering {batch.assignment} in the gradebook (nbgrader generate_assignment)")
        run_nbgrader(batch, "generate_assignment", batch.assignment, "--force")


# -- submissions in --------------------------------------------------------------------------

MAX_FILE_BYTES = findings.MAX_NOTEBOOK_BYTES  # one file handed in
MAX_EXTRACTED_BYTES = 4 << 30  # all files of one LMS download together, once extracted
TOO_LARGE = f"over the {MAX_FILE_BYTES >> 20} MiB limit for one file, not read"
GLOB_CHARACTERS = "*?[]"  # `nbgrader --student` takes a pattern: these would match others


@dataclass(frozen=True)
class Refused:
    """A file or folder of the submissions left out of the batch, and why. `student` is the
    student it belongs to (as the report may print it), else the file's own name."""

    student: str
    reason: str


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


def _refused_path(batch: Batch) -> Path:
    return batch.out / "refused.json"


def refused(batch: Batch) -> list[Refused]:
    """What the last import left out, every folder of submitted/ whose name is not a student id
    the batch can use, and every one that `untrusted` leaves out."""
    path = _refused_path(batch)
    found = [Refused(**r) for r in json.loads(path.read_text())] if path.is_file() else []
    submitted = batch.folder("submitted")
    for d in sorted(submitted.iterdir()) if submitted.is_dir() else []:
        problem = student_id_problem(d.name)
        if problem and (d / batch.assignment).is_dir():
            found.append(Refused(printable(d.name), f"submitted/{printable(d.name)}: {problem}"))
    found += [Refused(s, why) for s, why in untrusted(batch).items()]
    return list(dict.fromkeys(found))


def _folder_problem(folder: Path, shown: str) -> str | None:
    """Why grading must not read the folder `folder` (`shown` is how a report names it): it is,
    or holds, a symbolic link; it holds something other than plain files and folders, or a file
    over MAX_FILE_BYTES. None when it holds plain files within the limit."""
    if folder.is_symlink() or folder.parent.is_symlink():
        return f"{shown}: a symbolic link, not followed"
    for where, folders, files in os.walk(folder):  # never into a link
        for name in sorted([*folders, *files]):
            path = Path(where, name)
            mode = path.lstat()
            relative = f"{shown}/{printable(str(path.relative_to(folder)))}"
            if stat.S_ISLNK(mode.st_mode):
                return f"{relative}: a symbolic link, not followed"
            if not stat.S_ISDIR(mode.st_mode) and not stat.S_ISREG(mode.st_mode):
                return f"{relative}: not a plain file or folder"
            if stat.S_ISREG(mode.st_mode) and mode.st_size > MAX_FILE_BYTES:
                return f"{relative}: {TOO_LARGE}"
    return None


def untrusted(batch: Batch) -> dict[str, str]:
    """{student: why} for each student folder of submitted/ that grading does not trust, however
    it got there (`nbgrader collect`, a copy by hand): one that is or holds a symbolic link, or
    holds anything but plain files within the size limit. Its student is not graded, and nothing
    of it is read."""
    submitted = batch.folder("submitted")
    found = {}
    for d in sorted(submitted.iterdir()) if submitted.is_dir() else []:
        if student_id_problem(d.name) is None and (d / batch.assignment).is_dir():
            where = f"submitted/{d.name}/{batch.assignment}"
            problem = _folder_problem(d / batch.assignment, where)
            if problem:
                found[d.name] = f"{problem}; not graded (import it again)"
    return found


def students(batch: Batch) -> list[str]:
    """Every student with a submission folder for the assignment in submitted/, a name the
    batch can use as a student id, and a folder grading may read (`refused` lists the others)."""
    submitted = batch.folder("submitted")
    if not submitted.is_dir():
        return []
    left_out = untrusted(batch)
    return sorted(
        d.name
        for d in submitted.iterdir()
        if (d / batch.assignment).is_dir()
        and student_id_problem(d.name) is None
        and d.name not in left_out
    )


def _copy_capped(read, target: Path, limit: int) -> int | None:
    """Copy the binary stream `read` to `target`, at most `limit` bytes: the bytes written, or
    None (and nothing written) when there were more."""
    written = 0
    with open(target, "wb") as out:
        while chunk := read.read(1 << 20):
            written += len(chunk)
            if written > limit:
                break
            out.write(chunk)
    if written > limit:
        target.unlink()
        return None
    return written


def _copy_student(batch: Batch, student: Path, notes: list[Refused]) -> None:
    """submitted/<student>/<assignment> from a folder in nbgrader's layout: plain files only,
    none over the size limit; symbolic links are never followed."""
    target = batch.folder("submitted", student.name)
    if target.exists():
        shutil.rmtree(target)
    source = student / batch.assignment
    for path in sorted(source.rglob("*")):
        where = f"{student.name}/{batch.assignment}/{path.relative_to(source)}"
        if path.is_symlink():
            notes.append(Refused(student.name, f"{printable(where)}: a symbolic link, not read"))
        elif path.is_file() and not any(p.is_symlink() for p in path.relative_to(source).parents):
            (target / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            with open(path, "rb") as f:
                copied = _copy_capped(f, target / path.relative_to(source), MAX_FILE_BYTES)
            if copied is None:
                notes.append(Refused(student.name, f"{printable(where)}: {TOO_LARGE}"))
    target.mkdir(parents=True, exist_ok=True)


def _from_layout(batch: Batch, layout: Path, notes: list[Refused]) -> list[str]:
    """Copy every student folder of `layout` (nbgrader's) that holds the assignment."""
    found = []
    for d in sorted(layout.iterdir()):
        if not (d / batch.assignment).is_dir():
            continue
        problem = student_id_problem(d.name)
        if problem:
            notes.append(Refused(printable(d.name), f"{printable(d.name)}/: {problem}"))
        elif d.is_symlink() or (d / batch.assignment).is_symlink():
            notes.append(Refused(d.name, f"{d.name}/: a symbolic link, not followed"))
        else:
            _copy_student(batch, d, notes)
            found.append(d.name)
    return found


def _lms_files(source: Path, into: Path, notes: list[Refused]) -> list[Path]:
    """The files of an LMS download (a zip, or a folder of files and zips) extracted into
    `into` as plain files: no entry outside it, no link, none over the size limits. An archive
    inside one of the download's zips is a student's file, left to `_collect`."""
    budget = [MAX_EXTRACTED_BYTES]
    written: list[Path] = []

    def put(name: str, read) -> None:
        parts = Path(name).parts
        if not parts or Path(name).is_absolute() or ".." in parts:
            notes.append(
                Refused(printable(name), f"{printable(name)}: a path outside the download")
            )
            return
        target = into.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        size = _copy_capped(read, target, min(MAX_FILE_BYTES, budget[0]))
        if size is None:
            why = TOO_LARGE if budget[0] > MAX_FILE_BYTES else "over the download's size limit"
            notes.append(Refused(printable(Path(name).name), f"{printable(name)}: {why}"))
        else:
            budget[0] -= size
            written.append(target)

    def unzip(path: Path, prefix: str) -> None:
        try:
            with zipfile.ZipFile(path) as z:
                for info in z.infolist():
                    if info.is_dir():
                        continue
                    if stat.S_ISLNK(info.external_attr >> 16):
                        notes.append(Refused(printable(info.filename), "a symbolic link, not read"))
                        continue
                    with z.open(info) as read:
                        put(prefix + info.filename, read)
        except (zipfile.BadZipFile, OSError, RuntimeError) as exc:  # damaged, encrypted
            notes.append(Refused(printable(path.name), f"an unreadable zip archive ({exc})"))

    if source.is_file():
        unzip(source, "")
        return written
    for path in sorted(source.rglob("*")):
        name = str(path.relative_to(source))
        if path.is_symlink():
            notes.append(Refused(printable(path.name), f"{printable(name)}: a symbolic link"))
        elif path.is_file() and path.suffix == ".zip":
            unzip(path, name + "/")
        elif path.is_file() and not any(p.is_symlink() for p in path.relative_to(source).parents):
            with open(path, "rb") as f:
                put(name, f)
    return written


def _collect(files: list[Path], pattern: str, notes: list[Refused]) -> list[Path]:
    """The files `nbgrader zip_collect` may collect: notebooks whose full path matches the LMS
    file-name pattern, with a student id the batch can use, one per student and notebook (of
    two, the last in name order: the later submission, as LMSs number them). Every other file
    is noted with the reason."""
    chosen: dict[tuple[str, str], Path] = {}
    for path in sorted(files):
        match = re.match(pattern, str(path))
        info = match.groupdict() if match else {}
        student, file_id = info.get("student_id"), info.get("file_id")
        shown = printable(path.name)
        if not student or not file_id:
            notes.append(
                Refused(shown, "its name does not match the LMS's file-name pattern (--regexp)")
            )
        elif student_id_problem(student):
            notes.append(Refused(printable(student), f"{shown}: {student_id_problem(student)}"))
        elif path.suffix != ".ipynb":
            kind = "an archive inside the download" if path.suffix == ".zip" else "not a notebook"
            notes.append(Refused(student, f"{shown}: {kind}; unpack or rename it and grade again"))
        else:
            key = (student, Path(file_id).stem)
            if key in chosen:
                notes.append(
                    Refused(
                        student,
                        f"{printable(chosen[key].name)}: a second {key[1]}.ipynb of the student; "
                        f"{shown} was graded",
                    )
                )
            chosen[key] = path
    return list(chosen.values())


def import_submissions(batch: Batch, source: Path, regexp: str | None = None) -> list[str]:
    """Bring submissions into submitted/: copy a folder in nbgrader's layout (or the course
    directory's own submitted/), or run `nbgrader zip_collect` on an LMS download (a zip file or
    a folder of the files in one). Returns the students found; what was left out, and why, goes
    to `refused`, which the report lists."""
    source = Path(source).resolve()
    if not source.exists():
        raise AutogradeError(f"{source}: no such file or folder")
    layout = source / "submitted" if (source / "submitted").is_dir() else source
    if layout == batch.folder("submitted"):
        return students(batch)
    notes: list[Refused] = []
    found = _from_layout(batch, layout, notes) if source.is_dir() else []
    if not found and not notes:
        found = _from_lms(batch, source, regexp, notes)
    batch.out.mkdir(parents=True, exist_ok=True)
    _refused_path(batch).write_text(json.dumps([asdict(n) for n in notes], indent=1))
    return found


def _from_lms(batch: Batch, source: Path, regexp: str | None, notes: list[Refused]) -> list[str]:
    """An LMS download through `nbgrader zip_collect`, given only the files it may collect."""
    downloaded = batch.root / "downloaded" / batch.assignment
    for step in ("archive", "extracted", "unpacked"):
        if (downloaded / step).exists():
            shutil.rmtree(downloaded / step)
    unpacked, archive = downloaded / "unpacked", downloaded / "archive"
    pattern = regexp or nbgrader_policy.LMS_FILE_PATTERN
    # zip_collect matches the pattern on the path it extracted each file to
    files = _collect(_lms_files(source, unpacked, notes), pattern, notes)
    for f in files:
        (archive / f.relative_to(unpacked)).parent.mkdir(parents=True, exist_ok=True)
        os.rename(f, archive / f.relative_to(unpacked))
    shutil.rmtree(unpacked)
    if not files:
        raise AutogradeError(
            f"{source}: no submission of {batch.assignment} found. The LMS's file-name pattern "
            "(FileNameCollectorPlugin.named_regexp in grader/grading/nbgrader_config.py, or "
            "--regexp) must match its file names; left out:\n"
            + "\n".join(f"  {n.student}: {n.reason}" for n in notes[:20])
        )
    options = [f"--FileNameCollectorPlugin.named_regexp={regexp}"] if regexp else []
    run_nbgrader(batch, "zip_collect", batch.assignment, "--force", *options)
    return sorted(
        {re.match(pattern, str(archive / f.relative_to(unpacked)))["student_id"] for f in files}
    )


# -- grading -----------------------------------------------------------------------------------


def fingerprint(folder: Path, mode: str) -> str:
    """A hash of every plain file of a submission (a link by its target's name, never read
    through) and the grading device: unchanged means graded."""
    h = hashlib.sha256(mode.encode())
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            content = b"link:" + os.fsencode(os.readlink(path))
        elif path.is_file():
            content = assemble.read_plain(path, MAX_FILE_BYTES) or b"unreadable"
        else:
            continue
        h.update(str(path.relative_to(folder)).encode() + b"\0" + content)
    return h.hexdigest()


def _gib(n: int) -> str:
    return f"{n / sandbox.GIB:.1f} GiB"


def _save(batch: Batch, student: str, run: findings.Run) -> findings.Run:
    record = {
        **asdict(run),
        "fingerprint": fingerprint(batch.folder("submitted", student), batch.mode),
    }
    (batch.out / "runs").mkdir(parents=True, exist_ok=True)
    (batch.out / "runs" / f"{student}.json").write_text(json.dumps(record, indent=1))
    return run


def grade_one(
    batch: Batch, student: str, given: dict[str, object], gpu: devices.Gpu | None = None
) -> findings.Run:
    """`nbgrader autograde` for one student in the sandbox, on `gpu` where one is given; the
    outcome, also saved as JSON. What runs is assembled on this side (grader.grading.assemble):
    each released notebook with the student's answer cells, and nothing else of theirs. A
    submission without one readable notebook is recorded with zeros without running it."""
    folder = batch.folder("submitted", student)
    staged = batch.folder(assemble.ASSEMBLED, student)
    written = assemble.stage(folder, given, staged)
    if not written:
        unread = list(given)
        stamp = assemble.timestamp(folder)
        gradebook.record_ungraded(batch.url, batch.assignment, student, unread, stamp)
        return _save(batch, student, findings.Run("not-graded", detail="no readable notebook"))
    log = batch.out / "logs" / f"{student}.log"
    data_limit = None
    if batch.mode != "gpu":  # see grader.grading.sandbox: leave the resident slack to the watchdog
        data_limit = batch.memory_limit - min(sandbox.GIB, batch.memory_limit // 4)
    args = nbgrader_args(
        batch,
        "autograde",
        batch.assignment,
        f"--student={student}",
        f"--CourseDirectory.submitted_directory={assemble.ASSEMBLED}",
    )
    for _ in range(1 + LOCK_RETRIES):
        with kernel_sandbox(batch, gpu) as (options, env):
            finished = run_sandboxed(
                batch, [*args, *options, "--force"], log=log, env=env, data_limit=data_limit
            )
        text = log.read_text(encoding="utf-8", errors="replace")
        if finished.ok or not any(race in text for race in LOST_RACES):
            break
    if finished.killed == "timeout":
        run = findings.Run("timeout", finished.seconds, limit=f"{batch.timeout} s")
    elif finished.killed == "memory":
        run = findings.Run("memory", finished.seconds, limit=_gib(batch.memory_limit))
    elif finished.returncode != 0 and "CellTimeoutError" in text:  # nbclient gave up on it
        run = findings.Run(
            "timeout",
            finished.seconds,
            "a cell ran past its timeout and ignored the interrupt; nbgrader gave up",
            f"{batch.cell_timeout} s per cell",
        )
    elif finished.returncode != 0:
        run = findings.Run("failed", finished.seconds, findings.crash_detail(text))
    else:
        run = findings.Run("ok", finished.seconds)
    return _save(batch, student, run)


def previous_run(batch: Batch, student: str, graded: set[str]) -> findings.Run | None:
    """The recorded outcome of an earlier grading of this same submission, if any."""
    path = batch.out / "runs" / f"{student}.json"
    if batch.force or student not in graded or not path.is_file():
        return None
    record = json.loads(path.read_text())
    if record["status"] == INTERRUPTED:
        return None
    if record.pop("fingerprint", None) != fingerprint(
        batch.folder("submitted", student), batch.mode
    ):
        return None
    return findings.Run(**record)


INTERRUPTED = "interrupted"  # a Run's status while grading is under way, and after Ctrl-C


def _interrupted(batch: Batch, student: str) -> None:
    """Record `student` as not graded: the next run grades it (see previous_run)."""
    run = findings.Run(INTERRUPTED, detail="grading was interrupted; the next run grades it")
    (batch.out / "runs").mkdir(parents=True, exist_ok=True)
    (batch.out / "runs" / f"{student}.json").write_text(json.dumps(asdict(run), indent=1))


def _stop_grading() -> None:
    """Kill every process this one started (the students' nbgrader runs and their kernels)."""
    import psutil

    sandbox.kill(psutil.Process().children(recursive=True))


Grader = Callable[[Batch, list[str], dict[str, object]], dict[str, findings.Run]]
"""Grades the students it is given (all, with the released notebooks): `grade_here`, or
grader.grading.slurm's array. It must leave every student it was given in the gradebook as
grade_one does, and return each one's outcome."""


def grade_all(
    batch: Batch, names: list[str], grade: Grader | None = None
) -> dict[str, findings.Run]:
    """Grade those of `names` not graded before, with `grade` (default: `grade_here`), and
    return every student's outcome."""
    graded = set(gradebook.grades(batch.url, batch.assignment))
    given = released(batch)
    runs = {s: r for s in names if (r := previous_run(batch, s, graded)) is not None}
    todo = [s for s in names if s not in runs]
    if runs:
        print(f"{len(runs)} submissions unchanged since they were graded (--force regrades)")
    runs.update((grade or grade_here)(batch, todo, given))
    return runs


def _as_completed(futures, poll: float = 0.5):
    """Each of `futures` as it completes, the main thread waking every `poll` seconds: a Ctrl-C
    that the kernel delivered to another of the process's threads is then acted on at once, not
    when the next student finishes."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=poll, return_when=FIRST_COMPLETED)
        yield from done


def grade_here(batch: Batch, todo: list[str], given: dict[str, object]) -> dict[str, findings.Run]:
    """Grade `todo` on this host, side by side (batch.jobs at a time) with a progress bar; in GPU
    mode each student holds a GPU of `batch.gpus` alone while it is graded. Each student is
    recorded as interrupted while it is graded; on KeyboardInterrupt (Ctrl-C) the grading
    processes are killed, the students in flight stay recorded so, and the interrupt goes on."""
    from tqdm.auto import tqdm

    gpus = batch.gpus
    if batch.mode == "gpu" and not gpus:
        gpus = devices.visible(devices.detect(), os.environ)
    held = devices.Pool(gpus)
    runs: dict[str, findings.Run] = {}
    with (
        forking(batch),
        ThreadPoolExecutor(max(1, batch.jobs)) as pool,
        tqdm(total=len(todo), desc=f"grading {batch.assignment}", unit="student") as bar,
    ):

        def one(student: str) -> findings.Run:
            _interrupted(batch, student)
            with held.lease() as gpu:
                return grade_one(batch, student, given, gpu)

        futures = {pool.submit(one, s): s for s in todo}
        try:
            for future in _as_completed(futures):
                student = futures[future]
                try:
                    run = future.result()
                except Exception as exc:  # the grader's own trouble (a disk, the database): go on
                    run = _save(batch, student, findings.Run("failed", detail=f"not graded: {exc}"))
                runs[student] = run
                if run.status != "ok":
                    bar.write(f"{student}: {run.status}: {printable(run.detail or run.limit)}")
                bar.update()
        except KeyboardInterrupt:
            for future in futures:
                future.cancel()
            _stop_grading()
            pool.shutdown(wait=True)
            in_flight = [s for f, s in futures.items() if s not in runs and not f.cancelled()]
            for student in in_flight:  # whatever their runs said as they were killed
                _interrupted(batch, student)
            bar.write(
                f"interrupted: {len(in_flight)} students in flight recorded as not graded; "
                "run again to grade them and the rest"
            )
            raise
    return runs


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def feedback(batch: Batch) -> dict[str, str]:
    """`nbgrader generate_feedback` for every autograded submission; each student's pages copied
    to out/feedback/. nbgrader also copies into feedback/ every other file of the autograded
    folder, where a submission may have written anything (the hidden tests it saw, a page of its
    own): only the pages made from the notebooks are kept, and what release_feedback reads.
    Returns {student: why} for each student with an autograded notebook but no page for it;
    nbgrader's output goes to out/feedback.log (logs/ holds one file per student)."""
    names = gradebook.notebook_names(batch.url, batch.assignment)
    pages = {f"{n}.html" for n in names}
    for student in students(batch):  # a page written there must not stand in for a failed one
        for page in pages:
            _remove(batch.folder("autograded", student) / page)
    log = batch.out / "feedback.log"
    args = nbgrader_args(batch, "generate_feedback", batch.assignment, "--force")
    done = run_sandboxed(batch, args, log=log, env=environment(batch))
    said = log.read_text(encoding="utf-8", errors="replace")
    target = batch.out / "feedback"
    if target.exists():
        shutil.rmtree(target)
    missing = {}
    for student in students(batch):
        made = batch.folder("feedback", student)
        for path in made.iterdir() if made.is_dir() else []:
            if path.name not in pages and path.name not in RELEASE_FEEDBACK_READS:
                _remove(path)
        for page in sorted(p for p in pages if (made / p).is_file()):
            (target / student).mkdir(parents=True, exist_ok=True)
            shutil.copy(made / page, target / student / page)
        lacking = [
            n
            for n in names
            if (batch.folder("autograded", student) / f"{n}.ipynb").is_file()
            and not (made / f"{n}.html").is_file()
        ]
        if lacking:
            why = findings.crash_detail(said)
            missing[student] = (
                f"nbgrader generate_feedback wrote no page for {', '.join(lacking)} ({why}); "
                f"see {log}, fix the cause and run the same command again"
            )
    if done.returncode != 0:
        print(
            f"warning: nbgrader generate_feedback failed; its output is in {log}", file=sys.stderr
        )
    return missing


# -- results -----------------------------------------------------------------------------------


def _notebooks(folder: Path, names: list[str]) -> dict[str, object]:
    """{name: notebook} of those of `names` in `folder` that read as notebooks."""
    found = {}
    for name in names:
        path = folder / f"{name}.ipynb"
        nb = findings.read_notebook(path)[0] if path.is_file() else None
        if nb is not None:
            found[name] = nb
    return found


def released(batch: Batch) -> dict[str, object]:
    """{notebook name: released notebook} of the assignment, as students received it."""
    names = gradebook.notebook_names(batch.url, batch.assignment)
    return _notebooks(batch.folder("release") / batch.assignment, names)


def results(
    batch: Batch,
    runs: dict[str, findings.Run],
    device: str,
    grades_speed: bool,
    no_feedback: dict[str, str] | None = None,
):
    """The class's results: scores from the gradebook, findings from the files; `no_feedback`
    ({student: why}, from `feedback`) adds a finding for each student left without a page."""
    given = released(batch)
    points = gradebook.max_scores(batch.url, batch.assignment)
    order = [
        c.metadata.nbgrader["grade_id"]
        for nb in given.values()
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") in points
    ]
    points = {g: points[g] for g in [*order, *(g for g in points if g not in order)]}
    recorded = gradebook.grades(batch.url, batch.assignment)
    left_out = refused(batch)
    here = set(students(batch)) | (set(recorded) - set(untrusted(batch)))
    hidden = {
        n: hidden_tests.Hidden.from_gradebook(batch.url, batch.assignment, n, nb)
        for n, nb in given.items()
    }
    rows = []
    for student in sorted(here | {r.student for r in left_out}):
        grades = recorded.get(student) or gradebook.StudentGrades(student)
        row = classreport.StudentRow(
            student,
            {g: grades.scores.get(g) for g in points},
            seconds_late=grades.seconds_late,
            penalty=grades.penalty,
        )
        row.findings = [
            findings.Finding("not-imported", r.reason) for r in left_out if r.student == student
        ]
        if student in here:
            try:
                row.findings += _inspect(
                    batch, student, given, hidden, row, runs.get(student), points, grades_speed
                )
            except Exception as exc:  # one submission's trouble, whatever it is, is its own
                row.findings.append(findings.Finding("grader-error", _error(exc)))
        if student in (no_feedback or {}):
            row.findings.append(findings.Finding("no-feedback", no_feedback[student]))
        rows.append(row)
    return classreport.ClassResults(
        batch.assignment, device, grades_speed, points, rows, sandboxed=batch.jailed
    )


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300] + "; the score is what the gradebook holds"


def _inspect(
    batch: Batch, student: str, given, hidden, row, run, points, grades_speed: bool
) -> list[findings.Finding]:
    """What one student's files say, for `results`; fills in `row.speed`. `hidden`: {notebook:
    its hidden-test lines}."""
    submitted = findings.inspect_submitted(batch.folder("submitted", student), given)
    autograded = _notebooks(batch.folder("autograded", student), list(given))
    graded = findings.Graded()
    for name, nb in autograded.items():
        one = findings.inspect_graded(nb, hidden[name], grades_speed=grades_speed)
        graded.errors += one.errors
        graded.speed += one.speed
        graded.cut += one.cut
        graded.shown += one.shown
        graded.doubts += one.doubts
    row.speed = graded.speed
    row.dropped = submitted.dropped.describe()
    return findings.classify(
        run=run,
        submitted=submitted,
        graded=graded if autograded else None,
        score=row.total,
        max_score=sum(points.values()),
        seconds_late=row.seconds_late,
        penalty=row.penalty,
    )


def autograde(
    batch: Batch,
    *,
    submissions: Path | None = None,
    regexp: str | None = None,
    duedate: str | None = None,
    device: str,
    grades_speed: bool,
    grade: Grader | None = None,
    inbound: exchange.Inbound | None = None,
) -> tuple[classreport.ClassResults, dict[str, Path]]:
    """The whole batch: prepare, import (from `submissions`, or from an nbgrader exchange's
    `inbound`), grade (with `grade`, default `grade_here`), feedback, report. Returns the class's
    results and the files written."""
    require_nbgrader()
    prepare(batch)
    if duedate:
        gradebook.set_duedate(batch.url, batch.assignment, duedate)
    if submissions is not None:
        found = import_submissions(batch, submissions, regexp)
        print(f"{len(found)} submissions of {batch.assignment} imported from {submissions}")
    elif inbound is not None:
        from grader.grading import exchange  # it builds on this module's import

        found = exchange.import_exchange(batch, inbound)
        print(
            f"{len(found)} submissions of {batch.assignment} imported from {inbound.folder}; "
            f"every entry is listed in {batch.out / exchange.LISTING}"
        )
    names = students(batch)
    if not names:
        raise AutogradeError(
            f"no submissions of {batch.assignment} in {batch.folder('submitted')}: pass "
            "--submissions (a folder <student>/<assignment>/<notebook>.ipynb, or an LMS zip) "
            "or --exchange"
        )
    with forking(batch):
        return _grade_and_report(batch, names, device, grades_speed, grade)


def _grade_and_report(
    batch: Batch, names: list[str], device: str, grades_speed: bool, grade: Grader | None
) -> tuple[classreport.ClassResults, dict[str, Path]]:
    runs = grade_all(batch, names, grade)
    given = released(batch)
    recorded = gradebook.grades(batch.url, batch.assignment)
    for student in names:  # every student in the gradebook; a notebook never read scores 0
        try:
            folder = batch.folder("submitted", student)
            _, missing, unreadable = findings.read_submitted(folder, given)
        except Exception:  # the report says why (grader-error); its grading went on
            missing, unreadable = [], {}
        unread = [*missing, *unreadable]
        if unread or student not in recorded:
            gradebook.record_ungraded(batch.url, batch.assignment, student, unread)
    no_feedback = feedback(batch)
    graded = results(batch, runs, device, grades_speed, no_feedback)
    return graded, classreport.write(graded, batch.out)
