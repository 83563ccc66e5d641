"""Grading beyond one host: each student of a batch graded by one task of a Slurm job array
(docs/instructors.md, "Beyond one host: Slurm", says what runs where and why).

The trusted side writes a job folder the nodes share (`job.json`, `course/`, `inbox/<student>/`),
submits the array, follows it with `squeue` and merges. Each task (`python -m
grader.grading.slurm JOB_FOLDER`, its student from SLURM_ARRAY_TASK_ID) grades its student in a
course directory of its own, `work/<task>/` of the job folder, never on the node's disk (nothing
ends a task cleanly every time: Slurm's SIGKILL, the OOM killer, a failing node), and leaves in
`out/<student>/` the outcome (`result.json`), nbgrader's log and the graded notebooks: data that
the trusted side checks (`read_result`, `checked_notebook`) before it records the scores itself
(`rescore`), so that they come out as a local batch's.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.authoring import build, nbgrader_main
from grader.grading import assemble, autograde, devices, findings, gradebook, jail

SBATCH, SQUEUE, SCANCEL = "sbatch", "squeue", "scancel"
INSTALL = "apt-get install slurm-client (Debian's slurm-wlm for a whole cluster)"
RESULT = "result.json"
MAX_RESULT_BYTES = 64 << 10
MAX_LOG_BYTES = 4 << 20  # of a task's nbgrader log, its end is kept
MAX_TEXT = 2000  # characters of a task's outcome's detail
SLACK_SECONDS = 600  # the array's default time limit: a student's --timeout and this
KNOWN_STATUSES = {"ok", "failed", "timeout", "memory", "not-graded"}
POLL_SECONDS = 5.0
# job.json: the students by task index, and these fields of the batch (autograde.Batch's names)
JOB_FIELDS = "assignment mode cell_timeout speed_cell_timeout timeout memory_limit jailed".split()
TIME_LIMIT = "TIMEOUT"
# the states of a task that has ended (squeue --states=all lists them for MinJobAge, 300 s)
ENDED = {TIME_LIMIT, "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL"}
ENDED |= {"OUT_OF_MEMORY", "PREEMPTED"}


class SlurmError(RuntimeError):
    """The array cannot be submitted or followed; the message says what to fix."""


@dataclass(frozen=True)
class Ended:
    """How Slurm last reported a task: its state and its time limit, as squeue shows them."""

    state: str
    time_limit: str


@dataclass
class Options:
    """How the array is submitted: `sbatch` options passed through as given (partition, account,
    --gres, --time, ...), `folder` for the job folders (shared with the nodes; default: the
    batch's out/slurm/), at most `throttle` tasks at once (sbatch's %N) when set."""

    sbatch: list[str] = field(default_factory=list)
    folder: Path | None = None
    throttle: int | None = None


def require() -> None:
    """Fail with the install command where Slurm's client commands are missing."""
    if missing := [c for c in (SBATCH, SQUEUE, SCANCEL) if shutil.which(c) is None]:
        raise SlurmError(
            f"{', '.join(missing)} not found: grading through Slurm submits from a host of the "
            f"cluster (a login node) with Slurm's commands ({INSTALL})"
        )


def _given(options: list[str], *names: str) -> bool:
    """Whether sbatch's `options` already set one of `names` (long options, or short ones)."""
    return any(
        o == n or o.startswith(n + "=") or (len(n) == 2 and o.startswith(n))
        for o in options
        for n in names
    )


def sbatch_command(batch: autograde.Batch, folder: Path, count: int, options: Options) -> list[str]:
    """The sbatch command of the array: one task per student, the options passed through; a
    time limit of the whole-submission timeout plus slack, and in GPU mode one GPU a task,
    unless the options set them."""
    defaults = []
    if not _given(options.sbatch, "--time", "-t"):
        defaults.append(f"--time={math.ceil((batch.timeout + SLACK_SECONDS) / 60)}")
    gpus = ("--gres", "--gpus", "-G", "--gpus-per-task", "--gpus-per-node")
    if batch.mode == "gpu" and not _given(options.sbatch, *gpus):
        defaults.append("--gres=gpu:1")
    array = f"0-{count - 1}" + (f"%{options.throttle}" if options.throttle else "")
    task = [sys.executable, "-m", "grader.grading.slurm", str(folder)]
    wrap = f"PYTHONPATH={shlex.quote(str(build.ROOT))} exec {shlex.join(task)}"
    return [
        SBATCH,
        "--parsable",
        f"--array={array}",
        f"--job-name=grade-{batch.assignment}",
        f"--output={folder / 'slurm-%A_%a.out'}",
        f"--chdir={folder}",
        *defaults,
        *options.sbatch,
        f"--wrap={wrap}",
    ]


