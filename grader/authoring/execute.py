"""Execute solution notebooks with papermill (the CI's and the GPU runner's path): build the
source notebooks, run each with its parameters under a per-cell and a whole-run time limit, and
check what its graded cells show (the one check the test suite and the runner share)."""

from __future__ import annotations

import ast
import functools
import logging
import math
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.authoring import build, kernel_connection

# Wall time one solution notebook may take with its default parameters: interpreter mode on a
# 2-core CPU, or one GPU (COURSE_DESIGN: ~90 s and ~2 minutes).
BUDGET_SECONDS = {"interpreter": 90.0, "gpu": 120.0}


@dataclass(frozen=True)
class Grades:
    """What an executed notebook's graded cells show: how many passed, each speed cell's score
    as (score, points), and every problem found, one sentence each."""

    passed: int
    total: int
    speed: dict[str, tuple[float | None, float]] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    name: str
    seconds: float
    output: Path
    error: str | None = None
    grades: Grades | None = None
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None and not self.problems


def parse_value(text: str):
    """A papermill parameter from the command line: a Python literal, else the string itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _speed_score(cell) -> float | None:
    """The number a speed cell ends with, its score."""
    results = [o for o in cell.outputs if o.output_type == "execute_result"]
    try:
        return float(results[-1].data["text/plain"])
    except (IndexError, KeyError, ValueError):
        return None


def read_grades(nb, *, grades_speed: bool) -> Grades:
    """Check every graded cell of an executed notebook: it ran, shows no error, wrote nothing to
    stderr (nbgrader scores such a cell 0), and, for a speed cell, ends with its score: full
    points where speed is graded (`grades_speed`), 0 everywhere else."""
    passed = total = not_run = 0
    speed: dict[str, tuple[float | None, float]] = {}
    problems: list[str] = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        total += 1
        grade_id, points = meta.get("grade_id", cell.get("id")), float(meta.get("points", 0))
        if cell.get("execution_count") is None:
            not_run += 1
            if grade_id.startswith("speed-"):
                speed[grade_id] = (None, points)
            continue
        found = []
        for out in cell.outputs:
            if out.output_type == "error":
                found.append(f"{grade_id} failed: {out.get('ename')}: {out.get('evalue')}")
            elif out.output_type == "stream" and out.name == "stderr":
                found.append(f"{grade_id} wrote to stderr, which nbgrader scores 0:\n{out.text}")
        if grade_id.startswith("speed-"):
            score = _speed_score(cell)
            speed[grade_id] = (score, points)
            want = points if grades_speed else 0.0
            printed = "".join(o.get("text", "") for o in cell.outputs)
            if score is None and not found:
                found.append(f"{grade_id} must end with its score (a number):\n{printed}")
            elif score is not None and score != want:
                where = "on a GPU that grades speed" if grades_speed else "where it is not graded"
                found.append(
                    f"{grade_id} scored {score:g} of {points:g} {where} (want {want:g}):\n{printed}"
                )
        passed += not found
        problems += found
    if not_run:
        problems.append(f"{not_run} of {total} graded cells did not run")
    return Grades(passed, total, speed, tuple(problems))


def budget_for(dev) -> float:
    """The per-notebook time budget on `dev` (a grader.runtime.device.Device)."""
    return BUDGET_SECONDS[dev.mode]


def assess(outcome: Outcome, *, grades_speed: bool, budget: float | None) -> Outcome:
    """The outcome with its graded cells read and checked, and its time against `budget`."""
    import nbformat

    grades = None
    if outcome.output.exists():
        grades = read_grades(nbformat.read(outcome.output, as_version=4), grades_speed=grades_speed)
    problems = grades.problems if grades else ()
    if budget and outcome.seconds > budget:
        problems += (f"took {outcome.seconds:.0f} s, over its budget of {budget:.0f} s",)
    return replace(outcome, grades=grades, problems=problems)


class _Prefixed(logging.Handler):
    """Writes papermill's log (cell starts and cell output) to stdout, each line prefixed with
    the notebook's name, so that a job log shows where a run is."""

    def __init__(self, name: str):
        super().__init__(logging.INFO)
        self.name_prefix = name

    def emit(self, record):
        lines = record.getMessage().rstrip("\n").splitlines() or [""]
        sys.stdout.write("".join(f"{self.name_prefix} | {line}\n" for line in lines))
        sys.stdout.flush()


