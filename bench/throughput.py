"""Grading throughput on one GPU and on several: one synthetic class, graded once per GPU set by
the batch itself (grader.grading.autograde, as `make autograde` grades: one student per GPU at a
time, each in its sandbox), with the same scores required of every run.

    python bench/throughput.py [--assignment 07_flash_attention] [--students 16]
                               [--gpus 0 0,1] [--out build/report] [--append]

The class mixes the reference solution, slow-but-correct kernels (tests/known_wrong's SLOW),
wrong ones (its WRONG) and kernels whose process dies, in a fixed order. Each run grades it in a
course directory of its own. Writes throughput.json and throughput.md into --out after each run:
the wall time of each run and the students per hour, beside the gain the class allows (its
students' times in the first run handed out to the first GPU free, as grading hands them out: a
small class ends on one GPU alone); how the time of each step (the kernel's start, each cell,
its stop) changed from the first run to each later one, summed over the class; each student's
total in every run; each
speed cell's measured / needed in every run beside the noise, which is the spread of that figure
over the reference students of the first run (identical submissions); and the projection of a
class of 300 of this notebook onto 8 GPUs. --append continues the runs already in --out's
throughput.json (the same class, assignment, device and versions, else an error), so that runs
too long for one job can be split over several. Exit status 1 when runs disagree on a score or a
student was not graded.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import math
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed `grader`
    sys.path.insert(0, str(ROOT))

from bench.grading_cost import answered, cell_labels, timings, versions  # noqa: E402
from grader.runtime import device  # noqa: E402

DEFAULT_OUT = ROOT / "build" / "report"
CRASH = "import os\nos._exit(1)  # the kernel's process dies\n"
PROJECTED_STUDENTS, PROJECTED_GPUS = 300, 8
CHANGED = 6  # steps named whose time changed most from the first run to a later one


@dataclass
class Student:
    name: str
    kind: str  # reference, slow, wrong or crash
    variant: str  # which slow or wrong source, or ""


@dataclass
class Run:
    gpus: str  # as --gpus takes them
    seconds: float  # the whole batch: registration, grading, feedback, report
    grading_seconds: float  # the grading step alone
    totals: dict[str, float] = field(default_factory=dict)
    speed: dict[str, dict[str, float | None]] = field(default_factory=dict)  # measured / needed
    student_seconds: dict[str, float] = field(default_factory=dict)  # each student's own run
    # {student: {speed cell: the end of its output}} where a cell measured nothing
    unmeasured: dict[str, dict[str, str]] = field(default_factory=dict)
    # {student: {step: seconds}}: the kernel's start and stop, and each code cell by its label
    steps: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def per_hour(self) -> float:
        return 3600 * len(self.totals) / self.grading_seconds


def synthetic_class(assignment: str, size: int) -> list[tuple[Student, dict[str, str]]]:
    """(student, {grade_id: source}) in a fixed mix: 3/8 reference, 1/4 slow, 1/4 wrong, 1/8
    crashing, each kind cycling through its variants."""
    module = importlib.import_module(f"tests.known_wrong.nb{assignment}")
    slow = [(g, n, s) for g, v in getattr(module, "SLOW", {}).items() for n, s in v.items()]
    wrong = [(g, n, s) for g, v in module.WRONG.items() for n, s in v.items()]
    wrong = [w for w in wrong if isinstance(w[2], str)]  # an exercise cell's source alone
    pattern = ["reference", "slow", "wrong", "reference", "crash", "slow", "wrong", "reference"]
    made, counters = [], {"slow": 0, "wrong": 0}
    for i in range(size):
        kind = pattern[i % len(pattern)]
        if kind == "slow" and not slow:
            kind = "reference"
        if kind in counters:
            pool = slow if kind == "slow" else wrong
            grade_id, variant, source = pool[counters[kind] % len(pool)]
            counters[kind] += 1
            made.append((Student(f"s{i:02d}-{kind}", kind, variant), {grade_id: source}))
        else:
            made.append((Student(f"s{i:02d}-{kind}", kind, ""), {}))
    return made


def write_inbox(inbox: Path, assignment: str, root: Path, members) -> None:
    """inbox/<student>/<assignment>/<notebook>.ipynb: the reference with each member's cells."""
    import nbformat

    (path,) = (root / "release" / assignment).glob("*.ipynb")
    release = nbformat.read(path, as_version=4)
    source = nbformat.read(root / "source" / assignment / path.name, as_version=4)
    reference = answered(release, source)
    for student, sources in members:
        nb = copy.deepcopy(reference)
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in sources:
                cell.source = sources[grade_id]
        if student.kind == "crash":
            first = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
            first.source = CRASH + first.source
        folder = inbox / student.name / assignment
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / path.name)