# -- the trusted side: submit, wait, merge -------------------------------------------------


@dataclass
class Array:
    """An autograde.Grader: the students graded by a Slurm job array, merged here."""

    options: Options

    def __call__(
        self, batch: autograde.Batch, todo: list[str], given: dict[str, object]
    ) -> dict[str, findings.Run]:
        if not todo:
            return {}
        base = Path(self.options.folder or batch.out / "slurm").resolve()
        base.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="job-", dir=base))
        write_job(batch, todo, folder)
        for student in todo:
            autograde._interrupted(batch, student)
        job_id = submit(batch, folder, len(todo), self.options)
        print(f"Slurm job {job_id}: {len(todo)} tasks; job folder {folder}")
        try:
            ended = wait(job_id)
        except KeyboardInterrupt:
            subprocess.run([SCANCEL, job_id], capture_output=True)
            print(f"interrupted: Slurm job {job_id} cancelled; run again to grade the rest")
            raise
        states = {todo[i]: e for i, e in ended.items() if 0 <= i < len(todo)}
        runs = merge(batch, todo, given, folder, states)
        shutil.rmtree(folder / "work", ignore_errors=True)  # what a killed task left
        return runs


def write_job(batch: autograde.Batch, todo: list[str], folder: Path) -> None:
    """The job folder: job.json, the template course directory, every submission's copy."""
    folder.chmod(0o700)  # the hidden tests and the class's work: the instructor's alone
    course = folder / "course"
    shutil.copytree(batch.folder("source") / batch.assignment, course / "source" / batch.assignment)
    template = autograde.Batch(batch.assignment, batch.mode, root=course, out=folder / "grading")
    autograde.prepare(template)  # generate_assignment: the release and a gradebook of its own
    given = autograde.released(batch)
    for student in todo:  # what grading runs, assembled here: nothing else leaves this host
        assemble.stage(batch.folder("submitted", student), given, folder / "inbox" / student)
    job = {"students": todo, **{name: getattr(batch, name) for name in JOB_FIELDS}}
    (folder / "job.json").write_text(json.dumps(job, indent=1))


def submit(batch: autograde.Batch, folder: Path, count: int, options: Options) -> str:
    """Submit the array; its job id."""
    command = sbatch_command(batch, folder, count, options)
    done = subprocess.run(command, capture_output=True, text=True, cwd=folder)
    if done.returncode != 0:
        raise SlurmError(
            f"sbatch refused the array: {done.stderr.strip() or done.stdout.strip()}\n"
            f"  the command: {shlex.join(command)}\n  pass the cluster's options with "
            "--sbatch (partition, account, --gres), see docs/instructors.md"
        )
    return done.stdout.strip().split(";")[0]


def wait(job_id: str) -> dict[int, Ended]:
    """Return once every task of the job has ended (or Slurm no longer knows the job), with the
    last state Slurm reported of each task it listed, by task index."""
    ended: dict[int, Ended] = {}
    while True:
        squeue = [SQUEUE, "--noheader", "--array", "--states=all", f"--jobs={job_id}"]
        done = subprocess.run([*squeue, "--format=%K|%T|%l"], capture_output=True, text=True)
        if done.returncode != 0 and "Invalid job id" not in done.stderr:
            raise SlurmError(f"squeue failed: {done.stderr.strip()}")
        # task index (or a pending range), state, time limit
        tasks = [t for line in done.stdout.splitlines() if len(t := line.strip().split("|")) == 3]
        ended.update((int(t[0]), Ended(t[1], t[2])) for t in tasks if t[0].isdigit())
        if done.returncode != 0 or all(t[1] in ENDED for t in tasks):
            return ended
        time.sleep(POLL_SECONDS)


def _regular_file(path: Path) -> bool:
    return not path.is_symlink() and path.is_file()


def read_result(folder: Path, student: str) -> tuple[findings.Run | None, str]:
    """The outcome a task left in `folder` for `student`, or (None, why it cannot be used)."""
    path = folder / RESULT
    if not _regular_file(path):
        return None, "the Slurm task left no result (stopped by Slurm, or its node failed)"
    if path.stat().st_size > MAX_RESULT_BYTES:
        return None, "the Slurm task's result is over its size limit"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        run = data["run"]
        assert data["student"] == student, "it names another student"
        assert run["status"] in KNOWN_STATUSES, "an unknown status"
        seconds = float(run.get("seconds", 0.0))
        assert math.isfinite(seconds) and seconds >= 0, "a time that is not one"
        detail, limit = str(run.get("detail", "")), str(run.get("limit", ""))
    except (ValueError, KeyError, TypeError, AssertionError, RecursionError) as exc:
        return None, f"the Slurm task's result is not one the grader wrote ({exc})"
    text = (autograde.printable(detail)[:MAX_TEXT], autograde.printable(limit)[:MAX_TEXT])
    return findings.Run(run["status"], seconds, *text), ""


