"""Grade every submission of one assignment with nbgrader, then write feedback, grades and the
class report. `python -m grader autograde` and `make autograde` run it; docs/instructors.md says
how it fits with the rest of nbgrader. Each submission goes one way:

1. In: the course directory (build/ by default) holds the assignment's source, release and entry
   in the gradebook (`make release` makes them; `prepare`, what is missing). Submissions come in
   within the limits of grader.grading.intake: a folder in nbgrader's layout is copied into
   submitted/, an LMS download goes through `nbgrader zip_collect`, an nbgrader exchange's
   inbound/ is read by grader.grading.exchange. A folder of submitted/ that holds a link or is
   past those limits is not graded, however it got there (`untrusted`).
2. Assembled: the submission is read once (grader.grading.assemble); what runs is the release
   with the student's answer cells, nothing else they handed in.
3. Run: `nbgrader autograde <assignment> --student=<id>`, one subprocess per student, several
   side by side on the CPU and one per GPU (grader.grading.devices), or one Slurm task per
   student (a `Grader`: grader.grading.slurm), each in grader.grading.sandbox and its kernel in
   grader.grading.jail: a submission that crashes, hangs or eats the memory costs itself alone,
   out of reach of the course directory, the other students and the network.
4. Recorded: its outcome and what was handed in, as a `Record` (runs/<student>.json), and in the
   gradebook, where every score already there stays. A submission graded before and unchanged
   since is not run again unless `force` is set.
5. Reported: `nbgrader generate_feedback`, then grader.grading.classreport's outputs from the
   gradebook, the records and the graded notebooks (grader.grading.findings).
"""

from __future__ import annotations

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
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import BinaryIO

from grader.authoring import build, nbgrader_main
from grader.grading import (
    activity,
    assemble,
    classreport,
    detectors,
    devices,
    exchange,
    findings,
    gradebook,
    intake,
    jail,
    jupyter_data,
    kernel_cache,
    nbgrader_policy,
    sandbox,
    zygote,
)
from grader.grading.assemble import printable
from grader.grading.intake import AutogradeError, Refused, student_id_problem
from grader.grading.nbgrader_policy import grade_id_of
from grader.runtime import profile, published

NBGRADER_VERSION = "0.9"
KERNEL = "python3"  # nbgrader_config.py's Execute.kernel_name; the jail runs its argv
LOCK_RETRIES = 2  # a run that lost a race for the SQLite file is run again
# What nbgrader's log says when a run lost such a race: the file locked by another student's run,
# or the row of the course (its id from nbgrader's config) added by another run a moment earlier.
LOST_RACES = ("database is locked", "UNIQUE constraint failed: course.id")
RELEASE_FEEDBACK_READS = ("timestamp.txt", "submission_secret.txt")  # besides the pages


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
    kernel_cache: bool = True  # on a GPU, compile the course's kernels once (grading.kernel_cache)
    kernels: Path | None = None  # those compiled kernels, while `kernel_cache.seeded` holds them
    gpus: list[devices.Gpu] = field(default_factory=list)  # in GPU mode; none: all visible
    # the forking nbgrader of the batch's runs while `forking` holds it (grader.grading.zygote)
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
    """nbgrader's environment (build.nbgrader_env), which the kernel inherits, with the grading
    device, timeouts and on a GPU the activity library the judge reads speed from."""
    env = jupyter_data.environment(build.nbgrader_env())
    env["COURSE_MODE"] = batch.mode
    if batch.mode == "gpu":
        try:
            env[activity.LIBRARY] = str(activity.build(batch.root / "activity"))
        except activity.ActivityError as why:
            env[activity.UNBUILT] = str(why)
    env[nbgrader_policy.CELL_TIMEOUT_VARIABLE] = str(batch.cell_timeout)
    env[nbgrader_policy.SPEED_CELL_TIMEOUT_VARIABLE] = str(batch.speed_cell_timeout)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(build.ROOT), env.get("PYTHONPATH")]))
    if batch.mode != "gpu":  # side-by-side kernels should not each start a thread per core
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // batch.jobs)))
    return env


