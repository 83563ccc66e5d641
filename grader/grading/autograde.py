"""Grade every submission of one assignment with nbgrader, then write feedback, grades and the
class report. `python -m grader autograde` and `make autograde` run it; docs/instructors.md says
how it fits with the rest of nbgrader.

1. The course directory (build/ by default) must hold the assignment's source and its entry in
   the gradebook; `make release` makes both, and what is missing is generated here.
2. Submissions come in: a folder in nbgrader's layout (<student>/<assignment>/<notebook>.ipynb) is
   copied into submitted/; an LMS download (a zip, or a folder of its files) goes through
   `nbgrader zip_collect`.
3. `nbgrader autograde <assignment> --student=<id>`, one subprocess per student, several side by
   side on the CPU and one at a time on a GPU (speed cells time kernels), each in
   grader.grading.sandbox: a submission that crashes, hangs or eats the memory costs itself
   alone, and every score already in the gradebook stays there. A submission graded before
   and unchanged since is not graded again unless `force` is set.
4. `nbgrader generate_feedback`, then grades read back through nbgrader's Gradebook API, each
   submission inspected by grader.grading.findings, and grader.grading.classreport writes the
   outputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.authoring import build
from grader.grading import classreport, findings, gradebook, nbgrader_policy, sandbox

NBGRADER_VERSION = "0.9"
LOCK_RETRIES = 2  # a run that lost a race for the SQLite file is run again


class AutogradeError(RuntimeError):
    """The batch cannot be graded as asked; the message says what to fix."""


def require_nbgrader() -> None:
    """Fail with the command that installs nbgrader when this Python lacks it."""
    try:
        import nbgrader
    except ImportError:
        raise AutogradeError(
            f"nbgrader is not installed for {sys.executable}. Grading needs it: run `make setup` "
            "(the course's environment, with nbgrader), or `pip install nbgrader==0.9.6` into "
            "this Python (it brings nbconvert, the gradebook's SQLAlchemy and psutil)."
        ) from None
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
    env = build.nbgrader_env()
    env["COURSE_MODE"] = batch.mode
    env[nbgrader_policy.CELL_TIMEOUT_VARIABLE] = str(batch.cell_timeout)
    env[nbgrader_policy.SPEED_CELL_TIMEOUT_VARIABLE] = str(batch.speed_cell_timeout)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(build.ROOT), env.get("PYTHONPATH", "")) if p
    )
    if batch.mode != "gpu":  # side-by-side kernels should not each start a thread per core
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // batch.jobs)))
    return env


def nbgrader_command(batch: Batch, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nbgrader",
        *args,
        f"--CourseDirectory.root={batch.root}",
        f"--CourseDirectory.db_url={batch.url}",
    ]


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


def students(batch: Batch) -> list[str]:
    """Every student with a submission folder for the assignment in submitted/."""
    submitted = batch.folder("submitted")
    if not submitted.is_dir():
        return []
    return sorted(d.name for d in submitted.iterdir() if (d / batch.assignment).is_dir())


def import_submissions(batch: Batch, source: Path, regexp: str | None = None) -> list[str]:
    """Bring submissions into submitted/: copy a folder in nbgrader's layout (or the course
    directory's own submitted/), or run `nbgrader zip_collect` on an LMS download (a zip file or
    a folder of the files in one). Returns the students found."""
    source = Path(source).resolve()
    if not source.exists():
        raise AutogradeError(f"{source}: no such file or folder")
    layout = source / "submitted" if (source / "submitted").is_dir() else source
    if layout == batch.folder("submitted"):
        return students(batch)
    if source.is_dir():
        found = [d for d in sorted(layout.iterdir()) if (d / batch.assignment).is_dir()]
        if found:
            for student in found:
                target = batch.folder("submitted", student.name)
                if target.exists():
                    shutil.rmtree(target)
                shutil.copytree(student / batch.assignment, target)
            return [d.name for d in found]
    archive = batch.root / "downloaded" / batch.assignment / "archive"
    if archive.exists():
        shutil.rmtree(archive)
    archive.mkdir(parents=True)
    files = [source] if source.is_file() else [p for p in source.rglob("*") if p.is_file()]
    for f in files:
        target = archive / (f.name if source.is_file() else f.relative_to(source))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
    options = [f"--FileNameCollectorPlugin.named_regexp={regexp}"] if regexp else []
    start = time.time()
    done = run_nbgrader(batch, "zip_collect", batch.assignment, "--force", *options)
    collected = [  # the students zip_collect wrote files for just now
        s
        for s in students(batch)
        if any(p.stat().st_mtime >= start - 1 for p in batch.folder("submitted", s).rglob("*"))
    ]
    if not collected:
        raise AutogradeError(
            f"{source}: nbgrader zip_collect found no submission of {batch.assignment}. Its "
            "file-name pattern (FileNameCollectorPlugin.named_regexp in "
            "grader/grading/nbgrader_config.py, or --regexp) must match the LMS's file names.\n"
            + done.stderr[-2000:]
        )
    return collected


# -- grading -----------------------------------------------------------------------------------


def fingerprint(folder: Path, mode: str) -> str:
    """A hash of every file of a submission and the grading device: unchanged means graded."""
    h = hashlib.sha256(mode.encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
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


def _timestamp(folder: Path) -> str | None:
    stamp = folder / "timestamp.txt"
    return (stamp.read_text().strip() or None) if stamp.is_file() else None


def grade_one(batch: Batch, student: str, given: dict[str, object]) -> findings.Run:
    """`nbgrader autograde` for one student in the sandbox; the outcome, also saved as JSON.
    A submission without one readable notebook is recorded with zeros without running it."""
    folder = batch.folder("submitted", student)
    submitted = findings.inspect_submitted(folder, given)
    unread = [*submitted.missing, *submitted.unreadable]
    if len(unread) == len(given):
        gradebook.record_ungraded(batch.url, batch.assignment, student, unread, _timestamp(folder))
        return _save(batch, student, findings.Run("not-graded", detail="no readable notebook"))
    log = batch.out / "logs" / f"{student}.log"
    data_limit = None
    if batch.mode != "gpu":  # see grader.grading.sandbox: leave the resident slack to the watchdog
        data_limit = batch.memory_limit - min(sandbox.GIB, batch.memory_limit // 4)
    command = nbgrader_command(batch, "autograde", batch.assignment, f"--student={student}")
    for _ in range(1 + LOCK_RETRIES):
        finished = sandbox.run(
            [*command, "--force"],
            log=log,
            timeout=batch.timeout,
            memory_limit=batch.memory_limit,
            data_limit=data_limit,
            cwd=batch.root,
            env=environment(batch),
        )
        text = log.read_text(encoding="utf-8", errors="replace")
        if finished.ok or "database is locked" not in text:
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
    if record.pop("fingerprint", None) != fingerprint(
        batch.folder("submitted", student), batch.mode
    ):
        return None
    return findings.Run(**record)


def grade_all(batch: Batch, names: list[str]) -> dict[str, findings.Run]:
    """Grade `names` side by side (batch.jobs at a time) with a progress bar."""
    from tqdm.auto import tqdm

    graded = set(gradebook.grades(batch.url, batch.assignment))
    given = released(batch)
    runs = {s: r for s in names if (r := previous_run(batch, s, graded)) is not None}
    todo = [s for s in names if s not in runs]
    if runs:
        print(f"{len(runs)} submissions unchanged since they were graded (--force regrades)")
    with (
        ThreadPoolExecutor(max(1, batch.jobs)) as pool,
        tqdm(total=len(todo), desc=f"grading {batch.assignment}", unit="student") as bar,
    ):
        futures = {pool.submit(grade_one, batch, s, given): s for s in todo}
        for future in as_completed(futures):
            student = futures[future]
            try:
                run = future.result()
            except Exception as exc:  # the grader's own trouble (a disk, the database): go on
                run = _save(batch, student, findings.Run("failed", detail=f"not graded: {exc}"))
            runs[student] = run
            if run.status != "ok":
                bar.write(f"{student}: {run.status}: {run.detail or run.limit}")
            bar.update()
    return runs


def feedback(batch: Batch) -> None:
    """`nbgrader generate_feedback` for every autograded submission, copied to out/feedback/."""
    done = run_nbgrader(batch, "generate_feedback", batch.assignment, "--force", check=False)
    if done.returncode != 0:
        print("warning: nbgrader generate_feedback failed for some students:", file=sys.stderr)
        print(done.stderr[-2000:], file=sys.stderr)
    target = batch.out / "feedback"
    if target.exists():
        shutil.rmtree(target)
    for student in students(batch):
        made = batch.folder("feedback", student)
        if made.is_dir():
            shutil.copytree(made, target / student)


# -- results -----------------------------------------------------------------------------------


def _notebooks(folder: Path, names: list[str]) -> dict[str, object]:
    import nbformat

    return {
        n: nbformat.read(folder / f"{n}.ipynb", as_version=4)
        for n in names
        if (folder / f"{n}.ipynb").is_file()
    }


def released(batch: Batch) -> dict[str, object]:
    """{notebook name: released notebook} of the assignment, as students received it."""
    names = gradebook.notebook_names(batch.url, batch.assignment)
    return _notebooks(batch.folder("release") / batch.assignment, names)


def results(batch: Batch, runs: dict[str, findings.Run], device: str, grades_speed: bool):
    """The class's results: scores from the gradebook, findings from the files."""
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
    rows = []
    for student in sorted(set(students(batch)) | set(recorded)):
        grades = recorded.get(student) or gradebook.StudentGrades(student)
        submitted = findings.inspect_submitted(batch.folder("submitted", student), given)
        autograded = _notebooks(batch.folder("autograded", student), list(given))
        graded = findings.Graded()
        for nb in autograded.values():
            one = findings.inspect_graded(nb, grades_speed=grades_speed)
            graded.errors += one.errors
            graded.speed += one.speed
            graded.doubts += one.doubts
        row = classreport.StudentRow(
            student,
            {g: grades.scores.get(g) for g in points},
            seconds_late=grades.seconds_late,
            penalty=grades.penalty,
            speed=graded.speed,
        )
        row.findings = findings.classify(
            run=runs.get(student),
            submitted=submitted,
            graded=graded if autograded else None,
            score=row.total,
            max_score=sum(points.values()),
            seconds_late=grades.seconds_late,
            penalty=grades.penalty,
        )
        rows.append(row)
    return classreport.ClassResults(batch.assignment, device, grades_speed, points, rows)


