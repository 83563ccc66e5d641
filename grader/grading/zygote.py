"""nbgrader, imported once and forked for each student: a grading slot's `nbgrader autograde` runs
start about a second sooner each (importing nbgrader, nbconvert, SQLAlchemy and jsonschema costs
about 0.9 s of CPU, more than nbgrader's own work for one student).

A `Zygote` is a process of the trusted side that has made those imports and nothing else: no
database, no kernel, no thread but an idle one of torch's; nothing of a student's reaches it. For
each run it forks a child that takes the run's working directory, environment, data limit and
log and runs nbgrader's `main`, as `python -m grader.authoring.nbgrader_main ARGS` would; its
kernel is started, and sandboxed, as before. One zygote serves a whole batch, its runs side by
side, and every later batch of the same process and environment (`shared`): a zygote costs
seconds of CPU (torch's import above all) and hundreds of MB, once.

The protocol, one JSON object a line on stdin and stdout: {"run": {...}} is answered with
{"pid": N} once the child is forked; whenever a child ends, {"ended": N, "returncode": M} follows
(negative M: the signal that ended it). Until then the child is the zygote's, so that the caller
can watch it (grader.grading.sandbox) and kill it and what it starts. The zygote stays
single-threaded: it waits on stdin and reaps its children in one loop, so that no lock another
thread holds is copied into a child half-taken.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import queue
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import suppress
from pathlib import Path

# What a run needs that is worth importing once: nbgrader's apps (with nbconvert and
# SQLAlchemy), the preprocessors and the course's own, which the configuration names; and the
# judge's shell and torch, which the release's cells import there (about 1.8 s that each
# student's run would pay again; importing torch starts no CUDA context, so each child starts its
# own, as torch's DataLoader workers do). Then, where the batch's environment names the mode,
# Triton and the runtime the release's setup cell imports, Triton's environment set first as
# device.setup sets it (a run whose environment asks another mode fails in setup, as a notebook
# that imported Triton first).
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
REAP_SECONDS = 0.05  # how often the zygote looks for ended children (none: it sleeps on stdin)


class ZygoteError(RuntimeError):
    """The zygote died or broke the protocol."""


class Zygote:
    """A forking nbgrader, started with `env` in `cwd` (the batch's); `close` ends it. `main`
    names the function a run calls, with the run's arguments in sys.argv[1:]. Threads may share
    it: each `start` gets its own child's pid, each `wait(pid)` that child's status."""

    def __init__(self, env: Mapping[str, str], cwd: Path, main: str = NBGRADER_MAIN):
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, main],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            text=True,
        )
        self._asking = threading.Lock()  # one "run" request at a time: its pid answers it
        self._pids: queue.Queue[int | str] = queue.Queue()
        self._ended: dict[int, int] = {}
        self._changed = threading.Condition()
        self._gone: str | None = None  # why no more answers will come
        self._read(READY)
        self._reader = threading.Thread(target=self._answers, daemon=True)
        self._reader.start()

    def _read(self, key: str):
        line = self.process.stdout.readline()
        try:
            return json.loads(line)[key]
        except (ValueError, KeyError, TypeError):
            raise self._broken(f"answered {line!r} where {key!r} belongs") from None

    def _broken(self, what: str) -> ZygoteError:
        code = self.process.poll()
        ended = f" and ended with {code}" if code is not None else ""
        return ZygoteError(f"the nbgrader zygote {what}{ended}")

    def _answers(self) -> None:
        """The reader of the zygote's stdout: pids to `start`, ends to `wait`."""
        why = "closed its output"
        for line in self.process.stdout:
            try:
                answer = json.loads(line)
                if "pid" in answer:
                    self._pids.put(int(answer["pid"]))
                    continue
                pid, code = int(answer["ended"]), int(answer["returncode"])
            except (ValueError, KeyError, TypeError):
                why = f"answered {line!r}"
                break
            with self._changed:
                self._ended[pid] = code
                self._changed.notify_all()
        with self._changed:
            self._gone = why
            self._changed.notify_all()
        self._pids.put(why)

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
        with self._asking:
            self._ask({"run": {**run, "data_limit": data_limit}})
            pid = self._pids.get()
        if isinstance(pid, str):
            self._pids.put(pid)  # for the next caller too
            raise self._broken(pid)
        return pid

    def wait(self, pid: int) -> int:
        """The exit status of the child `start` forked as `pid`, once it has ended (-N: signal
        N)."""
        with self._changed:
            while pid not in self._ended:
                if self._gone is not None:
                    raise self._broken(f"{self._gone} before run {pid} ended")
                self._changed.wait()
            return self._ended.pop(pid)

    def alive(self) -> bool:
        return self.process.poll() is None and self._gone is None

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=10)
        self.process.stdout.close()


class Pool:
    """The batch's zygote, started when first needed and restarted if it died; `get` gives it to
    a run (several at once)."""

    def __init__(self, env: Mapping[str, str], cwd: Path):
        self.env, self.cwd = dict(env), cwd
        self._starting = threading.Lock()
        self.current: Zygote | None = None
        self.started: list[Zygote] = []

    def get(self) -> Zygote:
        with self._starting:
            if self.current is None or not self.current.alive():
                self.current = Zygote(self.env, self.cwd)
                self.started.append(self.current)
            return self.current

    def close(self) -> None:
        for zygote in self.started:
            zygote.close()


_SHARED: dict[tuple[tuple[str, str], ...], Pool] = {}
_SHARING = threading.Lock()


def shared(env: Mapping[str, str], ignored: Collection[str] = ()) -> Pool:
    """This process's Pool for `env`: batches whose environments differ only in `ignored`
    (variables that their runs read, never the zygote's imports) share one zygote, started in
    the folder that holds the grader package rather than in any batch's; each such Pool is closed
    as the process exits."""
    key = tuple(sorted((k, v) for k, v in env.items() if k not in ignored))
    with _SHARING:
        if not _SHARED:
            atexit.register(_close_shared, os.getpid())
        if key not in _SHARED:
            _SHARED[key] = Pool(env, Path(__file__).resolve().parents[2])
        return _SHARED[key]


def _close_shared(owner: int) -> None:
    if os.getpid() == owner:  # not in a forked copy of the process that started them
        for shared_pool in _SHARED.values():
            shared_pool.close()


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
    # A Ctrl-C at the terminal reaches the whole process group: the batch kills its runs
    # (grader.grading.autograde) and its process closes the zygote as it exits (`shared`); the
    # zygote itself stays quiet.
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
    answer = replies.fileno()
    children: set[int] = set()
    pending = b""
    while True:
        wake = REAP_SECONDS if children else None  # an idle zygote waits for a request alone
        readable, _, _ = select.select([sys.stdin.fileno()], [], [], wake)
        for pid, code in _reaped(children):
            os.write(answer, _line({"ended": pid, "returncode": code}))
        if not readable:
            continue
        data = os.read(sys.stdin.fileno(), 1 << 16)
        if not data:
            return
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            request = json.loads(line)
            if "run" in request:
                child = os.fork()
                if child == 0:
                    _child(request["run"], run_main)
                children.add(child)
                os.write(answer, _line({"pid": child}))
            else:
                os.write(answer, _line({"error": f"unexpected request {request}"}))


def _reaped(children: set[int]) -> list[tuple[int, int]]:
    """(pid, exit status) of each of `children` that has ended, taken out of the set."""
    ended = []
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            ended.append((pid, os.waitstatus_to_exitcode(status)))
    return ended


def _line(answer: dict) -> bytes:
    return (json.dumps(answer) + "\n").encode()


if __name__ == "__main__":
    serve(*sys.argv[1:])