def grade(assignment: str, gpus: str, root: Path, inbox: Path, dev) -> Run:
    """One batch of the class on `gpus`, in the course directory `root`."""
    from grader.grading import autograde, cost, devices

    chosen = devices.select(gpus, devices.detect())
    batch = autograde.Batch(assignment, dev.mode, root=root, jobs=len(chosen), gpus=chosen)
    grading = {}
    timed_grade = autograde.grade_here

    def grade_step(batch_, todo, given):
        started = time.perf_counter()
        try:
            runs = timed_grade(batch_, todo, given)
            grading["students"] = {student: r.seconds for student, r in runs.items()}
            return runs
        finally:
            grading["seconds"] = time.perf_counter() - started

    log = root / "timings.jsonl"
    started = time.perf_counter()
    with timings(log):
        results, _ = autograde.autograde(
            batch, submissions=inbox, device=dev.describe(), grades_speed=dev.grades_speed,
            grade=grade_step,
        )  # fmt: skip
    run = Run(gpus, time.perf_counter() - started, grading["seconds"],
              student_seconds=grading["students"],
              steps=steps(root, assignment, cost.read(log)))  # fmt: skip
    for row in results.students:
        run.totals[row.student] = row.total
        run.speed[row.student] = {s.grade_id: s.relative for s in row.speed}
        silent = [s.grade_id for s in row.speed if s.relative is None]
        if silent:
            run.unmeasured[row.student] = said(root / "autograded" / row.student, silent)
    return run


def steps(root: Path, assignment: str, times) -> dict[str, dict[str, float]]:
    """{student: {step: seconds}} from the records of a batch's Execute runs (grader.grading.cost),
    each code cell named by its label in the release (bench.grading_cost.cell_labels)."""
    names = cell_labels(root / "release" / assignment)
    found: dict[str, dict[str, float]] = {}
    for t in times:
        mine = found.setdefault(t.student, {})
        for step, seconds in [("kernel start", t.kernel_start), ("kernel stop", t.kernel_stop),
                              *zip(names.get(t.notebook, []), t.cells, strict=False)]:  # fmt: skip
            mine[step] = round(mine.get(step, 0.0) + seconds, 3)
    return found


def changed(first: Run, later: Run) -> list[list]:
    """[step, seconds later minus first] of the CHANGED steps whose time changed most from
    `first` to `later`, summed over the students both ran, by size: where grading students side
    by side costs each of them time (or a warmer host saves it)."""
    both = [s for s in later.steps if s in first.steps]
    sums: dict[str, float] = {}
    for student in both:
        for step, seconds in later.steps[student].items():
            sums[step] = sums.get(step, 0.0) + seconds - first.steps[student].get(step, 0.0)
    ranked = sorted(sums.items(), key=lambda kv: -abs(kv[1]))[:CHANGED]
    return [[step, round(seconds, 2)] for step, seconds in ranked]