@contextmanager
def kernel_sandbox(
    batch: Batch, gpu: devices.Gpu | None = None
) -> Iterator[tuple[list[str], dict[str, str]]]:
    """nbgrader's extra options and environment for one student's run, on `gpu` alone where one
    is given: with `batch.jailed`, a kernel in grader.grading.jail with a uid of its own and only
    that GPU's device node, its private folders removed afterwards."""
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
    # Nsight Compute, for the speed cells that count DRAM bytes (perf.Traffic): its folder bound
    # in, and its ncu named, since the toolkit's bin/ncu looks for it outside /usr
    ncu = profile.installation() if gpu else None
    inside = dict(gpu.env) if gpu else {}
    if ncu is not None:
        inside[profile.NCU_ENV] = str(ncu / "ncu")
    tools = [str(ncu)] if ncu else []
    if activity.LIBRARY in env:  # the GPU activity library, which the kernel's CUDA loads
        tools.append(str(Path(env[activity.LIBRARY]).parent))
    with jail.for_batch(
        KERNEL,
        memory_limit=batch.memory_limit,
        gpu=gpu.minor if gpu else None,
        env=inside,
        tools=tools,
        kernel_cache=batch.kernels,
    ) as (spec, variables):
        yield jail.nbgrader_options(spec), {**env, **variables}


def nbgrader_args(batch: Batch, *args: str) -> list[str]:
    return [*args, f"--CourseDirectory.root={batch.root}", f"--CourseDirectory.db_url={batch.url}"]


# What differs from one batch to the next that only its runs read, at run time: what `environment`
# sets for the batch, and pytest's name of the test running (the test suite grades dozens of
# batches). Batches differing in these alone share a zygote (grader.grading.zygote.shared).
PER_BATCH = (
    nbgrader_policy.CELL_TIMEOUT_VARIABLE,
    nbgrader_policy.SPEED_CELL_TIMEOUT_VARIABLE,
    activity.LIBRARY,
    activity.UNBUILT,
    "PYTEST_CURRENT_TEST",
)


@contextmanager
def forking(batch: Batch) -> Iterator[None]:
    """`batch.zygotes` while the block runs, where the batch has none yet: the nbgrader runs of
    its students and feedback are forked from a zygote this process keeps for every batch of the
    same environment (grader.grading.zygote.shared)."""
    if batch.zygotes is not None:
        yield
        return
    batch.zygotes = zygote.shared(environment(batch), ignored=PER_BATCH)
    try:
        yield
    finally:
        batch.zygotes = None


def run_sandboxed(
    batch: Batch, args: list[str], *, log: Path, env: dict[str, str], data_limit: int | None = None
) -> sandbox.Finished:
    """`nbgrader ARGS` within the batch's limits (grader.grading.sandbox), its output in `log`:
    forked from the batch's zygote where it has one, else started afresh."""
    forks = batch.zygotes.get() if batch.zygotes else None
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


