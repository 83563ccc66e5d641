"""`python -m grader ...`: doctor, build, diagrams (the committed figures), kit (the student kit),
lab, run (execute notebooks with papermill), autograde (grade a batch of submissions with
nbgrader)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from grader import __version__
from grader.grading import nbgrader_policy


def _doctor(args: argparse.Namespace) -> int:
    from grader.runtime import __main__ as runtime_main

    return runtime_main.main(
        [*(["--mode", args.mode] if args.mode else []), *(["--strict"] if args.strict else [])]
    )


def _checked(problems: list, stale: str, fresh: str) -> int:
    """A --check's report: `stale` and each problem (exit status 1), or `fresh`."""
    print("\n".join([stale, *(f"  {p}" for p in problems)]) if problems else fresh)
    return 1 if problems else 0


def _build(args: argparse.Namespace) -> int:
    from grader.authoring import build

    if args.check:
        stale = "course/ is stale: run `make release` and commit the result."
        return _checked(build.check(), stale, "course/ matches solutions/")
    names = build.build()
    print(f"built {len(names)} notebooks into course/: {', '.join(names)}")
    return 0


def _diagrams(args: argparse.Namespace) -> int:
    from grader.authoring import diagrams

    if args.check:
        stale = (
            "the committed diagrams differ from their code: run `python -m grader diagrams`\n"
            "and commit solutions/*/figures/ (then `make release` for course/)."
        )
        return _checked(
            diagrams.check(), stale, "solutions/*/figures/ match grader/authoring/diagrams/"
        )
    written = diagrams.write()
    print(f"drew {len(written)} diagrams:")
    print("\n".join(f"  {p.relative_to(diagrams.build.ROOT)}" for p in written))
    return 0


def _kit(args: argparse.Namespace) -> int:
    from grader.authoring import kit

    try:
        built = kit.build_kits(args.notebooks, out=args.out, together=args.together)
    except kit.KitError as problem:
        print(f"kit: {problem}", file=sys.stderr)
        return 2
    for one in built:
        print(f"student kit of {', '.join(one.notebooks)}: {one.zip}")
    return 0


