"""`python -m grader ...`: doctor, build, lab, run (execute notebooks with papermill)."""

from __future__ import annotations

import argparse
import os
import sys

from grader import __version__


def _doctor(args: argparse.Namespace) -> int:
    from grader import device, doctor

    env = dict(os.environ)  # as the user set it, before setup() adjusts Triton's variables
    device.setup(args.mode)
    text, found = doctor.report(env)
    print(text)
    return 1 if (args.strict and any(f.level == "problem" for f in found)) else 0


def _build(args: argparse.Namespace) -> int:
    from grader import build

    if args.check:
        problems = build.check()
        if problems:
            print("course/ is stale: run `make release` and commit the result.")
            print("\n".join(f"  {p}" for p in problems))
            return 1
        print("course/ matches solutions/")
        return 0
    names = build.build()
    print(f"built {len(names)} notebooks into course/: {', '.join(names)}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from grader import execute

    failures = execute.run_solutions(args.notebooks, out_dir=args.out, parameters=args.parameters)
    return 1 if failures else 0


def lab_command(extra: list[str], instructor: bool = False) -> list[str]:
    """The JupyterLab command line: course/ for students; for instructors the repository, which
    holds nbgrader's course directory build/ (the formgrader refuses one outside the served
    folder). A folder named in `extra` (--notebook-dir, --ServerApp.root_dir) replaces either."""
    from grader import build

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

    from grader import build

    # nbgrader's Validate button reads the course's config, as the grader's own runs do
    command = lab_command(args.extra, args.instructor)
    return subprocess.call(command, env=build.nbgrader_env())


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
    r.set_defaults(func=_run)
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
