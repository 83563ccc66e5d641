"""Build the course: solutions/NN_topic/topic.py (jupytext percent, nbgrader metadata inline) ->
build/source/NN_topic/topic.ipynb (deterministic cell ids) -> nbgrader generate_assignment ->
course/NN_topic/. The other files of a notebook's folder travel with it, among them the diagrams
of figures/ that its markdown shows (`![alt](figures/stem.svg)`); a link to a figure that is not
there stops the build. `check()` rebuilds in a scratch folder and lists what differs from
course/."""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat

from grader.authoring import nbgrader_main

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"
COURSE = ROOT / "course"
BUILD = ROOT / "build"
CONFIG_DIR = ROOT / "grader" / "grading"  # nbgrader_config.py

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
# What authors may leave out of a cell's nbgrader metadata; the build fills it in.
NBGRADER_DEFAULTS = {
    "solution": {"grade": False, "locked": False, "solution": True, "task": False},
    "tests": {"grade": True, "locked": True, "solution": False, "task": False},
    "readonly": {"grade": False, "locked": True, "solution": False, "task": False},
}
SCHEMA_VERSION = 3
# Every code cell that is not an answer is given: a read-only nbgrader cell (locked, with the
# checksum nbgrader computes for locked cells), so that the student's own hand-in check
# (grader.runtime.handin) can tell given cells, edited or not, from cells the student added. At
# grading only the answer cells come from the submission (grader.grading.assemble).
# The cell tagged `parameters` is one, `parameters-<topic>` (grade ids are unique across the
# course): students may edit it while they work (the build leaves it editable); grading runs the
# release's version, so hidden tests always run at the sizes the course chose.
PARAMETERS_PREFIX = "parameters-"
# A markdown image of a notebook's own figures/ folder: ![alt](figures/stem.svg)
FIGURE_LINK = re.compile(r"!\[[^\]]*\]\((figures/[^)\s]+)\)")


class BuildError(RuntimeError):
    """The solutions cannot be built; the message says which file and why."""


@dataclass(frozen=True)
class Assignment:
    """One notebook of the course: its folder name (NN_topic) and its source file."""

    name: str
    source: Path

    @property
    def notebook_name(self) -> str:
        return self.source.with_suffix(".ipynb").name


def assignments(solutions: Path = SOLUTIONS) -> list[Assignment]:
    """Every solutions/NN_topic/topic.py, in course order."""
    found = []
    for folder in sorted(p for p in solutions.iterdir() if p.is_dir() and p.name[:2].isdigit()):
        source = folder / f"{folder.name.split('_', 1)[-1]}.py"
        if not source.exists():
            raise BuildError(f"{folder}: expected the notebook source {source.name}")
        found.append(Assignment(folder.name, source))
    return found


def _kind(meta: dict) -> str:
    """Which of NBGRADER_DEFAULTS an nbgrader cell is."""
    return "solution" if meta.get("solution") else "tests" if meta.get("grade") else "readonly"


def _nbgrader_metadata(meta: dict, where: str) -> dict:
    meta = dict(meta)
    if "grade_id" not in meta:
        raise BuildError(f"{where}: nbgrader cell without a grade_id")
    full = {**NBGRADER_DEFAULTS[_kind(meta)], **meta, "schema_version": SCHEMA_VERSION}
    if full["grade"] and "points" not in full:
        raise BuildError(f"{where}: graded cell {meta['grade_id']!r} needs points")
    return dict(sorted(full.items()))


def to_notebook(source: Path) -> nbformat.NotebookNode:
    """Read a jupytext percent script into a notebook with deterministic ids and metadata."""
    nb = jupytext.read(source, fmt="py:percent")
    stem = source.stem
    for i, cell in enumerate(nb.cells):
        meta = {}
        if "tags" in cell.metadata:
            meta["tags"] = list(cell.metadata["tags"])
        nbgrader_meta = cell.metadata.get("nbgrader")
        parameters = "parameters" in meta.get("tags", [])
        if parameters and nbgrader_meta is None:
            nbgrader_meta = {"grade_id": PARAMETERS_PREFIX + stem}  # restored before grading
        elif cell.cell_type == "code" and nbgrader_meta is None:
            nbgrader_meta = {"grade_id": f"{stem}-{i:03d}"}  # given code: read-only, checksummed
        if nbgrader_meta is not None:
            meta["nbgrader"] = _nbgrader_metadata(nbgrader_meta, f"{source}: cell {i}")
            if _kind(meta["nbgrader"]) == "readonly":
                meta["deletable"] = False
                if not parameters:  # the parameters stay editable while students work
                    meta["editable"] = False
        cell.metadata = meta
        cell.id = meta.get("nbgrader", {}).get("grade_id") or f"{stem}-{i:03d}"
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nb.metadata = nbformat.NotebookNode(kernelspec=KERNELSPEC, language_info={"name": "python"})
    nb.nbformat, nb.nbformat_minor = 4, 5
    nbformat.validate(nb)
    return nb