def _recordings(args: argparse.Namespace) -> int:
    from grader.authoring import build, recordings
    from grader.runtime import recorded

    sources = {a.name: a.source.read_text() for a in build.assignments()}
    try:
        written = recordings.collect(Path(args.spool), recorded.RECORDINGS, sources)
    except recordings.CollectError as problem:
        print(f"recordings: {problem}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from grader.authoring import execute, run_summary
    from grader.runtime import device, doctor

    dev = device.current()
    budget = execute.budget_for(dev) if args.budget is None else args.budget
    jobs = args.jobs or (1 if dev.is_gpu else os.cpu_count() or 1)
    start = time.perf_counter()
    outcomes = execute.run_solutions(
        args.notebooks,
        out_dir=args.out,
        parameters=args.parameters,
        cell_timeout=args.cell_timeout,
        timeout=args.timeout,
        stream=args.stream,
        grades_speed=dev.grades_speed if args.check else None,
        budget=budget,
        jobs=jobs,
    )
    print()
    print(run_summary.table(outcomes))
    print(f"ran in {time.perf_counter() - start:.1f} s, {jobs} notebook(s) at a time")
    if args.summary:
        versions = {p: doctor.version(p) for p in ("torch", "triton", "papermill")}
        summary = run_summary.as_dict(outcomes, dev.describe(), versions)
        run_summary.write(Path(args.summary), summary)
        print(f"summary: {args.summary}")
    return 0 if all(o.ok for o in outcomes) else 1


def lab_command(extra: list[str], instructor: bool = False) -> list[str]:
    """The JupyterLab command line: course/ for students; for instructors the repository, which
    holds nbgrader's course directory build/ (the formgrader refuses one outside the served
    folder). A folder named in `extra` (--notebook-dir, --ServerApp.root_dir) replaces either."""
    from grader.authoring import build

    named = any(a.split("=")[0] in ("--notebook-dir", "--ServerApp.root_dir") for a in extra)
    folder = build.ROOT if instructor else build.COURSE
    command = [sys.executable, "-m", "jupyterlab"]
    command += [] if named else [f"--notebook-dir={folder}"]
    command += extra
    if os.geteuid() == 0:  # containers and CI machines run as root; JupyterLab refuses silently
        command.append("--allow-root")
    return command


def _lab(args: argparse.Namespace) -> int:
    import subprocess

    from grader.authoring import build

    # nbgrader's Validate button reads the course's config, as the grader's own runs do
    return subprocess.call(lab_command(args.extra, args.instructor), env=build.nbgrader_env())


def _grading_device(args: argparse.Namespace):
    """(mode, description, grades speed, GPUs, students at once) of the batch. Through Slurm the
    tasks' nodes grade: the mode is the one asked for, not this host's."""
    from grader.grading import devices, slurm
    from grader.runtime import device

    if args.slurm:
        slurm.require()
        if args.mode not in ("gpu", "interpreter"):
            raise device.ModeError(
                "--slurm grades on the cluster's nodes: pass --mode gpu or --mode interpreter"
            )
        gpu = args.mode == "gpu"
        triton = "compiled" if gpu else "interpreter"
        where = f"{'GPUs' if gpu else 'CPUs'} of Slurm tasks (Triton {triton})"
        return args.mode, where, gpu, [], 1  # one student per task; --jobs throttles the array
    if args.gpus and args.mode == "interpreter":  # said before setup, which may refuse first
        raise devices.DeviceError("--gpus needs GPU mode; this batch grades in the interpreter")
    dev = device.setup(args.mode)
    if not dev.is_gpu:
        if args.gpus:
            raise devices.DeviceError(
                "--gpus needs GPU mode; torch finds no GPU here, so this batch would grade in the "
                "interpreter"
            )
        return dev.mode, dev.describe(), dev.grades_speed, [], args.jobs or os.cpu_count() or 1
    gpus = devices.select(args.gpus or "all", devices.detect())
    jobs = min(args.jobs or len(gpus), len(gpus))
    if args.jobs and args.jobs > len(gpus):
        print(
            f"note: one student per GPU: {jobs} at a time on {len(gpus)} GPUs, not {args.jobs}",
            file=sys.stderr,
        )
    return dev.mode, dev.describe(), dev.grades_speed, gpus, jobs


def _autograde(args: argparse.Namespace) -> int:
    from grader.grading import autograde, devices, exchange, jail, sandbox, slurm
    from grader.runtime import device

    try:
        autograde.require_nbgrader()
        if args.sandbox == "bwrap" and not args.slurm:  # the tasks check their own nodes
            jail.require()
        mode, described, grades_speed, gpus, jobs = _grading_device(args)
    except (
        autograde.AutogradeError,
        jail.JailError,
        device.ModeError,
        devices.DeviceError,
        slurm.SlurmError,
    ) as problem:
        print(f"autograde: {problem}", file=sys.stderr)
        return 2
    batch = autograde.Batch(
        args.assignment,
        mode,
        root=args.root,
        db_url=args.db,
        out=args.out,
        jobs=jobs,
        cell_timeout=args.cell_timeout or nbgrader_policy.CELL_TIMEOUT,
        speed_cell_timeout=args.speed_cell_timeout or nbgrader_policy.SPEED_CELL_TIMEOUT,
        timeout=args.timeout,
        memory_limit=int(args.memory_limit * sandbox.GIB)
        if args.memory_limit
        else sandbox.default_memory_limit(jobs),
        force=args.force,
        jailed=args.sandbox == "bwrap",
        kernel_cache=args.kernel_cache,
        gpus=gpus,
    )
    grade = None
    if args.slurm:
        options = slurm.Options(shlex.split(args.sbatch or ""), args.slurm_folder, args.jobs)
        grade = slurm.Array(options)
        print(f"grading {args.assignment} through a Slurm job array; outputs in {batch.out}")
    else:
        on = ", ".join(f"GPU {g.index}" for g in gpus) or described
        print(f"grading {args.assignment} on {on}, {jobs} at a time; outputs in {batch.out}")
    if not batch.jailed:
        print(
            "warning: --sandbox none: each student's code runs with the grader's rights (the "
            "course directory, the gradebook, the network); the class report says so",
            file=sys.stderr,
        )
    try:
        inbound = None
        if args.exchange is not None:  # nbgrader reads config from the course directory too
            batch.root.mkdir(parents=True, exist_ok=True)
            inbound = exchange.configured(
                batch.root, Path(args.exchange) if args.exchange else None
            )
        graded, written = autograde.autograde(
            batch,
            submissions=args.submissions,
            regexp=args.regexp,
            duedate=args.duedate,
            device=described,
            grades_speed=grades_speed,
            grade=grade,
            inbound=inbound,
        )
    except (autograde.AutogradeError, slurm.SlurmError) as problem:
        print(f"autograde: {problem}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # grade_all recorded the students in flight as not graded
        print(
            "autograde: interrupted; run the same command again to grade the rest",
            file=sys.stderr,
        )
        return 130
    for what, path in written.items():
        print(f"{what:9s} {path}")
    print(f"feedback  {batch.out / 'feedback'}/<student>/")
    trouble = graded.grader_trouble()
    if trouble:
        print(
            f"autograde: the grader had trouble with {len(trouble)} students ("
            + ", ".join(autograde.printable(s.student) for s in trouble[:10])
            + "): the report's 'Needs a human look' says what; fix it and run the same command "
            "again (exit status 1)",
            file=sys.stderr,
        )
        return 1
    return 0


AUTOGRADE_OUTPUTS = """\
outputs, in --out (default: <root>/grading/<assignment>/, so build/grading/00_setup/):
  grades.csv        one row per student: id, score, max, a column per graded cell, late
                    penalty, the reasons for a human look
  report.md, .html  the class report: score distribution, pass rate per graded cell, speed
                    per speed cell, the submissions that need a human look and why
  *.png             its figures
  feedback/<student>/<notebook>.html   nbgrader's feedback (hidden tests stay hidden)
  logs/<student>.log, runs/<student>.json   each student's nbgrader run and its outcome
  feedback.log      nbgrader generate_feedback's output
  exchange.json     with --exchange: every entry of the exchange's inbound/, its time and what
                    became of it (imported, older, refused: the report lists the refused)
Exit status: 0 all written; 1 graded, but the grader failed at a step for some students (no
feedback page, a grader error: the report says which); 2 not graded; 130 interrupted.
Scores go to nbgrader's gradebook (<root>/gradebook.db, or --db). Grading is resumable: an
unchanged submission that was graded before is not graded again (--force regrades all).
See docs/instructors.md.
"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("doctor", help="device, capability, versions, known-bad combinations")
    d.add_argument("--mode", choices=["auto", "gpu", "interpreter"], default=None)
    d.add_argument("--strict", action="store_true", help="exit 1 when a problem is found")
    d.set_defaults(func=_doctor)

    b = sub.add_parser("build", help="build course/ from solutions/")
    b.add_argument("--check", action="store_true", help="fail when course/ is stale")
    b.set_defaults(func=_build)

    g = sub.add_parser(
        "diagrams", help="draw the committed diagrams into solutions/NN_topic/figures/"
    )
    g.add_argument(
        "--check", action="store_true", help="fail when a committed diagram is missing or stale"
    )
    g.set_defaults(func=_diagrams)

    k = sub.add_parser(
        "kit",
        help="build the student kits (notebooks, runtime, requirements, scripts), one per "
        "assignment, and their zips",
    )
    k.add_argument("notebooks", nargs="*", help="NN_topic names (default: all)")
    k.add_argument(
        "--together",
        action="store_true",
        help="one kit of all the notebooks named, instead of one kit each",
    )
    k.add_argument(
        "--out", type=Path, default=Path("build/student-kit"), help="where (build/student-kit)"
    )
    k.set_defaults(func=_kit)

    lab = sub.add_parser("lab", help="start JupyterLab on course/ (other arguments go to it)")
    lab.add_argument(
        "--instructor",
        action="store_true",
        help="serve the repository instead, so that nbgrader's formgrader finds build/",
    )
    lab.set_defaults(func=_lab)

    r = sub.add_parser("run", help="execute solution notebooks with papermill")
    r.add_argument("notebooks", nargs="*", help="NN_topic names (default: all)")
    r.add_argument("--out", default="build/executed", help="where executed notebooks go")
    r.add_argument(
        "-p",
        "--parameter",
        dest="parameters",
        nargs=2,
        action="append",
        metavar=("NAME", "VALUE"),
        default=[],
        help="papermill parameter",
    )
    r.add_argument(
        "--cell-timeout", type=float, default=600, metavar="S", help="limit per cell (600 s)"
    )
    r.add_argument(
        "--timeout",
        type=float,
        default=0,
        metavar="S",
        help="limit for the whole run; notebooks left at that point are reported as not run "
        "(default: none)",
    )
    r.add_argument(
        "--quiet",
        dest="stream",
        action="store_false",
        help="print one line per notebook, not each cell's output as it arrives",
    )
    r.add_argument(
        "--jobs",
        type=int,
        default=0,
        metavar="N",
        help="notebooks run at a time (default: one on a GPU, whose timings must not share it; "
        "one per CPU core in the interpreter)",
    )
    r.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="only report errors: skip the graded-cell checks (stderr, speed scores: full "
        "points on a GPU that grades speed, 0 elsewhere) and the time budget",
    )
    r.add_argument(
        "--budget",
        type=float,
        metavar="S",
        help="time budget per notebook (default: 120 s on a GPU, 90 s in the interpreter; 0: none)",
    )
    r.add_argument(
        "--summary",
        default="build/report/notebooks.json",
        metavar="PATH",
        help="where the run's summary goes as JSON ('' for nowhere)",
    )
    r.set_defaults(func=_run)

    a = sub.add_parser(
        "autograde",
        help="grade a batch of submissions with nbgrader: feedback, CSV, class report",
        description="Grade every submission of ASSIGNMENT with nbgrader on this machine's device "
        "(compiled on a GPU, Triton's interpreter on a CPU), one sandboxed process per student.",
        epilog=AUTOGRADE_OUTPUTS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a.add_argument("assignment", help="the assignment, e.g. 00_setup")
    given = a.add_mutually_exclusive_group()
    given.add_argument(
        "--submissions",
        type=Path,
        help="a folder <student>/<assignment>/<notebook>.ipynb (nbgrader's submitted/), or an "
        "LMS download (a .zip, or a folder of its files) for `nbgrader zip_collect`; "
        "default: what <root>/submitted/ already holds",
    )
    given.add_argument(
        "--exchange",
        nargs="?",
        const="",
        metavar="ROOT",
        help="import from nbgrader's exchange (in place of `nbgrader collect`): each student's "
        "newest entry in <ROOT>/<course_id>/inbound/ that is hers, with no link, timed by the "
        "file system; ROOT and course_id default to nbgrader's config (Exchange.root, "
        "CourseDirectory.course_id)",
    )
    a.add_argument("--root", type=Path, default=Path("build"), help="course directory (build)")
    a.add_argument("--db", help="gradebook, any SQLAlchemy URL (default: <root>/gradebook.db)")
    a.add_argument("--out", type=Path, help="output folder (default: <root>/grading/<assignment>)")
    a.add_argument("--mode", choices=["auto", "gpu", "interpreter"], default=None)
    a.add_argument(
        "-j",
        "--jobs",
        type=int,
        help="students at once (default: one per GPU on a GPU, one per core on the CPU; "
        "with --slurm, at most this many tasks at once, default no limit)",
    )
    a.add_argument(
        "--gpus",
        metavar="LIST",
        help="the GPUs to grade on, each student holding one alone: 'all' (the default: every "
        "GPU nvidia-smi lists, or those CUDA_VISIBLE_DEVICES names) or indexes or UUIDs, e.g. 0,1",
    )
    a.add_argument(
        "--slurm",
        action="store_true",
        help="grade each student in a task of a Slurm job array (needs --mode), then merge the "
        "results here; the job folder must be on a filesystem the nodes share",
    )
    a.add_argument(
        "--sbatch",
        metavar="OPTIONS",
        help="sbatch options for the array, passed through, quoted (or --sbatch=--qos=x for "
        "one), e.g. "
        '"--partition=gpu --account=cs101 --gres=gpu:h100:1 --time=60" (default time: '
        "--timeout plus 10 minutes; in GPU mode --gres=gpu:1)",
    )
    a.add_argument(
        "--slurm-folder",
        type=Path,
        help="where the job folders go, shared with the nodes (default: <out>/slurm)",
    )
    a.add_argument(
        "--cell-timeout",
        type=int,
        metavar="S",
        help=f"seconds per cell (default {nbgrader_policy.CELL_TIMEOUT})",
    )
    a.add_argument(
        "--speed-cell-timeout",
        type=int,
        metavar="S",
        help="seconds per speed "
        f"cell, at least the cell timeout (default {nbgrader_policy.SPEED_CELL_TIMEOUT})",
    )
    a.add_argument(
        "--timeout",
        type=int,
        metavar="S",
        default=nbgrader_policy.SUBMISSION_TIMEOUT,
        help=f"seconds per whole submission (default {nbgrader_policy.SUBMISSION_TIMEOUT})",
    )
    a.add_argument(
        "--memory-limit",
        type=float,
        metavar="GIB",
        help="memory per submission, "
        "all its processes together (default: 3/4 of the machine's, shared by --jobs, "
        "at most 16)",
    )
    a.add_argument(
        "--duedate",
        help="record the due date first, e.g. '2026-03-01 17:00:00 UTC'; "
        "later submissions are listed as late (no penalty unless configured)",
    )
    a.add_argument(
        "--regexp",
        help="zip_collect's file-name pattern, when the LMS's names do not "
        "match grader/grading/nbgrader_config.py's (named groups student_id and file_id)",
    )
    a.add_argument("--force", action="store_true", help="regrade unchanged submissions too")
    a.add_argument(
        "--sandbox",
        choices=["bwrap", "none"],
        default="bwrap",
        help="where each student's code runs: bwrap, an OS sandbox of its own (bubblewrap, "
        "the default; `apt-get install bubblewrap`), or none, with the grader's own rights "
        "(the class report says so)",
    )
    a.add_argument(
        "--no-kernel-cache",
        dest="kernel_cache",
        action="store_false",
        help="on a GPU, let each student's sandbox compile every kernel itself, instead of "
        "starting from the kernels one run of the release notebooks compiled for the batch "
        "(Slurm's tasks always compile their own)",
    )
    a.set_defaults(func=_autograde)

    rec = sub.add_parser(
        "recordings",
        help="collect a GPU run's recorded measurements (COURSE_RECORD) into the course's files",
    )
    rec.add_argument("spool", help="the folder COURSE_RECORD named during the run")
    rec.set_defaults(func=_recordings)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args, extra = p.parse_known_args(argv)
    if extra and args.command != "lab":
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