def autograde(
    batch: Batch,
    *,
    submissions: Path | None = None,
    regexp: str | None = None,
    duedate: str | None = None,
    device: str,
    grades_speed: bool,
) -> dict[str, Path]:
    """The whole batch: prepare, import, grade, feedback, report. Returns the files written."""
    require_nbgrader()
    prepare(batch)
    if duedate:
        gradebook.set_duedate(batch.url, batch.assignment, duedate)
    if submissions is not None:
        found = import_submissions(batch, submissions, regexp)
        print(f"{len(found)} submissions of {batch.assignment} imported from {submissions}")
    names = students(batch)
    if not names:
        raise AutogradeError(
            f"no submissions of {batch.assignment} in {batch.folder('submitted')}: pass "
            "--submissions (a folder <student>/<assignment>/<notebook>.ipynb, or an LMS zip)"
        )
    runs = grade_all(batch, names)
    given = released(batch)
    recorded = gradebook.grades(batch.url, batch.assignment)
    for student in names:  # every student in the gradebook; a notebook never read scores 0
        submitted = findings.inspect_submitted(batch.folder("submitted", student), given)
        unread = [*submitted.missing, *submitted.unreadable]
        if unread or student not in recorded:
            gradebook.record_ungraded(batch.url, batch.assignment, student, unread)
    feedback(batch)
    return classreport.write(results(batch, runs, device, grades_speed), batch.out)
