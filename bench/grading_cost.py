"""What grading one student costs, per notebook, on this machine's device, and where the time
goes: the notebook's own work (its cells) against the overhead around it.

    python bench/grading_cost.py [NN_topic ...] [--out build/report] [--sandbox bwrap|none]

For each assignment (default: all), one student whose submission is the reference solution (the
release with every solution cell answered as in the source) is graded the way `make autograde`
grades a batch (grader.grading.autograde: on a GPU the release's kernels compiled once for the
batch, then the sandbox, nbgrader autograde forked from a zygote started beforehand, the feedback,
the class report), each step timed; nbgrader's Execute records the kernel's start and stop and
every cell (grader.grading.cost). `--no-kernel-cache` grades without the batch's kernels. Writes
grading_cost.json and grading_cost.md into --out after each assignment. `make grading-cost` runs
it; `.ci/gpu grading-cost` on a GPU image. Exit status 1 when a grading did not give the reference
solution full marks or left it without feedback.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed `grader`
    sys.path.insert(0, str(ROOT))

from grader.runtime import device  # noqa: E402

DEFAULT_OUT = ROOT / "build" / "report"
STUDENT = "reference"
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
SLOWEST = 6  # cells named in the report, slowest first


@dataclass
class Cost:
    """One assignment's grading of one student, in seconds. `grading` is the student's part
    (sandbox set-up included); registration happens once per assignment, feedback and report
    once per batch."""

    assignment: str
    score: float
    max_score: float  # what this device can award: speed cells only on a GPU that grades speed
    feedback_pages: int
    registration: float  # nbgrader generate_assignment, once per assignment
    kernel_cache: float  # the release notebooks run once to compile the batch's kernels
    kernels: int  # how many kernels that run compiled (0: none, or not asked for)
    grading: float  # grade_one: sandbox set-up, the nbgrader process, recording
    nbgrader_process: float  # the `nbgrader autograde` process, start to exit
    kernel_start: float  # the sandboxed kernel's launch until it answers
    setup_cell: float  # the first code cell: torch, Triton and the runtime imported, device set up
    other_cells: float  # every other code cell: the notebook's own work
    kernel_stop: float
    feedback: float  # nbgrader generate_feedback and the copy of the pages
    report: float  # results read back, CSV, report and figures
    slowest: list = field(default_factory=list)  # [cell's label, seconds] of the slowest cells

    @property
    def sandbox(self) -> float:
        """Around the nbgrader process: the jail prepared and removed, files fingerprinted."""
        return self.grading - self.nbgrader_process

    @property
    def nbgrader_own(self) -> float:
        """The process less its kernel: Python and nbgrader start, sanitizing, conversions, the
        gradebook."""
        executed = self.kernel_start + self.setup_cell + self.other_cells + self.kernel_stop
        return self.nbgrader_process - executed

    @property
    def per_student(self) -> float:
        """What one more student adds: its grading. Registration, feedback (one nbgrader process
        for the batch, then a page per student) and report are the batch's."""
        return self.grading

    @property
    def overhead(self) -> float:
        return self.per_student - self.other_cells


def answered(release, source):
    """The release with every solution cell answered as in the source (markers dropped)."""
    nb = copy.deepcopy(release)
    mine = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    theirs = [c for c in source.cells if c.metadata.get("nbgrader", {}).get("solution")]
    for m, t in zip(mine, theirs, strict=True):
        m.source = "\n".join(
            line for line in t.source.split("\n") if not line.strip().startswith(SOLUTION_MARKERS)
        )
    return nb


@contextmanager
def timed(into: dict[str, float], key: str):
    started = time.perf_counter()
    yield
    into[key] = time.perf_counter() - started


def label(cell) -> str:
    """A code cell's name in the report: its grade id, else its first line of code."""
    if grade_id := cell.metadata.get("nbgrader", {}).get("grade_id"):
        return grade_id
    lines = [x for x in cell.source.splitlines() if x.strip() and not x.lstrip().startswith("#")]
    return lines[0][:60] if lines else "(empty)"


def cell_labels(release: Path) -> dict[str, list[str]]:
    """{notebook: the labels of its code cells, in order} for the notebooks in `release` (an
    assignment's release folder; assembly keeps every cell of the release, in its place)."""
    import nbformat

    return {
        path.stem: [label(c) for c in nbformat.read(path, as_version=4).cells
                    if c.cell_type == "code"]
        for path in release.glob("*.ipynb")
    }  # fmt: skip


