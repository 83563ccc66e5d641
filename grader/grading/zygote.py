"""nbgrader, imported once and forked for each student: a grading slot's `nbgrader autograde` runs
start about a second sooner each (importing nbgrader, nbconvert, SQLAlchemy and jsonschema costs
about 0.9 s of CPU, more than nbgrader's own work for one student).

A `Zygote` is a process of the trusted side that has made those imports and nothing else: no
database, no kernel, no thread but an idle one of torch's; nothing of a student's reaches it. For
each run it forks a child that takes the run's working directory, environment, data limit and
log and runs nbgrader's `main`, as `python -m grader.authoring.nbgrader_main ARGS` would; its
kernel is started, and sandboxed, as before.

The protocol, one JSON object a line on stdin and stdout: {"run": {...}} is answered with
{"pid": N} once the child is forked; {"wait": true} with {"returncode": N} once it has ended
(negative: the signal that ended it). Until then the child is the zygote's, so that the caller can
watch it (grader.grading.sandbox) and kill it and what it starts. One run at a time: a grading
slot owns its zygote (`Pool`).
"""

from __future__ import annotations

import importlib
import json
import os
import queue
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from pathlib import Path

# What a run needs that is worth importing once: nbgrader's apps (with nbconvert and
# SQLAlchemy), the preprocessors and the course's own, which the configuration names; and the
# judge's shell and torch, which the release's cells import there (about 1.8 s a student;
# importing torch starts no CUDA context, so each child starts its own, as torch's DataLoader
# workers do). Then, where the batch's environment names the mode, Triton and the runtime the
# release's setup cell imports, Triton's environment set first as device.setup sets it (a run
# whose environment asks another mode fails in setup, as a notebook that imported Triton first).
PRELOAD = (
    "nbgrader.apps.nbgraderapp",
    "nbgrader.preprocessors",
    "nbclient",
    "sqlalchemy.dialects.sqlite",
    "grader.grading.nbgrader_policy",
    "grader.grading.notebook_guards",
    "grader.grading.judge",
    "IPython.core.interactiveshell",
    "torch",
)
PRELOAD_RUNTIME = (
    "triton",
    "triton.language",
    *(f"grader.runtime.{m}" for m in ("checks", "perf", "plots", "profile", "recorded", "timing")),
)
READY = "ready"
NBGRADER_MAIN = "nbgrader.apps.nbgraderapp:main"  # what a run runs: "module:function"


class ZygoteError(RuntimeError):
    """The zygote died or broke the protocol."""


class Zygote:
    """A forking nbgrader, started with `env` in `cwd` (the batch's); `close` ends it. `main`
    names the function a run calls, with the run's arguments in sys.argv[1:]."""

    def __init__(self, env: Mapping[str, str], cwd: Path, main: str = NBGRADER_MAIN):
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, main],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            text=True,
        )
        self._read(READY)

    def _read(self, key: str):
        line = self.process.stdout.readline()
        try:
            return json.loads(line)[key]
        except (ValueError, KeyError, TypeError):
            code = self.process.poll()
            raise ZygoteError(
                f"the nbgrader zygote answered {line!r} where {key!r} belongs"
                + (f" and ended with {code}" if code is not None else "")
            ) from None

    def _ask(self, request: dict) -> None:
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise ZygoteError(f"the nbgrader zygote is gone: {exc}") from None

    def start(
        self,
        args: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        log: Path,
        data_limit: int | None = None,
    ) -> int:
        """Fork `nbgrader ARGS`, its output going to `log`: the child's pid."""
        run = {"args": list(args), "cwd": str(cwd), "env": dict(env), "log": str(log)}
        self._ask({"run": {**run, "data_limit": data_limit}})
        return int(self._read("pid"))

    def wait(self) -> int:
        """The exit status of the child `start` forked, once it has ended (-N: signal N)."""
        self._ask({"wait": True})
        return int(self._read("returncode"))

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


class Pool:
    """Zygotes for `size` grading slots, each started when first needed; `lease` lends one to
    one run at a time."""

    def __init__(self, size: int, env: Mapping[str, str], cwd: Path):
        self.env, self.cwd = dict(env), cwd
        self.free: queue.Queue[Zygote | None] = queue.Queue()
        for _ in range(max(1, size)):
            self.free.put(None)
        self.started: list[Zygote] = []

    @contextmanager
    def lease(self) -> Iterator[Zygote]:
        zygote = self.free.get()
        try:
            if zygote is None or zygote.process.poll() is not None:
                zygote = Zygote(self.env, self.cwd)
                self.started.append(zygote)
            yield zygote
        finally:
            self.free.put(zygote)

    def close(self) -> None:
        for zygote in self.started:
            zygote.close()


def pool(size: int, env: Mapping[str, str], cwd: Path) -> closing[Pool]:
    """A Pool, closed as the `with` block ends."""
    return closing(Pool(size, env, cwd))


# -- the zygote's side ---------------------------------------------------------------------------


def _child(run: dict, main: Callable[[], object]) -> None:
    """In the forked child: become the run, then call `main`; never returns."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the zygote ignores it
        log = os.open(run["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        os.chdir(run["cwd"])
        os.environ.clear()
        os.environ.update(run["env"])
        if run["data_limit"] is not None:
            limit = int(run["data_limit"])
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        # The child ends with os._exit, which runs no atexit function: what the run makes with
        # tempfile (kernel_connection's socket folder) goes in a folder removed here instead.
        scratch = tempfile.tempdir = tempfile.mkdtemp(prefix="nbgrader-")
        from grader.authoring import kernel_connection

        sys.argv = kernel_connection.command_line(["nbgrader", *run["args"]])
        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
            if isinstance(exit_.code, str):
                print(exit_.code, file=sys.stderr)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with suppress(Exception):
                stream.flush()
        os._exit(code)


def serve(main: str = NBGRADER_MAIN) -> None:
    """Import what runs need, then answer requests until stdin closes."""
    from grader.authoring import nbgrader_main

    nbgrader_main.lean()
    # A Ctrl-C at the terminal reaches the whole process group: the batch kills its runs and
    # closes the zygotes (grader.grading.autograde); the zygote itself stays quiet.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in PRELOAD:
        importlib.import_module(name)
    mode = os.environ.get("COURSE_MODE")
    if mode in ("gpu", "interpreter"):  # no CUDA call: the children start their own
        from grader.runtime import device

        device.set_triton_environment(mode)
        for name in PRELOAD_RUNTIME:
            importlib.import_module(name)
    module, _, function = main.partition(":")
    run_main = getattr(importlib.import_module(module), function)
    replies = sys.stdout
    sys.stdout = sys.stderr  # whatever an import prints stays off the protocol
    replies.write(json.dumps({READY: True}) + "\n")
    replies.flush()
    child = None
    for line in sys.stdin:
        request = json.loads(line)
        if "run" in request:
            child = os.fork()
            if child == 0:
                _child(request["run"], run_main)
            replies.write(json.dumps({"pid": child}) + "\n")
        elif "wait" in request and child is not None:
            _, status = os.waitpid(child, 0)
            child = None
            replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        else:
            replies.write(json.dumps({"error": f"unexpected request {request}"}) + "\n")
        replies.flush()


if __name__ == "__main__":
    serve(*sys.argv[1:])