def figure_links(nb: nbformat.NotebookNode) -> list[str]:
    """The figures/ paths that a notebook's markdown shows, in order."""
    return [
        link
        for cell in nb.cells
        if cell.cell_type == "markdown"
        for link in FIGURE_LINK.findall(cell.source)
    ]


def broken_figure_links(solutions: Path = SOLUTIONS) -> list[str]:
    """Every figure link of a notebook whose file its folder lacks, as `notebook: link`."""
    return [
        f"{a.source.relative_to(solutions.parent)}: {link}"
        for a in assignments(solutions)
        for link in figure_links(to_notebook(a.source))
        if not (a.source.parent / link).is_file()
    ]


def write_notebook(nb: nbformat.NotebookNode, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")


def build_sources(build: Path, solutions: Path = SOLUTIONS) -> list[Assignment]:
    """Write build/source/NN_topic/ for every assignment; other files are copied as they are."""
    found = assignments(solutions)
    broken = broken_figure_links(solutions)
    if broken:
        raise BuildError(
            "a notebook shows a figure that is not there (draw it with `python -m grader "
            "diagrams`, or fix the link):\n  " + "\n  ".join(broken)
        )
    if (build / "source").exists():  # a notebook removed from solutions/ leaves no trace
        shutil.rmtree(build / "source")
    for a in found:
        target = build / "source" / a.name
        for path in sorted(a.source.parent.rglob("*")):
            rel = path.relative_to(a.source.parent)
            if path.is_dir() or "__pycache__" in rel.parts:
                continue
            if path == a.source:
                write_notebook(to_notebook(path), target / a.notebook_name)
            else:
                (target / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target / rel)
    return found


def nbgrader_env() -> dict[str, str]:
    """The environment nbgrader runs in: its config comes from grader/, and the tools it calls
    (alembic, the kernel) from this Python's environment, activated or not."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
        p for p in (str(CONFIG_DIR), env.get("JUPYTER_CONFIG_PATH", "")) if p
    )
    return env


def nbgrader(*args: str, root: Path) -> subprocess.CompletedProcess:
    """Run an nbgrader command on the course directory `root`; BuildError if it fails."""
    cmd = nbgrader_main.command(*args, f"--CourseDirectory.root={root}")
    result = subprocess.run(cmd, cwd=root, env=nbgrader_env(), capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"`nbgrader {' '.join(args)}` failed:\n{result.stdout}\n{result.stderr}")
    return result


def build(build_dir: Path = BUILD, course: Path = COURSE, solutions: Path = SOLUTIONS) -> list[str]:
    """Build every assignment and replace course/ with the student versions."""
    build_dir.mkdir(parents=True, exist_ok=True)
    found = build_sources(build_dir, solutions)
    release = build_dir / "release"
    if release.exists():
        shutil.rmtree(release)
    nbgrader("generate_assignment", "*", "--force", root=build_dir)  # every assignment at once
    if course.exists():
        shutil.rmtree(course)
    shutil.copytree(release, course)
    return [a.name for a in found]


def _tree(folder: Path) -> set[Path]:
    return {p.relative_to(folder) for p in folder.rglob("*") if p.is_file()}  # none if missing


def differences(course: Path, fresh: Path) -> list[str]:
    """What differs, byte for byte, between `course` and a `fresh` build of it."""
    have, want = _tree(course), _tree(fresh)
    problems = [f"missing from course/: {p}" for p in sorted(want - have)]
    problems += [f"not built from solutions/: {p}" for p in sorted(have - want)]
    problems += [
        f"stale: course/{p}"
        for p in sorted(have & want)
        if not filecmp.cmp(course / p, fresh / p, shallow=False)
    ]
    return problems


def check(course: Path = COURSE, solutions: Path = SOLUTIONS) -> list[str]:
    """Differences between course/ and a fresh build; empty when course/ is up to date."""
    with tempfile.TemporaryDirectory(prefix="course-check-") as tmp:
        fresh = Path(tmp) / "course"
        build(Path(tmp) / "build", fresh, solutions)
        return differences(course, fresh)