def said(folder: Path, grade_ids: list[str], keep: int = 400) -> dict[str, str]:
    """{grade id: the last `keep` characters its cell printed} in the graded notebooks in
    `folder`: why a speed cell measured nothing (wrong output, a flag, a failure)."""
    import nbformat

    found = {}
    for path in folder.glob("*/*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in grade_ids:
                text = "".join(
                    o.get("text", "") or o.get("evalue", "") for o in cell.get("outputs", [])
                )
                found[grade_id] = text[-keep:]
    return found


def allowed(seconds: dict[str, float], gpus: int) -> float | None:
    """The gain over one GPU that a class whose students take `seconds` each allows on `gpus`:
    their sum over the batch's makespan when each student goes, in grading's order (by name), to
    the first GPU free, as grade_here hands them out. A small class ends on one GPU alone while
    the others wait; this is that cost, apart from any the grader adds. None: no times."""
    if not seconds:
        return None
    free = [0.0] * gpus
    for student in sorted(seconds):
        k = free.index(min(free))
        free[k] += seconds[student]
    return sum(seconds.values()) / max(free)


def noise(first: Run, members) -> dict[str, float]:
    """{speed cell: max / min of measured / needed over the reference students of `first`}."""
    references = [s.name for s, _ in members if s.kind == "reference"]
    spread = {}
    for cell in {c for s in references for c in first.speed.get(s, {})}:
        values = [first.speed[s].get(cell) for s in references]
        values = [v for v in values if v]
        if len(values) >= 2:
            spread[cell] = max(values) / min(values)
    return spread


def summary(assignment, members, runs: list[Run], machine) -> dict:
    first = runs[0]
    spread = noise(first, members)
    disagreements, speed_rows = [], []
    for student, _ in members:
        totals = [r.totals.get(student.name) for r in runs]
        if None in totals or len(set(totals)) != 1:
            disagreements.append({"student": student.name, "totals": totals})
        for cell, value in first.speed.get(student.name, {}).items():
            others = [r.speed.get(student.name, {}).get(cell) for r in runs[1:]]
            if value and others and all(others):
                worst = max(abs(math.log(o / value)) for o in others)
                # None: no two reference students measured this cell, so no noise to compare with
                within = worst <= math.log(spread[cell]) if cell in spread else None
                speed_rows.append(
                    {"student": student.name, "cell": cell, "relative": [value, *others],
                     "within_noise": within}
                )  # fmt: skip
    one = first.grading_seconds / len(first.totals)
    gains = [first.grading_seconds / r.grading_seconds for r in runs]  # the first's: 1
    widest = max(range(1, len(runs)), key=lambda k: len(runs[k].gpus.split(",")), default=0)
    efficiency = gains[widest] / len(runs[widest].gpus.split(","))
    hours = one * PROJECTED_STUDENTS / (PROJECTED_GPUS * efficiency) / 3600
    return {
        "assignment": assignment,
        "machine": machine,
        "class": [asdict(s) for s, _ in members],
        "runs": [asdict(r) | {"per_hour": r.per_hour} for r in runs],
        "gain": gains,
        "allowed": [allowed(first.student_seconds, len(r.gpus.split(","))) for r in runs],
        "changed": {r.gpus: changed(first, r) for r in runs[1:] if first.steps and r.steps},
        "noise": spread,
        "speed": speed_rows,
        "disagreements": disagreements,
        "projection": {
            "students": PROJECTED_STUDENTS,
            "gpus": PROJECTED_GPUS,
            "seconds_per_student_one_gpu": one,
            "efficiency_per_gpu": efficiency,
            "hours": hours,
        },  # fmt: skip
    }


def markdown(s: dict) -> str:
    lines = [
        f"# Grading throughput: {s['assignment']}, {len(s['class'])} students",
        "",
        f"Device: {s['machine']['device']}. "
        + ", ".join(f"{k} {v}" for k, v in s["machine"]["versions"].items())
        + ".",
        "",
        "| GPUs | batch s | grading s | students per hour | gain over the first | gain the class "
        "allows |",
        "|---|---|---|---|---|---|",
    ]
    for r, gain, bound in zip(s["runs"], s["gain"], s["allowed"], strict=True):
        lines.append(
            f"| {r['gpus']} | {r['seconds']:.1f} | {r['grading_seconds']:.1f} | "
            f"{r['per_hour']:.1f} | {gain:.2f}x | " + (f"{bound:.2f}x |" if bound else "- |")
        )
    kinds = {}
    for c in s["class"]:
        kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
    lines += ["", "Class: " + ", ".join(f"{n} {k}" for k, n in kinds.items()) + "."]
    lines += [
        "",
        "The gain the class allows: each student's time in the first run, handed in grading's "
        "order to the first GPU free; the last students leave GPUs idle in a small class.",
    ]
    for gpus, steps_ in s.get("changed", {}).items():
        lines += [
            "",
            f"How the steps' time changed from the first run to the run on GPUs {gpus}, summed "
            "over the class: " + ", ".join(f"`{n}` {t:+.1f} s" for n, t in steps_),
        ]
    lines += ["", "## Scores", "", "| student | " + " | ".join(r["gpus"] for r in s["runs"]) + " |"]
    lines.append("|---|" + "---|" * len(s["runs"]))
    for c in s["class"]:
        totals = [r["totals"].get(c["name"]) for r in s["runs"]]
        label = c["name"] + (f" ({c['variant']})" if c["variant"] else "")
        lines.append(
            f"| {label} | " + " | ".join(f"{t:g}" if t is not None else "-" for t in totals) + " |"
        )
    n = len(s["disagreements"])
    verdict = f"scores differ for {n} of {len(s['class'])} students" if n else "every student"
    lines += ["", f"The same score in every run: {verdict}.", "", "## Speed: measured / needed", ""]
    spread = ", ".join(f"{c} x{v:.3f}" for c, v in s["noise"].items()) or "none measured"
    lines.append(f"Noise: {spread} (max / min over the reference students of the first run).")
    lines += ["", "| student | cell | per run | within noise |", "|---|---|---|---|"]
    for row in s["speed"]:
        values = " / ".join(f"{v:.3f}" for v in row["relative"])
        within = {True: "yes", False: "**no**", None: "no estimate"}[row["within_noise"]]
        lines.append(f"| {row['student']} | {row['cell']} | {values} | {within} |")
    silent = [
        (r["gpus"], student, cell, text)
        for r in s["runs"]
        for student, cells in r.get("unmeasured", {}).items()
        for cell, text in cells.items()
    ]
    if silent:
        lines += ["", "## Speed cells that measured nothing, and the end of what they printed", ""]
        lines += [f"- GPUs {g}, {st}, `{c}`: {' '.join(t.split())!r}" for g, st, c, t in silent]
    p = s["projection"]
    lines += [
        "",
        f"Projection: {p['students']} students of this notebook on {p['gpus']} GPUs, at "
        f"{p['seconds_per_student_one_gpu']:.1f} s per student on one GPU and "
        f"{p['efficiency_per_gpu']:.2f} of it per added GPU: {p['hours']:.2f} h.",
    ]
    return "\n".join(lines) + "\n"


def earlier(path: Path, assignment: str, members, machine, error) -> list[Run]:
    """The runs of an earlier invocation on the same class, assignment and machine."""
    if not path.is_file():
        error(f"--append: no earlier runs in {path}")
    before = json.loads(path.read_text())
    same = (
        before["assignment"] == assignment
        and before["class"] == [asdict(s) for s, _ in members]
        and before["machine"] == machine
    )
    if not same:
        error(f"--append: {path} holds another class, assignment, device or versions")
    fields = {f for f in Run.__dataclass_fields__}
    return [Run(**{k: v for k, v in r.items() if k in fields}) for r in before["runs"]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--assignment", default="07_flash_attention")
    p.add_argument("--students", type=int, default=16)
    p.add_argument("--gpus", nargs="+", default=["0", "0,1"], help="one GPU set per run")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--append", action="store_true", help="continue the runs in --out")
    args = p.parse_args(argv)
    dev = device.setup()
    if not dev.is_gpu:
        p.error("the batch grades one student per GPU: run it on a GPU machine")
    from grader.grading import autograde, jail

    autograde.require_nbgrader()
    jail.require()
    members = synthetic_class(args.assignment, args.students)
    work = Path(tempfile.mkdtemp(prefix="throughput-"))
    machine = {"device": dev.describe(), "versions": versions()}
    runs = earlier(args.out / "throughput.json", args.assignment, members, machine, p.error) if (
        args.append
    ) else []  # fmt: skip
    for k, gpus in enumerate(args.gpus, start=len(runs)):
        root = work / f"course-{k}"
        inbox = work / f"inbox-{k}"
        autograde.prepare(autograde.Batch(args.assignment, dev.mode, root=root))
        write_inbox(inbox, args.assignment, root, members)
        print(f"grading {len(members)} students of {args.assignment} on GPUs {gpus}", flush=True)
        runs.append(grade(args.assignment, gpus, root, inbox, dev))
        print(f"  {runs[-1].grading_seconds:.1f} s of grading", flush=True)
        result = summary(args.assignment, members, runs, machine)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "throughput.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / "throughput.md").write_text(markdown(result))
    print((args.out / "throughput.md").read_text())
    lost = [s.name for s, _ in members if any(s.name not in r.totals for r in runs)]
    return 1 if result["disagreements"] or lost else 0


if __name__ == "__main__":
    sys.exit(main())