def checked_notebook(path: Path, locked: dict[str, str]):
    """(the graded notebook at `path`, None), or (None, why it is refused): it must be a
    notebook holding each read-only and test cell with the source the gradebook has."""
    if not _regular_file(path):
        return None, f"no graded {path.name} (or not a plain file)"
    nb, why = findings.read_notebook(path)
    if nb is None:
        return None, f"its graded {path.name} is not one: {why}"
    cells = {}
    for c in nb.cells:
        grade_id = findings.grade_id_of(c)
        if grade_id is not None:
            cells.setdefault(grade_id, []).append(c.source)
    if changed := sorted(g for g, source in locked.items() if cells.get(g) != [source]):
        return None, (
            f"its graded {path.name} does not hold the assignment's cells as released "
            f"({', '.join(changed[:5])}): the task graded another version of the assignment "
            "(run `make release` and submit again), or its output was altered"
        )
    return nb, None


def merge(
    batch: autograde.Batch,
    todo: list[str],
    given: dict[str, object],
    folder: Path,
    states: dict[str, Ended] | None = None,
) -> dict[str, findings.Run]:
    """Read what each task left, check it, record the scores in the gradebook with nbgrader,
    and save each student's outcome as grade_one does. `states`: how Slurm reported each
    student's task as it ended (`wait`), which says why a task left no result."""
    with gradebook.opened(batch.url) as gb:  # the read-only and test cells, hidden tests too
        locked = {
            nb.name: {c.name: c.source for c in nb.source_cells if c.locked}
            for nb in gb.find_assignment(batch.assignment).notebooks
        }
    inbox = folder / "merge" / "submitted"
    runs: dict[str, findings.Run] = {}
    for student in todo:
        out, state = folder / "out" / student, (states or {}).get(student)
        try:
            runs[student] = _take(batch, student, given, locked, out, inbox, state)
        except Exception as exc:  # the grader's own trouble with this output: go on
            runs[student] = findings.Run("failed", detail=f"not merged: {exc}"[:MAX_TEXT])
    scored = [s for s in todo if (inbox / s).is_dir()]
    for student in scored:  # nothing from an earlier grading may stand in for this one
        shutil.rmtree(batch.folder("autograded", student), ignore_errors=True)
    if scored:
        rescore(batch, folder / "merge", inbox)
    for student in scored:
        graded = batch.folder("autograded", student)
        if not all((graded / f"{n}.ipynb").is_file() for n in given):
            runs[student] = findings.Run(
                "failed", runs[student].seconds, "its graded notebook could not be recorded"
            )
    return {s: autograde._save(batch, s, r) for s, r in runs.items()}


def _take(batch, student, given, locked, out: Path, inbox: Path, state: Ended | None):
    """One task's output: its log copied, its outcome read (where there is none, Slurm's
    `state` says why), its graded notebooks checked and put in `inbox` for `rescore` when the
    outcome is ok. Makes sure the student's submission is in the gradebook, with its time handed
    in, as nbgrader does before it runs a notebook."""
    import nbformat

    log = out / "log.txt"
    target = batch.out / "logs" / f"{student}.log"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as f:
        if _regular_file(log):
            with open(log, "rb") as read:
                read.seek(max(0, log.stat().st_size - MAX_LOG_BYTES))
                f.write(read.read(MAX_LOG_BYTES))
        f.write(f"\n[merged from Slurm task output {out}]\n".encode())
    stamp = assemble.timestamp(batch.folder("submitted", student))
    gradebook.record_ungraded(batch.url, batch.assignment, student, [], stamp)
    run, why = read_result(out, student)
    if run is None and state is not None and state.state == TIME_LIMIT:
        limit = autograde.printable(state.time_limit)
        return findings.Run(
            "timeout",
            detail=f"Slurm stopped the task at its time limit ({limit}), before the grader's "
            f"own limit of {batch.timeout} s: give the array more time (--sbatch --time=MINUTES)",
            limit=f"Slurm's time limit {limit}",
        )
    if run is None:
        ended = f" (Slurm's state: {autograde.printable(state.state)})" if state else ""
        return findings.Run("failed", detail=why + ended)
    if run.status != "ok":
        return run
    checked = {n: checked_notebook(out / "autograded" / f"{n}.ipynb", locked[n]) for n in given}
    if refused := [why for nb, why in checked.values() if nb is None]:
        return findings.Run("failed", run.seconds, "; ".join(refused)[:MAX_TEXT])
    place = inbox / student / batch.assignment
    place.mkdir(parents=True)
    for name, (nb, _) in checked.items():
        nbformat.write(nb, place / f"{name}.ipynb")
    if stamp:
        (place / "timestamp.txt").write_text(stamp)
    return run


