"""The batch's compiled kernels: Triton compiles the release's kernels once per batch, not once per
student.

A student's sandbox starts with an empty Triton cache (grader.grading.jail), so every kernel the
notebook launches is compiled again for each student, the release's own kernels (08's drafts, the
launchers Triton builds for each signature) as much as the student's. Before a GPU batch, `seeded`
runs the assignment's release notebooks (what every student was handed, their answer cells still
unanswered) once, on one of the batch's GPUs, as grading runs a notebook (RUN_BENCHMARKS off), in
a sandbox like a student's whose Triton cache is a folder of the batch's; an answer cell fails,
and the run goes on past it. Each student's sandbox then gets that folder read-only and copies it
to the same path, its own cache, before any student code runs: a kernel whose source, argument
types and options match one compiled there is loaded, any other is compiled as before. (Triton
records where each compiled file lies, so the cache is filled at the path it is read from.)

Only the release is compiled, never the authors' solutions: a sandbox that could read the
reference's compiled answers could launch them as its own. Nothing flows the other way either:
what a student's kernel compiles stays in its sandbox and dies with it, so no student's code
reaches another's. A run that fails leaves what it compiled until then; one that compiles nothing
leaves students compiling everything, and grading goes on either way.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from grader.grading import devices, jail, sandbox

# Run in the sandbox by the kernel's Python: argv is KERNEL TIMEOUT TAIL NOTEBOOK...; each notebook
# executed in the Jupyter kernel KERNEL, errors allowed, TAIL added to its parameters cell.
RUN = """
import os, sys
import nbformat
from nbclient import NotebookClient
kernel, timeout, tail = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for name in sys.argv[4:]:
    nb = nbformat.read(name, as_version=4)
    for cell in nb.cells:
        if "parameters" in cell.metadata.get("tags", []):
            cell.source += tail
    client = NotebookClient(nb, kernel_name=kernel, allow_errors=True, timeout=timeout,
                            resources={"metadata": {"path": os.getcwd()}})
    client.execute()
"""
WORK = "/tmp/release"  # the run's working directory in its sandbox


@dataclass(frozen=True)
class Built:
    """What `build` left: the folder (None where nothing was compiled), its kernels, the time."""

    folder: Path | None
    kernels: int
    seconds: float
    problem: str = ""  # why the run failed, where it did

    def line(self) -> str:
        said = f"compiled the release's kernels once for the batch: {self.kernels} kernels"
        said += f" in {self.seconds:.0f} s"
        return f"{said} ({self.problem})" if self.problem else said


def kernels_in(folder: Path) -> int:
    """How many compiled kernels a Triton cache folder holds (one metadata group each)."""
    return sum(1 for _ in folder.rglob("__grp__*.json"))


def build(batch, env: dict[str, str], kernel: str, into: Path, gpu: devices.Gpu | None) -> Built:
    """Run the release notebooks of `batch`'s assignment in the Jupyter kernel `kernel` in a
    sandbox on `gpu`, with `env` (nbgrader's) and Triton's cache in `into`, which ends up owned by
    root and readable by all."""
    from grader.grading import notebook_guards

    started = time.perf_counter()
    into.mkdir(exist_ok=True)
    release = batch.folder("release") / batch.assignment
    notebooks = [p.name for p in sorted(release.glob("*.ipynb"))]
    problem = ""
    try:
        with jail.for_batch(
            kernel,
            memory_limit=batch.memory_limit,
            gpu=gpu.minor if gpu else None,
            env=gpu.env if gpu else {},
            kernel_cache=into,
            compiling=True,
        ) as (path, _):
            spec = jail.read(path)
            shutil.copytree(release, spec.seed, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
            jail.readable(spec.seed)
            os.chown(into, spec.uid, spec.uid)
            timeout = str(batch.speed_cell_timeout)
            program = [
                spec.kernel_argv[0],
                "-c",
                RUN,
                kernel,
                timeout,
                notebook_guards.NO_BENCHMARKS,
            ]
            log = spec.run / "log.txt"
            finished = sandbox.run(
                jail.sandboxed(spec, WORK, [*program, *notebooks]),
                log=log,
                timeout=batch.timeout,
                memory_limit=batch.memory_limit,
                env=jail.environment(spec, env),
            )
            if not finished.ok:
                tail = log.read_text(errors="replace").strip().splitlines()[-1:]
                problem = f"the run ended early: {finished.killed or finished.returncode} {tail}"
    except Exception as exc:  # the grader's own trouble: students compile their own kernels
        problem = f"the run could not be made: {type(exc).__name__}: {exc}"
    for path in [into, *into.rglob("*")]:  # the sandbox's uid wrote it: root's now, read-only
        os.chown(path, 0, 0, follow_symlinks=False)
    jail.readable(into)
    found = kernels_in(into)
    any_file = any(p.is_file() for p in into.rglob("*"))  # launchers too, without a group
    return Built(into if any_file else None, found, time.perf_counter() - started, problem)


@contextmanager
def seeded(
    batch, gpus: devices.Pool, students: list[str], env: dict[str, str], kernel: str
) -> Iterator[Built | None]:
    """`batch.kernels` set to the batch's compiled kernels while the block runs, built by `build`
    on a GPU of `gpus` where there are `students` to grade, in GPU mode with the sandbox, and the
    batch asks for them (`kernel_cache`); else None."""
    if not (students and batch.kernel_cache and batch.jailed and batch.mode == "gpu"):
        yield None
        return
    into = Path(tempfile.mkdtemp(prefix="course-triton-"))
    try:
        with gpus.lease() as gpu:
            built = build(batch, env, kernel, into, gpu)
        batch.kernels = built.folder
        yield built
    finally:
        batch.kernels = None
        shutil.rmtree(into, ignore_errors=True)