def slowest_cells(batch, times) -> list:
    """[label, seconds] of the SLOWEST slowest code cells of the assignment's notebooks."""
    names = cell_labels(batch.folder("release") / batch.assignment)
    found = [
        [name, round(seconds, 2)]
        for t in times
        for name, seconds in zip(names.get(t.notebook, []), t.cells, strict=False)
    ]
    return sorted(found, key=lambda x: -x[1])[:SLOWEST]


@contextmanager
def timings(log: Path):
    """Each notebook nbgrader's Execute runs in the block appends its record to `log`
    (grader.grading.cost), emptied first."""
    from grader.grading import cost

    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    os.environ[cost.VARIABLE] = str(log)
    try:
        yield
    finally:
        del os.environ[cost.VARIABLE]


def reference_submission(batch, inbox: Path) -> Path:
    """inbox/<STUDENT>/<assignment>/<notebook>.ipynb for every notebook of the assignment."""
    import nbformat

    folder = inbox / STUDENT / batch.assignment
    folder.mkdir(parents=True, exist_ok=True)
    for path in sorted((batch.folder("release") / batch.assignment).glob("*.ipynb")):
        release = nbformat.read(path, as_version=4)
        source = nbformat.read(batch.folder("source") / batch.assignment / path.name, as_version=4)
        nbformat.write(answered(release, source), folder / path.name)
    return inbox


def grade(assignment: str, root: Path, dev, jailed: bool, kernel_cache: bool = True) -> Cost:
    """Grade the reference solution of `assignment` in the course directory `root`, timed."""
    from grader.grading import autograde, classreport, cost, devices
    from grader.grading import kernel_cache as kernels

    batch = autograde.Batch(
        assignment, dev.mode, root=root, jailed=jailed, kernel_cache=kernel_cache
    )
    t: dict[str, float] = {}
    with timed(t, "registration"):
        autograde.prepare(batch)
    inbox = reference_submission(batch, root / "inbox" / assignment)
    autograde.import_submissions(batch, inbox, None)
    log = batch.out / "timings.jsonl"
    with timings(log):
        given = autograde.released(batch)
        found = devices.visible(devices.detect(), os.environ) if dev.mode == "gpu" else []
        gpus = devices.Pool(found[:1])
        env = autograde.environment(batch)
        with (
            autograde.forking(batch),
            kernels.seeded(batch, gpus, [STUDENT], env, autograde.KERNEL) as built,
        ):
            batch.zygotes.get()  # started before the clock, as a class's first student does
            with gpus.lease() as gpu, timed(t, "grading"):
                run = autograde.grade_one(batch, STUDENT, given, gpu)
    if run.status != "ok":
        raise RuntimeError(f"{assignment}: grading the reference solution: {run}")
    with timed(t, "feedback"):
        missing = autograde.feedback(batch)
    with timed(t, "report"):
        results = autograde.results(
            batch, {STUDENT: run}, dev.describe(), dev.grades_speed, missing
        )
        classreport.write(results, batch.out)
    times = cost.read(log)
    (row,) = results.students
    return Cost(
        assignment,
        score=row.total,
        max_score=sum(
            v
            for g, v in results.max_scores.items()
            if dev.grades_speed or not g.startswith("speed-")
        ),
        feedback_pages=len(list((batch.out / "feedback" / STUDENT).glob("*.html"))),
        registration=t["registration"],
        kernel_cache=built.seconds if built else 0.0,
        kernels=built.kernels if built else 0,
        grading=t["grading"],
        nbgrader_process=run.seconds,
        kernel_start=sum(n.kernel_start for n in times),
        setup_cell=sum(n.cells[0] for n in times if n.cells),  # torch, Triton, the runtime
        other_cells=sum(sum(n.cells[1:]) for n in times),
        kernel_stop=sum(n.kernel_stop for n in times),
        feedback=t["feedback"],
        report=t["report"],
        slowest=slowest_cells(batch, times),
    )