NO_KERNEL = "course-merge-runs-nothing"  # a kernel that does not exist: nothing can execute


def rescore(batch: autograde.Batch, folder: Path, inbox: Path) -> None:
    """`nbgrader autograde` over the checked notebooks in `inbox`, never running them: the
    nbgrader_config.py written in `folder`, its working directory, which nbgrader reads after the
    course's, leaves out the execution and sanitizes nothing (CheckCellMetadata alone), and the
    kernel it would start does not exist."""
    from traitlets.config.loader import PyFileConfigLoader

    course = PyFileConfigLoader("nbgrader_config.py", path=str(build.CONFIG_DIR)).load_config()
    after = [p for p in course.Autograde.autograde_preprocessors if not p.endswith("Execute")]
    (folder / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        'c.Autograde.sanitize_preprocessors = ["nbgrader.preprocessors.CheckCellMetadata"]\n'
        f"c.Autograde.autograde_preprocessors = {json.dumps(after)}\n"
    )
    inboxed, kernel = (
        f"--CourseDirectory.submitted_directory={inbox}",
        f"--Execute.kernel_name={NO_KERNEL}",
    )
    args = autograde.nbgrader_args(batch, "autograde", batch.assignment, "--force", inboxed, kernel)
    command = nbgrader_main.command(*args)
    env = autograde.environment(batch)
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    (folder / "merge.log").write_text(done.stdout + done.stderr)


# -- a task of the array -------------------------------------------------------------------


def _stopped(signum, frame) -> None:
    """SIGTERM, which Slurm sends before its SIGKILL: leave through every `finally` in time."""
    raise SystemExit(128 + signum)


def task(folder: Path, index: int) -> None:
    """Grade the student of task `index` in a course directory of its own, work/<index>/ of the
    job folder (the module's docstring says why there), removed as the task ends; leave its
    outcome, log and graded notebooks in out/<student>/."""
    signal.signal(signal.SIGTERM, _stopped)
    job = json.loads((folder / "job.json").read_text())
    student = job["students"][index]
    out = folder / "out" / student
    out.mkdir(parents=True, exist_ok=True)
    work = folder / "work" / str(index)
    shutil.rmtree(work, ignore_errors=True)  # an earlier run of this task (Slurm requeued it)
    try:
        root = work / "course"
        shutil.copytree(folder / "course", root)
        batch = autograde.Batch(
            **{name: job[name] for name in JOB_FIELDS}, root=root, out=work / "grading"
        )
        shutil.copytree(folder / "inbox" / student, batch.folder("submitted", student))
        try:
            run = _grade(batch, student)
        except Exception as exc:  # the task's own trouble: said in the result
            run = findings.Run("failed", detail=f"not graded in the Slurm task: {exc}")
        graded = batch.folder("autograded", student)
        for path in graded.glob("*.ipynb") if graded.is_dir() else []:
            (out / "autograded").mkdir(exist_ok=True)
            shutil.copy(path, out / "autograded" / path.name)
        log = batch.out / "logs" / f"{student}.log"
        if log.is_file():
            shutil.copy(log, out / "log.txt")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (out / RESULT).write_text(json.dumps({"student": student, "run": asdict(run)}))


def _grade(batch: autograde.Batch, student: str) -> findings.Run:
    if batch.jailed:
        jail.require()
    gpus = devices.visible(devices.detect(), os.environ) if batch.mode == "gpu" else []
    if batch.mode == "gpu" and not gpus:
        return findings.Run(
            "failed", detail="no GPU in this Slurm task: ask for one (--gres=gpu:1)"
        )
    with devices.Pool(gpus[:1]).lease() as gpu:
        return autograde.grade_one(batch, student, autograde.released(batch), gpu)


if __name__ == "__main__":
    task(Path(sys.argv[1]), int(os.environ["SLURM_ARRAY_TASK_ID"]))