def run_nbgrader(batch: Batch, *args: str) -> None:
    done = subprocess.run(
        nbgrader_main.command(*nbgrader_args(batch, *args)),
        cwd=batch.root,
        env=environment(batch),
        capture_output=True,
        text=True,
        timeout=batch.timeout,
    )
    if done.returncode != 0:
        raise AutogradeError(
            f"`nbgrader {' '.join(args)}` failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )


def prepare(batch: Batch) -> None:
    """Make sure the course directory has the assignment's source, release and gradebook entry."""
    batch.root.mkdir(parents=True, exist_ok=True)
    if not batch.folder("source").joinpath(batch.assignment).is_dir():
        build.build_sources(batch.root)
    if not batch.folder("source").joinpath(batch.assignment).is_dir():
        known = ", ".join(a.name for a in build.assignments())
        raise AutogradeError(f"no assignment {batch.assignment!r}; the course has: {known}")
    registered = gradebook.max_scores(batch.url, batch.assignment)
    if not registered or not batch.folder("release").joinpath(batch.assignment).is_dir():
        print(f"registering {batch.assignment} in the gradebook (nbgrader generate_assignment)")
        run_nbgrader(batch, "generate_assignment", batch.assignment, "--force")


# -- submissions in --------------------------------------------------------------------------


def _submitted(batch: Batch) -> dict[str, str | None]:
    """{folder name: why grading leaves it out, or None} for each folder of submitted/ that holds
    the assignment: one whose name is not a student id the batch can use, or whose submission
    is, or holds, a symbolic link, or holds anything but plain files within intake's limits
    (however it got there: `nbgrader collect`, a copy by hand). Nothing of those is read."""
    submitted = batch.folder("submitted")
    found: dict[str, str | None] = {}
    for d in sorted(submitted.iterdir()) if submitted.is_dir() else []:
        folder = d / batch.assignment
        if not folder.is_dir():
            continue
        if problem := student_id_problem(d.name):
            found[d.name] = f"submitted/{printable(d.name)}: {problem}"
        elif problem := _folder_problem(folder, f"submitted/{d.name}/{batch.assignment}"):
            found[d.name] = f"{problem}; not graded (import it again)"
        else:
            found[d.name] = None
    return found


def refused(batch: Batch) -> list[Refused]:
    """What the last import left out, and every folder of submitted/ that grading leaves out."""
    path = batch.out / intake.REFUSED
    found = [Refused(**r) for r in json.loads(path.read_text())] if path.is_file() else []
    found += [Refused(printable(n), why) for n, why in _submitted(batch).items() if why]
    return list(dict.fromkeys(found))


def untrusted(batch: Batch) -> dict[str, str]:
    """{student: why} for each student folder of submitted/ that grading does not read."""
    left_out = _submitted(batch).items()
    return {n: why for n, why in left_out if why and student_id_problem(n) is None}


def students(batch: Batch) -> list[str]:
    """Every student with a submission of the assignment in submitted/ that grading may read."""
    return [name for name, why in _submitted(batch).items() if why is None]


def _walk(folder: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every file and folder under `folder`, never into a link, each with its lstat, counted by
    an intake.Budget: TooMuch past one submission's limits, before anything of it is copied."""
    budget = intake.Budget()
    for where, folders, files in os.walk(folder):
        folders.sort()
        for name in sorted([*folders, *files]):
            mode = os.lstat(os.path.join(where, name))
            budget.count(mode.st_size if stat.S_ISREG(mode.st_mode) else 0)
            yield Path(where, name), mode


def _folder_problem(folder: Path, shown: str) -> str | None:
    """Why grading must not read `folder` (`shown` is how a report names it), or None."""
    if folder.is_symlink() or folder.parent.is_symlink():
        return f"{shown}: a symbolic link, not followed"
    try:
        for path, mode in _walk(folder):
            relative = f"{shown}/{printable(str(path.relative_to(folder)))}"
            if stat.S_ISLNK(mode.st_mode):
                return f"{relative}: a symbolic link, not followed"
            if not stat.S_ISDIR(mode.st_mode) and not stat.S_ISREG(mode.st_mode):
                return f"{relative}: not a plain file or folder"
            if stat.S_ISREG(mode.st_mode) and mode.st_size > intake.MAX_FILE_BYTES:
                return f"{relative}: {intake.TOO_LARGE}"
    except intake.TooMuch as why:
        return f"{shown}: {why}"
    return None


def _from_layout(batch: Batch, layout: Path, notes: list[Refused]) -> list[str]:
    """Copy each student folder of `layout` (nbgrader's) that holds the assignment into
    submitted/<student>/<assignment>: plain files only, none over the size limit, symbolic links
    never followed; nothing at all of one that holds more than one submission may, counted
    before anything is copied. Returns the students copied."""
    found = []
    for d in sorted(layout.iterdir()):
        source, target = d / batch.assignment, batch.folder("submitted", d.name)
        if not source.is_dir():
            continue
        if problem := student_id_problem(d.name):
            notes.append(Refused(printable(d.name), f"{printable(d.name)}/: {problem}"))
            continue
        if d.is_symlink() or source.is_symlink():
            notes.append(Refused(d.name, f"{d.name}/: a symbolic link, not followed"))
            continue
        if target.exists():
            shutil.rmtree(target)
        said, files = [], []
        try:
            for path, mode in _walk(source):
                where = printable(f"{d.name}/{batch.assignment}/{path.relative_to(source)}")
                if stat.S_ISLNK(mode.st_mode):
                    said.append(Refused(d.name, f"{where}: a symbolic link, not read"))
                elif stat.S_ISREG(mode.st_mode) and mode.st_size > intake.MAX_FILE_BYTES:
                    said.append(Refused(d.name, f"{where}: {intake.TOO_LARGE}"))
                elif stat.S_ISREG(mode.st_mode):
                    files.append((path.relative_to(source), where, mode.st_size))
        except intake.TooMuch as why:
            notes.append(Refused(d.name, f"{printable(f'{d.name}/{batch.assignment}')}/: {why}"))
            continue
        for relative, where, size in files:
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            with open(source / relative, "rb") as f:
                if not intake.copy_capped(f, target / relative, size):
                    said.append(Refused(d.name, f"{where}: {intake.CHANGED}"))
        notes += said
        target.mkdir(parents=True, exist_ok=True)
        found.append(d.name)
    return found


@dataclass(frozen=True)
class _Download:
    """One file of an LMS download, not extracted yet."""

    name: str  # its path in the download
    size: int  # as the zip or the folder says; no more is extracted
    open: Callable[[], BinaryIO]


def _lms_files(source: Path, zips: ExitStack, notes: list[Refused]) -> list[_Download]:
    """Every file of an LMS download (a zip, or a folder of files and zips), none extracted, and
    no link. An archive inside one of the download's zips is a student's file, left to
    `_collect`. The zips stay open as long as `zips`."""
    found = []

    def unzip(path: Path, prefix: str) -> None:
        try:
            z = zips.enter_context(zipfile.ZipFile(path))
        except (zipfile.BadZipFile, OSError) as exc:
            notes.append(Refused(printable(path.name), f"an unreadable zip archive ({exc})"))
            return
        for info in z.infolist():
            if stat.S_ISLNK(info.external_attr >> 16):
                notes.append(Refused(printable(info.filename), "a symbolic link, not read"))
            elif not info.is_dir():
                opened = partial(z.open, info)
                found.append(_Download(prefix + info.filename, info.file_size, opened))

    if source.is_file():
        unzip(source, "")
        return found
    for path in sorted(source.rglob("*")):  # never into a link
        name, mode = str(path.relative_to(source)), path.lstat()
        if stat.S_ISLNK(mode.st_mode):
            notes.append(Refused(printable(path.name), f"{printable(name)}: a symbolic link"))
        elif stat.S_ISREG(mode.st_mode) and path.suffix == ".zip":
            unzip(path, name + "/")
        elif stat.S_ISREG(mode.st_mode):
            found.append(_Download(name, mode.st_size, partial(open, path, "rb")))
    return found


def _collect(
    files: list[_Download], into: Path, pattern: str, notes: list[Refused]
) -> dict[str, dict[Path, _Download]]:
    """The files `nbgrader zip_collect` may collect, by student, at the path in `into` each is to
    be extracted to (zip_collect matches the LMS file-name pattern on that path): notebooks whose
    path matches the pattern, with a student id the batch can use, one per student and notebook
    (of two, the last in name order: the later submission, as LMSs number them), of students
    whose files together are within one submission's limits; every other file noted, and why."""
    theirs: dict[str, dict[Path, tuple[_Download, str]]] = {}
    for file in files:
        shown, parts = printable(file.name), Path(file.name).parts
        if not parts or Path(file.name).is_absolute() or ".." in parts:
            notes.append(Refused(shown, f"{shown}: a path outside the download"))
            continue
        path = into.joinpath(*parts)
        match = re.match(pattern, str(path))
        info = match.groupdict() if match else {}
        student, file_id = info.get("student_id"), info.get("file_id")
        if not student or not file_id:
            why = "its name does not match the LMS's file-name pattern (--regexp)"
            notes.append(Refused(printable(path.name), why))
        elif why := student_id_problem(student):
            notes.append(Refused(printable(student), f"{printable(path.name)}: {why}"))
        else:
            theirs.setdefault(student, {})[path] = (file, file_id)
    chosen = {}
    for student, found in theirs.items():
        budget = intake.Budget()
        try:
            for file, _ in found.values():  # before anything is extracted
                budget.count(file.size)
        except intake.TooMuch as why:
            notes.append(Refused(student, f"its {len(found)} files in the download: {why}"))
            continue
        mine: dict[str, Path] = {}
        for path in sorted(found):
            shown = printable(path.name)
            if path.suffix != ".ipynb":
                archive = path.suffix == ".zip"
                kind = "an archive inside the download" if archive else "not a notebook"
                why = f"{shown}: {kind}; unpack or rename it and grade again"
                notes.append(Refused(student, why))
                continue
            notebook = Path(found[path][1]).stem
            if notebook in mine:
                why = f"a second {notebook}.ipynb of the student; {shown} was graded"
                notes.append(Refused(student, f"{printable(mine[notebook].name)}: {why}"))
            mine[notebook] = path
        chosen[student] = {path: found[path][0] for path in mine.values()}
    return chosen


def _extract(file: _Download, path: Path) -> str | None:
    """Extract `file` to `path`, no more than the size it was counted with; why not, or None."""
    if file.size > intake.MAX_FILE_BYTES:
        return intake.TOO_LARGE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with file.open() as read:
            return None if intake.copy_capped(read, path, file.size) else intake.CHANGED
    except (zipfile.BadZipFile, OSError, RuntimeError) as exc:  # damaged, encrypted
        path.unlink(missing_ok=True)
        return f"unreadable ({exc})"


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
    intake.write_refused(batch.out, notes)
    return found


def _from_lms(batch: Batch, source: Path, regexp: str | None, notes: list[Refused]) -> list[str]:
    """An LMS download through `nbgrader zip_collect`, given only the files it may collect:
    nothing else of the download is extracted."""
    downloaded = batch.root / "downloaded" / batch.assignment
    for step in ("archive", "extracted"):
        if (downloaded / step).exists():
            shutil.rmtree(downloaded / step)
    pattern = regexp or nbgrader_policy.LMS_FILE_PATTERN
    found = set()
    with ExitStack() as zips:
        chosen = _collect(_lms_files(source, zips, notes), downloaded / "archive", pattern, notes)
        for student, files in chosen.items():
            for path, file in files.items():
                if why := _extract(file, path):
                    notes.append(Refused(student, f"{printable(file.name)}: {why}"))
                else:
                    found.add(student)
    if not found:
        raise AutogradeError(
            f"{source}: no submission of {batch.assignment} found. The LMS's file-name pattern "
            "(FileNameCollectorPlugin.named_regexp in grader/grading/nbgrader_config.py, or "
            "--regexp) must match its file names; left out:\n"
            + "\n".join(f"  {n.student}: {n.reason}" for n in notes[:20])
        )
    options = [f"--FileNameCollectorPlugin.named_regexp={regexp}"] if regexp else []
    run_nbgrader(batch, "zip_collect", batch.assignment, "--force", *options)
    return sorted(found)


# -- grading -----------------------------------------------------------------------------------


@dataclass
class Record:
    """One submission's way through grading, in runs/<student>.json: how its run ended, what was
    handed in (assemble.read), and the fingerprint by which a later batch knows it unchanged."""

    run: findings.Run
    fingerprint: str = ""  # the grading device and every file of the submission
    handed_in: findings.Submitted | None = None  # None while it is graded, or was interrupted

    def save(self, batch: Batch, student: str) -> findings.Run:
        saved = asdict(self)
        saved = {**saved.pop("run"), **saved}  # the outcome's own fields on top: `status` first
        (batch.out / "runs").mkdir(parents=True, exist_ok=True)
        (batch.out / "runs" / f"{student}.json").write_text(json.dumps(saved, indent=1))
        return self.run

    @classmethod
    def load(cls, batch: Batch, student: str) -> Record:
        """The record `save` kept; TypeError where it holds no `handed_in` (`_interrupted`)."""
        saved = json.loads((batch.out / "runs" / f"{student}.json").read_text())
        seen, fingerprint = saved.pop("handed_in"), saved.pop("fingerprint")
        seen["dropped"] = assemble.Dropped(**seen["dropped"])
        seen["patches"] = [detectors.Route(**r) for r in seen["patches"]]
        return cls(findings.Run(**saved), fingerprint, findings.Submitted(**seen))


def _interrupted(batch: Batch, student: str) -> None:
    """Record `student` as not graded, while it is graded and after Ctrl-C: the next run grades
    it (see `_unchanged`)."""
    run = findings.Run("interrupted", detail="grading was interrupted; the next run grades it")
    Record(run).save(batch, student)


def _record(
    batch: Batch, student: str, found: assemble.Submission, given: dict, run: findings.Run
) -> findings.Run:
    """Record one student's outcome (`Record`) and, where not every notebook ran, its submission
    in the gradebook, each notebook not read scoring 0 (as nbgrader scores a missing one)."""
    unread = [*found.missing, *found.unreadable]
    if unread or run.status != "ok":
        gradebook.record_ungraded(batch.url, batch.assignment, student, unread, found.stamp)
    seen = findings.inspect(found, given)
    return Record(run, f"{batch.mode} {found.digest}", seen).save(batch, student)


def _save(batch: Batch, student: str, run: findings.Run) -> findings.Run:
    """Record an outcome that came without grade_one's read of the submission (a Slurm task's):
    the submission is read here."""
    given = released(batch)
    found = assemble.read(batch.folder("submitted", student), given)
    return _record(batch, student, found, given, run)


def grade_one(
    batch: Batch, student: str, given: dict[str, object], gpu: devices.Gpu | None = None
) -> findings.Run:
    """`nbgrader autograde` for one student in the sandbox, on `gpu` where one is given, of the
    submission as grader.grading.assemble stages it; the outcome, also recorded (`_record`). A
    submission without one readable notebook is recorded with zeros, not run."""
    staged = batch.folder(assemble.ASSEMBLED, student)
    found = assemble.stage(batch.folder("submitted", student), given, staged)
    if not found.notebooks:
        run = findings.Run("not-graded", detail="no readable notebook")
        return _record(batch, student, found, given, run)
    log = batch.out / "logs" / f"{student}.log"
    data_limit = None
    if batch.mode != "gpu":  # see grader.grading.sandbox: leave the resident slack to the watchdog
        data_limit = batch.memory_limit - min(sandbox.GIB, batch.memory_limit // 4)
    assembled = f"--CourseDirectory.submitted_directory={assemble.ASSEMBLED}"
    args = nbgrader_args(batch, "autograde", batch.assignment, f"--student={student}", assembled)
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
        memory = f"{batch.memory_limit / sandbox.GIB:.1f} GiB"
        run = findings.Run("memory", finished.seconds, limit=memory)
    elif finished.returncode != 0 and "CellTimeoutError" in text:  # nbclient gave up on it
        why = "a cell ran past its timeout and ignored the interrupt; nbgrader gave up"
        run = findings.Run("timeout", finished.seconds, why, f"{batch.cell_timeout} s per cell")
    elif finished.returncode != 0:
        run = findings.Run("failed", finished.seconds, findings.crash_detail(text))
    else:
        run = findings.Run("ok", finished.seconds)
    return _record(batch, student, found, given, run)


def _unchanged(batch: Batch, student: str, given: dict[str, object]) -> findings.Run | None:
    """The outcome of an earlier grading of this same submission, its record renewed from this
    batch's read of it; None where there is none."""
    try:
        earlier = Record.load(batch, student)
    except (OSError, ValueError, KeyError, TypeError):  # none, interrupted, or an older grader's
        return None
    found = assemble.read(batch.folder("submitted", student), given)
    if earlier.fingerprint != f"{batch.mode} {found.digest}":
        return None
    return _record(batch, student, found, given, earlier.run)


Grader = Callable[[Batch, list[str], dict[str, object]], dict[str, findings.Run]]
"""Grades and records the students it is given, with the released notebooks, as grade_one does
(`_save` records an outcome got without it), and returns their outcomes: `grade_here`, or
grader.grading.slurm's array."""


def grade_all(
    batch: Batch, names: list[str], grade: Grader | None = None
) -> dict[str, findings.Run]:
    """Grade those of `names` not graded before (`_unchanged`; all with `force`), with `grade`
    (default: `grade_here`), and return every student's outcome."""
    given = released(batch)
    graded = set() if batch.force else set(gradebook.grades(batch.url, batch.assignment))
    runs = {s: r for s in names if s in graded and (r := _unchanged(batch, s, given))}
    todo = [s for s in names if s not in runs]
    if runs:
        print(f"{len(runs)} submissions unchanged since they were graded (--force regrades)")
    runs.update((grade or grade_here)(batch, todo, given))
    return runs


def _as_completed(futures, poll: float = 0.5):
    """Each of `futures` as it completes, the main thread waking every `poll` seconds, so that a
    Ctrl-C delivered to another thread is acted on at once."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=poll, return_when=FIRST_COMPLETED)
        yield from done


def grade_here(batch: Batch, todo: list[str], given: dict[str, object]) -> dict[str, findings.Run]:
    """Grade `todo` on this host, batch.jobs at a time, with a progress bar, each student holding
    a GPU of `batch.gpus` alone in GPU mode, and recorded as interrupted while it is graded: on
    Ctrl-C the grading processes are killed, those in flight stay so, and the interrupt goes on."""
    import psutil
    from tqdm.auto import tqdm

    gpus = batch.gpus
    if batch.mode == "gpu" and not gpus:
        gpus = devices.visible(devices.detect(), os.environ)
    held = devices.Pool(gpus)
    runs: dict[str, findings.Run] = {}
    with (
        forking(batch),
        kernel_cache.seeded(batch, held, todo, environment(batch), KERNEL) as built,
        ThreadPoolExecutor(max(1, batch.jobs)) as pool,
        tqdm(total=len(todo), desc=f"grading {batch.assignment}", unit="student") as bar,
    ):
        if built is not None:
            bar.write(built.line())

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
                    run = findings.Run("failed", detail=f"not graded: {exc}")
                    # recorded without a fingerprint: the next run grades it again
                    Record(run, handed_in=findings.Submitted()).save(batch, student)
                runs[student] = run
                if run.status != "ok":
                    bar.write(f"{student}: {run.status}: {printable(run.detail or run.limit)}")
                bar.update()
        except KeyboardInterrupt:
            for future in futures:
                future.cancel()
            sandbox.kill(psutil.Process().children(recursive=True))  # nbgraders, their kernels
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
    """`nbgrader generate_feedback` for every autograded submission, each student's pages copied
    to out/feedback/, nbgrader's output to out/feedback.log. Of what nbgrader copies into
    feedback/ from the autograded folder, where a submission may have written anything, only the
    pages and what release_feedback reads are kept. Returns {student: why} for each student with
    an autograded notebook but no page for it."""
    names = gradebook.notebook_names(batch.url, batch.assignment)
    pages = {f"{n}.html" for n in names}
    everyone = students(batch)
    for student in everyone:  # a page written there must not stand in for a failed one
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
    for student in everyone:
        made = batch.folder("feedback", student)
        for path in made.iterdir() if made.is_dir() else []:
            if path.name not in pages and path.name not in RELEASE_FEEDBACK_READS:
                _remove(path)
        kept = sorted(p for p in pages if (made / p).is_file())
        for page in kept:
            (target / student).mkdir(parents=True, exist_ok=True)
            shutil.copy(made / page, target / student / page)
        graded = batch.folder("autograded", student)
        lacking = [
            n for n in names if f"{n}.html" not in kept and (graded / f"{n}.ipynb").is_file()
        ]
        if lacking:
            missing[student] = (
                f"nbgrader generate_feedback wrote no page for {', '.join(lacking)} "
                f"({findings.crash_detail(said)}); see {log}, fix the cause and run the same "
                "command again"
            )
    if done.returncode != 0:
        warning = f"warning: nbgrader generate_feedback failed; its output is in {log}"
        print(warning, file=sys.stderr)
    return missing


# -- results -----------------------------------------------------------------------------------


def _notebooks(folder: Path, names: list[str]) -> dict[str, object]:
    """{name: notebook} of those of `names` in `folder` that read as notebooks."""
    paths = {name: folder / f"{name}.ipynb" for name in names}
    read = {name: findings.read_notebook(path)[0] for name, path in paths.items() if path.is_file()}
    return {name: nb for name, nb in read.items() if nb is not None}


def released(batch: Batch) -> dict[str, object]:
    """{notebook name: released notebook} of the assignment, as students received it."""
    names = gradebook.notebook_names(batch.url, batch.assignment)
    return _notebooks(batch.folder("release") / batch.assignment, names)


def results(
    batch: Batch,
    runs: dict[str, findings.Run],
    device: str,
    grades_speed: bool,
    no_feedback: dict[str, str],
) -> classreport.ClassResults:
    """The class's results: scores from the gradebook, and what each student's `Record` (its
    outcome in `runs` where graded in this batch), autograded notebooks and `no_feedback` entry
    ({student: why}, from `feedback`) say."""
    given = released(batch)
    points = gradebook.max_scores(batch.url, batch.assignment)
    order = [grade_id_of(c) for nb in given.values() for c in nb.cells]  # notebook order
    points = {g: points[g] for g in dict.fromkeys([*order, *points]) if g in points}
    recorded = gradebook.grades(batch.url, batch.assignment)
    left_out = refused(batch)
    here = set(runs) | (set(recorded) - set(untrusted(batch)))
    rows = []
    for student in sorted(here | {r.student for r in left_out}):
        grades = recorded.get(student) or gradebook.StudentGrades(student)
        row = classreport.StudentRow(
            student,
            {g: grades.scores.get(g) for g in points},
            [findings.Finding("not-imported", r.reason) for r in left_out if r.student == student],
            seconds_late=grades.seconds_late,
            penalty=grades.penalty,
        )
        try:
            if student in here:
                row.findings += _inspect(batch, row, given, runs.get(student), grades_speed, points)
        except Exception as exc:  # one submission's trouble, whatever it is, is its own
            why = f"{type(exc).__name__}: {exc}"[:300] + "; the score is what the gradebook holds"
            row.findings.append(findings.Finding("grader-error", why))
        if student in no_feedback:
            row.findings.append(findings.Finding("no-feedback", no_feedback[student]))
        rows.append(row)
    return classreport.ClassResults(
        batch.assignment, device, grades_speed, points, rows, sandboxed=batch.jailed,
        versions=published.versions(),
    )  # fmt: skip


def _inspect(batch, row, given, run, grades_speed: bool, points) -> list[findings.Finding]:
    """What one student's record and autograded notebooks say, for `results`, filling in
    `row.speed` and `row.dropped`; a student without a run (its submission gone) handed in none."""
    handed_in = findings.Submitted(missing=list(given))
    if run is not None:
        handed_in = Record.load(batch, row.student).handed_in
    autograded = _notebooks(batch.folder("autograded", row.student), list(given))
    graded = findings.Graded()
    for nb in autograded.values():  # each notebook's lists added to the submission's
        for name, items in vars(findings.inspect_graded(nb, grades_speed=grades_speed)).items():
            getattr(graded, name).extend(items)
    row.speed, row.dropped = graded.speed, handed_in.dropped.describe()
    row.ran_on = handed_in.ran_on
    return findings.classify(
        run=run,
        submitted=handed_in,
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
    """The whole batch: prepare, import (from `submissions`, or an nbgrader exchange's `inbound`),
    grade (with `grade`, default `grade_here`), feedback, report; the results and files written."""
    require_nbgrader()
    prepare(batch)
    if duedate:
        gradebook.set_duedate(batch.url, batch.assignment, duedate)
    if submissions is not None:
        found = import_submissions(batch, submissions, regexp)
        print(f"{len(found)} submissions of {batch.assignment} imported from {submissions}")
    elif inbound is not None:
        found = exchange.import_exchange(inbound, batch.assignment, batch.root, batch.out)
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
        runs = grade_all(batch, names, grade)
        no_feedback = feedback(batch)
    graded = results(batch, runs, device, grades_speed, no_feedback)
    return graded, classreport.write(graded, batch.out)
