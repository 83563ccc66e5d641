"""The course's recorded GPU measurements, collected: `make recordings` runs the solution notebooks
on a GPU with COURSE_RECORD set (grader.runtime.recorded writes one record per measurement cell
and speed cell), then `collect` checks the records and writes one JSON file per notebook into the
runtime's recordings folder, which ships with the course and the student kit. Nothing in those
files is typed by hand.

`declared` finds the measurement cells of a notebook's source: each cell that times on a GPU
must name a key with `recorded.cell("NN_topic/name")` and show it with `recorded.show(...)` where
it cannot time (tests/test_recordings.py holds every notebook to it, and `collect` refuses a run
that left one of them unrecorded)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from grader.runtime import recorded

# what makes a cell one that measures on a GPU
MEASURES = re.compile(
    r"timing\.bench\(|timing\.host_time\(|perf\.compare\(|measure_ceilings\(|"
    r"max_memory_allocated\(|On a GPU[^\n]*this cell"
)
CELL = re.compile(r'recorded\.cell\("([^"]+)"\)')
SHOW = re.compile(r'recorded\.show\("([^"]+)"\)')
# the environment every record of one notebook must share
SAME = ("mode", "device", "capability", "driver", "cuda", "torch", "triton")


class CollectError(RuntimeError):
    """The records cannot become the course's recordings as they are."""


def code_cells(source: str) -> list[str]:
    """The code cells of a jupytext percent script, without markdown cells."""
    cells = re.split(r"^# %%", source, flags=re.M)[1:]
    return [c for c in cells if not c.startswith(" [markdown]")]


def problems(notebook: str, source: str) -> list[str]:
    """What is wrong with the recording paths of `notebook`'s cells: a cell that measures on a
    GPU without a recorded key, a key without a `show` in the same cell, a key of another
    notebook, a key used twice."""
    found, seen = [], set()
    for cell in code_cells(source):
        if "nbgrader=" in cell.splitlines()[0]:
            continue  # graded cells: speed is recorded by perf.grade
        keys, shown = CELL.findall(cell), set(SHOW.findall(cell))
        first = cell.strip().splitlines()[1] if len(cell.strip().splitlines()) > 1 else cell
        if MEASURES.search(cell) and not keys:
            found.append(f"{notebook}: a cell measures on a GPU but records nothing: {first!r}")
        for key in keys:
            if not key.startswith(f"{notebook}/"):
                found.append(f"{notebook}: the key {key!r} names another notebook")
            if key not in shown:
                found.append(f"{notebook}: {key!r} is recorded but never shown where it cannot run")
            if key in seen:
                found.append(f"{notebook}: the key {key!r} is used twice")
            seen.add(key)
    return found


def declared(source: str) -> list[str]:
    """The keys of the measurement cells of a notebook's source, in order, and of its speed
    cells (the digest of each one's source, which a recording goes stale with)."""
    keys = []
    for cell in code_cells(source):
        keys += CELL.findall(cell)
        header, _, body = cell.partition("\n")  # the `# %%` line's rest; the cell's source
        _, marked, metadata = header.partition("nbgrader=")
        if marked and json.loads(metadata).get("grade_id", "").startswith("speed-"):
            keys.append(recorded.speed_key(body))
    return keys


def read_spool(spool: Path) -> list[dict]:
    path = spool / recorded.SPOOL if spool.is_dir() else spool
    if not path.exists():
        raise CollectError(f"no records in {path}: was the run made with {recorded.RECORD_ENV}?")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def collect(
    spool: Path, into: Path = recorded.RECORDINGS, sources: dict[str, str] | None = None
) -> list[Path]:
    """Write the records of `spool` (a COURSE_RECORD folder) as one recording per notebook into
    `into`, replacing that notebook's earlier recording. Refuses records not taken on a GPU, a
    notebook whose records disagree on the machine or versions, and, where `sources`
    ({notebook: its jupytext source}) is given, a notebook with a declared key left unrecorded.
    Returns the files written."""
    by_notebook: dict[str, list[dict]] = {}
    for record in read_spool(spool):
        by_notebook.setdefault(record["notebook"], []).append(record)
    written = []
    for notebook, records in sorted(by_notebook.items()):
        envs = {tuple(r["environment"].get(k) for k in SAME) for r in records}
        if len(envs) > 1:
            raise CollectError(f"{notebook}: records from different machines or versions: {envs}")
        environment = records[-1]["environment"]
        if environment["mode"] != "gpu":
            raise CollectError(f"{notebook}: recorded in {environment['mode']} mode, not on a GPU")
        cells = {}
        for r in records:  # a cell run twice: its last run counts
            cells[r["key"]] = {k: v for k, v in r.items() if k not in ("notebook", "environment")}
        if sources is not None and notebook in sources:
            missing = [k for k in declared(sources[notebook]) if k not in cells]
            if missing:
                raise CollectError(
                    f"{notebook}: no record of {', '.join(missing)}: was RUN_BENCHMARKS off, or "
                    "did a cell fail?"
                )
        into.mkdir(parents=True, exist_ok=True)
        target = into / f"{notebook}.json"
        body = {"notebook": notebook, "environment": environment, "cells": cells}
        target.write_text(json.dumps(body, indent=1) + "\n")
        written.append(target)
    clashes = _clashing_speed_keys(into)
    if clashes:
        raise CollectError(f"speed cells of different notebooks share a source: {clashes}")
    return written


def _clashing_speed_keys(into: Path) -> list[str]:
    owners: dict[str, list[str]] = {}
    for path in sorted(into.glob("*.json")):
        for key in json.loads(path.read_text())["cells"]:
            if key.startswith(recorded.SPEED_PREFIX):
                owners.setdefault(key, []).append(path.stem)
    return [f"{k} ({', '.join(v)})" for k, v in owners.items() if len(v) > 1]