def run_notebook(
    source_ipynb: Path,
    output: Path,
    parameters: dict | None = None,
    *,
    cell_timeout: float = 600,
    deadline: float | None = None,
    stream: bool = False,
) -> Outcome:
    """Run one notebook in its own folder; the executed copy is written even when a cell fails.

    A cell may run `cell_timeout` seconds, and none past `deadline` (a time.monotonic() value).
    With `stream`, cell output is printed as it arrives. Whatever goes wrong (a failing cell, a
    timeout, a dead kernel) becomes the outcome's `error`; the caller goes on with the next.
    """
    import papermill
    from traitlets.config import Config

    by_deadline = False  # whether the running cell's limit is what is left of the whole run's

    def timeout_for(cell) -> int:
        nonlocal by_deadline
        left = None if deadline is None else deadline - time.monotonic()
        by_deadline = left is not None and left < cell_timeout
        # nbclient reads 0 and negative numbers as "no limit"
        return max(1, math.ceil(left if by_deadline else cell_timeout))

    name = source_ipynb.parent.name
    output.parent.mkdir(parents=True, exist_ok=True)
    output.unlink(missing_ok=True)  # an earlier run's copy must not stand in for this one
    logger = logging.getLogger("papermill")
    handler = _Prefixed(name)
    if stream:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    start = time.perf_counter()
    error = None
    try:
        with tempfile.TemporaryDirectory(prefix="kernel-") as sockets:
            papermill.execute_notebook(
                str(source_ipynb),
                str(output.resolve()),  # papermill saves from inside the notebook's folder
                parameters=parameters,
                kernel_name="python3",
                cwd=str(source_ipynb.parent),
                progress_bar=False,
                log_output=stream,
                timeout_func=timeout_for,
                config=Config(kernel_connection.config(Path(sockets))),
            )
    except papermill.PapermillExecutionError as exc:
        error = f"cell {exc.exec_count}: {exc.ename}: {exc.evalue}"
    except TimeoutError as exc:  # nbclient's CellTimeoutError, or the kernel not starting
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        error = f"timed out: {first}" + (" (the whole run's time limit)" if by_deadline else "")
    except Exception as exc:  # a dead kernel or a missing kernelspec must not end the batch
        error = f"{type(exc).__name__}: {exc}"
    finally:
        logger.removeHandler(handler)
    return Outcome(name, time.perf_counter() - start, output, error)


def _run_one(
    source: Path,
    out_dir: Path,
    parameters: dict | None,
    *,
    cell_timeout: float,
    timeout: float | None,
    deadline: float | None,
    stream: bool,
    grades_speed: bool | None,
    budget: float | None,
) -> Outcome:
    """One notebook of run_notebooks, with its line of the report."""
    name = source.parent.name
    output = out_dir / name / source.name
    if deadline is not None and time.monotonic() >= deadline:
        output.unlink(missing_ok=True)
        return Outcome(
            name, 0.0, output, f"not run: the whole run's limit of {timeout:g} s had passed"
        )
    if stream:
        print(f"== {name}", flush=True)
    outcome = run_notebook(
        source, output, parameters, cell_timeout=cell_timeout, deadline=deadline, stream=stream
    )
    if grades_speed is not None:
        outcome = assess(outcome, grades_speed=grades_speed, budget=budget)
    first = (outcome.error or "".join(outcome.problems[:1])).splitlines()[:1]
    status = "ok" if outcome.ok else f"FAILED {''.join(first)}"
    print(f"{name:24s} {outcome.seconds:7.1f} s  {status}", flush=True)
    return outcome


def run_notebooks(
    sources: list[Path],
    out_dir: Path,
    parameters: dict | None = None,
    *,
    cell_timeout: float = 600,
    timeout: float | None = None,
    stream: bool = False,
    grades_speed: bool | None = None,
    budget: float | None = None,
    jobs: int = 1,
) -> list[Outcome]:
    """Run each notebook (sources[i] is NN_topic/topic.ipynb) into out_dir/NN_topic/, `jobs` at a
    time, all within `timeout` seconds: past it, the rest are reported as not run. When
    `grades_speed` is given, each executed notebook's graded cells are checked (read_grades).
    With more than one job, each notebook runs in a process of its own (papermill changes the
    working directory of the process that runs it), and streamed lines of different notebooks
    interleave, each prefixed with its notebook's name."""
    deadline = None if not timeout else time.monotonic() + timeout
    one = functools.partial(
        _run_one,
        out_dir=Path(out_dir),
        parameters=parameters,
        cell_timeout=cell_timeout,
        timeout=timeout,
        deadline=deadline,  # time.monotonic() is the same clock in every process
        stream=stream,
        grades_speed=grades_speed,
        budget=budget,
    )
    if jobs <= 1:
        return [one(source) for source in sources]
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: no parent's state
    with ProcessPoolExecutor(jobs, mp_context=spawn) as pool:
        return list(pool.map(one, sources))


def run_solutions(
    names: list[str] | None = None,
    *,
    out_dir: str | Path = "build/executed",
    parameters: Iterable[tuple[str, str]] = (),
    **options,
) -> list[Outcome]:
    """Build and execute the chosen solution notebooks (all by default, in course order), with
    the command line's papermill `parameters`; `options` go to run_notebooks. Each run builds
    into a folder of its own, removed afterwards, so that two runs from one checkout (one per
    GPU, say) never rebuild the folder the other's notebooks run in."""
    params = {name: parse_value(value) for name, value in parameters}
    with tempfile.TemporaryDirectory(prefix="course-run-") as folder:
        found = build.build_sources(Path(folder))
        unknown = set(names or ()) - {a.name for a in found}
        if unknown:
            known = ", ".join(a.name for a in found)
            raise SystemExit(f"no such notebook: {', '.join(sorted(unknown))} (known: {known})")
        chosen = [a for a in found if not names or a.name in names]
        sources = [Path(folder) / "source" / a.name / a.notebook_name for a in chosen]
        return run_notebooks(sources, Path(out_dir), params, **options)