def versions() -> dict[str, str]:
    import importlib.metadata as metadata

    found = {"python": platform.python_version()}
    for name in ("torch", "triton", "nbgrader", "nbconvert", "nbclient", "ipykernel"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


COLUMNS = (
    ("notebook", lambda c: c.assignment),
    ("score", lambda c: f"{c.score:g}/{c.max_score:g}"),
    ("per student", lambda c: f"{c.per_student:.1f}"),
    ("notebook's cells", lambda c: f"{c.other_cells:.1f}"),
    ("overhead", lambda c: f"{c.overhead:.1f} ({c.overhead / c.per_student:.0%})"),
    ("setup cell", lambda c: f"{c.setup_cell:.1f}"),
    ("kernel start+stop", lambda c: f"{c.kernel_start + c.kernel_stop:.1f}"),
    ("nbgrader's own", lambda c: f"{c.nbgrader_own:.1f}"),
    ("sandbox", lambda c: f"{c.sandbox:.1f}"),
    (
        "per batch: registration, kernels compiled, feedback, report",
        lambda c: (
            f"{c.registration:.1f}, {c.kernel_cache:.1f} ({c.kernels}), {c.feedback:.1f}, "
            f"{c.report:.1f}"
        ),
    ),
)


def markdown(costs: list[Cost], machine: dict) -> str:
    lines = [
        "# The cost of grading one student",
        "",
        f"Device: {machine['device']}. Sandbox: {machine['sandbox']}. The release's kernels "
        f"compiled once for the batch: {'yes' if machine['kernel_cache'] else 'no'}. "
        + ", ".join(f"{k} {v}" for k, v in machine["versions"].items())
        + ".",
        "",
        "Seconds. *per student* = one student's grading (the sandbox, `nbgrader autograde`); "
        "*notebook's cells* = every code cell but the first; *overhead* = the rest: the *setup "
        "cell* (torch, Triton and the runtime imported in a fresh kernel), the kernel's start "
        "and stop, nbgrader's own work (its process: Python, imports, conversions, gradebook), "
        "the sandbox around it. *Per batch*: once for the whole class (the release notebooks run "
        "once to compile the kernels every sandbox starts with, and how many; the feedback's "
        "nbgrader process, then one page per student; here a class of one).",
        "",
        "| " + " | ".join(name for name, _ in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(cell(c) for _, cell in COLUMNS) + " |" for c in costs]
    lines += ["", "The slowest cells, seconds:", ""]
    lines += [
        f"- {c.assignment}: " + ", ".join(f"`{name}` {t:.1f}" for name, t in c.slowest)
        for c in costs
    ]
    return "\n".join(lines) + "\n"


def write(costs: list[Cost], machine: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data = {
        **machine,
        "costs": [
            {
                **asdict(c),
                **{
                    k: getattr(c, k) for k in ("sandbox", "nbgrader_own", "per_student", "overhead")
                },
            }
            for c in costs
        ],
    }
    (out / "grading_cost.json").write_text(json.dumps(data, indent=1))
    (out / "grading_cost.md").write_text(markdown(costs, machine))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("assignments", nargs="*", help="NN_topic ... (default: all)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--sandbox", choices=("bwrap", "none"), default="bwrap")
    p.add_argument("--root", type=Path, help="course directory (default: a temporary one)")
    p.add_argument("--no-kernel-cache", dest="kernel_cache", action="store_false")
    args = p.parse_args(argv)
    dev = device.setup()
    from grader.authoring import build
    from grader.grading import autograde, jail

    autograde.require_nbgrader()
    if args.sandbox == "bwrap":
        jail.require()
    names = args.assignments or [a.name for a in build.assignments()]
    root = args.root or Path(tempfile.mkdtemp(prefix="grading-cost-"))
    machine = {
        "device": dev.describe(),
        "sandbox": args.sandbox,
        "kernel_cache": args.kernel_cache,
        "versions": versions(),
    }
    costs, failed = [], []
    for name in names:
        print(f"grading {name}'s reference solution on {dev.describe()}", flush=True)
        try:
            c = grade(name, root, dev, args.sandbox == "bwrap", args.kernel_cache)
        except Exception as exc:  # one notebook's trouble: the others still run
            print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            failed.append(name)
            continue
        costs.append(c)
        print(f"  {c.per_student:.1f} s per student, {c.other_cells:.1f} s of cells", flush=True)
        if c.score < c.max_score or not c.feedback_pages:
            failed.append(name)
        write(costs, machine, args.out)
    print((args.out / "grading_cost.md").read_text() if costs else "nothing graded")
    if args.root is None:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
