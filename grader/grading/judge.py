"""The judge: where every test cell of a notebook runs at grading, in nbgrader's own process, where
no student code runs.

The student's notebook runs in its sandboxed kernel; its test cells run here instead, with the
given cells they need (grader.grading.roles), in an IPython shell (`Judge`), and score from their
outputs here. A name of the student's in them is a proxy (`Remote`, `RemoteKernel`) or a copy,
served for the cell by grader.runtime.serve in the student's kernel over a `Session`: the judge
draws every input, gets the outputs back as data (grader.runtime.wire) and compares them with its
own references. Hidden tests, expected values, tolerances, verdicts and points stay here; what
comes back is checked, never believed. What the watches saw there (launches, torch calls) is
evidence: the student's code can make it lie only by reaching into its own process's grading
code, which grader.grading.detectors flags; docs/instructors.md states the threat model."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import sys
import types
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

from grader.runtime import watches, wire

ACCEPT_TIMEOUT = 120.0  # seconds for the student's kernel to connect at the start of a cell
OUTPUT_TEXT = 1 << 20  # characters of one stream output kept before it is cut


class NotServed(RuntimeError):
    """A name of the student's the judge could not get: undefined, not data, or not answered."""


class NotAFunction(NotServed):
    """A name of the student's bound to something neither a function, a Triton kernel nor data
    (a class's instance standing in for a kernel, say): flagged (grader.grading.findings)."""


class CellTimeoutError(TimeoutError):
    """A cell the judge ran passed its time limit (the name nbclient gives the same failure)."""


class RaisedThere(RuntimeError):
    """An exception the student's code raised, by its type's name and message."""


# Exceptions the student's code raises are re-raised here as the same builtin type (tests catch
# and name them); any other as RaisedThere, with its type's name in the message.
BUILTIN_ERRORS = {
    e.__name__: e
    for e in (
        ValueError, TypeError, AssertionError, RuntimeError, IndexError, KeyError, NameError,
        ZeroDivisionError, NotImplementedError, AttributeError, OverflowError, MemoryError,
        ArithmeticError, LookupError, RecursionError, FloatingPointError, UnboundLocalError,
    )
}  # fmt: skip


def raise_failure(error: dict) -> None:
    """Raise, here, the failure the student's process described (grader.runtime.serve.failure)."""
    from grader.runtime import hints, launches, stubs
    from grader.runtime.checks import KernelCheckError

    kind = error.get("kind") if isinstance(error, dict) else None
    message = str(error.get("message", ""))[: 2 * wire.MAX_TEXT] if kind else str(error)
    if kind == "stub":
        raise stubs.StubNotFilled(message)
    if kind == "integrity":
        raise launches.IntegrityError(message)
    if kind == "check":
        found = []
        for h in error.get("hints", []):
            try:
                found.append(hints.Hint(*map(str, h)))
            except (TypeError, ValueError):
                continue  # a pattern the course does not know: the message stands alone
        raise KernelCheckError(message, found)
    if kind == "error":
        name = str(error.get("type", "Exception"))
        if name in BUILTIN_ERRORS:
            raise BUILTIN_ERRORS[name](message)
        raise RaisedThere(f"{name}: {message}" if message else name)
    raise NotServed(f"the notebook's kernel answered with something unreadable: {message[:200]}")


# -- proxies -----------------------------------------------------------------------------------


class Remote:
    """A function of the student's notebook: a call runs it in the student's kernel. `source` and
    `first_line`: the function's source as its cell defined it, for the checks that read it."""

    def __init__(self, judge: Judge, name: str):
        self._judge = judge
        self.__name__ = self.__qualname__ = name
        self.__module__ = "__main__"  # the notebook's, as a function it defines
        self.source, self.first_line = judge.sources.get(name, (None, 1))

    def __call__(self, *args, **kwargs):
        return self._judge.session().request("call", self.__name__, args, kwargs)

    def __repr__(self) -> str:
        return f"<the student's {self.__name__}>"


class RemoteKernel(Remote):
    """A Triton kernel of the student's notebook: `kernel[grid](...)` launches it there."""

    def __getitem__(self, grid):
        if callable(grid):
            raise NotServed(
                f"`{self.__name__}` is the student's kernel: the grader launches it on a grid "
                "given as a tuple, not a function of its meta-parameters"
            )

        def launch(*args, **kwargs):
            return self._judge.session().request("launch", self.__name__, args, kwargs, grid)

        return launch

    def run(self, *args, grid, warmup=False, **kwargs):
        return self[grid](*args, **kwargs)


class Missing:
    """A name the notebook does not define, or binds to what the judge cannot read: using it
    fails, saying so (as `error`)."""

    def __init__(self, name: str, why: str, error: type[NotServed] = NotServed):
        self.__name__ = name
        self._why, self._error = why, error

    def _fail(self, *args, **kwargs):
        raise self._error(self._why)

    __call__ = __getitem__ = _fail

    def __getattr__(self, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        self._fail()

    def __repr__(self) -> str:
        return f"<{self.__name__}: {self._why}>"


# -- a session ---------------------------------------------------------------------------------


class Session:
    """The calls of one cell over `sock` to the student's kernel, quiet (grader.runtime.watches):
    each tensor argument's storage is sent with a call (unless its mirror there already holds
    its bytes) and comes back after it where the call changed it, known there by handle until
    it dies here or the session ends."""

    def __init__(self, sock: socket.socket, device: str, settings=dict):
        self.sock = sock
        self.device = device
        self.settings = settings  # () -> {name: value} to set in the notebook before each call
        self._handles: dict[int, tuple[int, weakref.ref]] = {}  # id(storage) -> (handle, ref)
        self._synced: dict[int, object] = {}  # handle -> the bytes its mirror there holds
        self._released: list[int] = []
        self._received = wire.Landing()  # where each answer's blobs are read
        self._sending = wire.Landing()  # where the storages a request sends are copied
        self._next = 1
        self._traced: list | None = None
        self.last_result = None  # what the last request returned
        self.broken: str | None = None
        self.calls = 0  # requests that ran the student's code: all but the opening `describe`

    def _handle(self, storage) -> int:
        key = id(storage)
        known = self._handles.get(key)
        if known is not None and known[1]() is storage:
            return known[0]
        handle, self._next = self._next, self._next + 1
        self._handles[key] = (handle, weakref.ref(storage))
        weakref.finalize(storage, self._forget, key, handle)
        return handle

    def _forget(self, key: int, handle: int) -> None:
        known = self._handles.get(key)
        if known is not None and known[0] == handle:
            del self._handles[key]
            self._synced.pop(handle, None)
            self._released.append(handle)

    def _storage(self, handle: object):
        for h, ref in self._handles.values():
            if h == handle and ref() is not None:
                return ref()
        raise wire.WireError(f"a tensor of storage {handle!r}, which the judge never sent")

    @watches.quiet()
    def describe(self, names: list[str]) -> dict:
        arrived: dict[int, object] = {}
        reply, _ = self._exchange({"op": "describe", "names": list(names)}, arrived)
        found = reply.get("names")
        if not isinstance(found, dict):
            raise wire.WireError("a description that is not a mapping of names")
        codec = wire.Codec(tensor_in=self._tensor_in(arrived))
        return {
            n: (info, codec) for n, info in found.items() if n in names and isinstance(info, dict)
        }

    @watches.quiet()
    def request(self, op: str, name: str, args, kwargs, grid=None):
        """Call (or launch, with `grid`) the student's `name` with `args` and `kwargs`; the
        watches open here are opened there too, and absorb what they saw."""
        pushed: dict[int, object] = {}
        codec = wire.Codec(tensor_out=self._tensor_out(pushed), strict=True)
        watching = watches.current()
        header = {
            "op": op,
            "name": name,
            "args": codec.encode(tuple(args)),
            "kwargs": codec.encode(dict(kwargs)),
            "watches": [w.remote(codec) for w in watching],
            "settings": codec.encode(self.settings()),
        }
        if grid is not None:
            header["grid"] = codec.encode(tuple(grid) if isinstance(grid, list) else grid)
        if self._traced is not None:
            header["trace"] = "begin" if not self._traced else True
            self._traced.append(name)
        reply, blobs = self._exchange(header, pushed)
        reports = reply.get("watches", [])
        if not isinstance(reports, list) or len(reports) != len(watching):
            raise wire.WireError("an answer without one report for each watch")
        for w, found in zip(watching, reports, strict=True):
            w.absorb(found, Context(blobs, pushed))
        self.last_result = wire.Codec(tensor_in=self._tensor_in(pushed)).decode(reply.get("result"))
        return self.last_result

    @contextlib.contextmanager
    def tracing(self) -> Iterator[list]:
        """Keep the block's requests in the student's kernel (a speed cell's graded call, which
        `timed` makes again); yields their names."""
        self._traced = []
        try:
            yield self._traced
        finally:
            self._traced = None

    def timed(self, inputs: list, moments: list, seed: int, marker: int) -> None:
        """One timed call (grader.runtime.serve: Server.timed)."""
        codec = wire.Codec(tensor_out=self._tensor_out({}), strict=True)
        header = {"op": "timed", "inputs": [codec.encode(t) for t in inputs]}
        header.update(moments=[list(m) for m in moments], seed=seed, flush=marker)
        self._exchange(header, {})
        self._synced.clear()  # the inputs drawn there, the outputs written

    def fetch(self, tensor, *, result: bool = False) -> int:
        """Copy into `tensor`'s storage its mirror's bytes there, or with `result` into `tensor`
        what the last timed call returned there; the bytes copied."""
        storage = tensor.untyped_storage()
        header: dict = {"op": "fetch", "result": True}
        if not result:
            codec = wire.Codec(tensor_out=self._tensor_out({}), strict=True)
            header = {"op": "fetch", "tensors": [codec.encode(wire.flat(storage))]}
        _, blobs = self._exchange(header, {})
        if len(blobs) != 1:
            raise wire.WireError("a fetch answered without the tensor's bytes")
        if result:
            tensor.copy_(wire.from_bytes(blobs[0], tensor.dtype, list(tensor.shape), self.device))
        else:
            wire.fill_storage(storage, blobs[0])
        return len(blobs[0])

    def _tensor_out(self, pushed: dict):
        def encode(t) -> dict:
            import torch

            if t.layout != torch.strided:
                raise wire.WireError(f"a {t.layout} tensor cannot be sent")
            storage = t.untyped_storage()
            handle = self._handle(storage)
            pushed.setdefault(handle, storage)
            return wire.spec(t, handle)

        return encode

    def _tensor_in(self, pushed: dict):
        def decode(spec: dict):
            storage = pushed.get(spec.get("storage")) or self._storage(spec.get("storage"))
            return wire.view_of(storage, spec)

        return decode

    @watches.quiet()
    def _exchange(self, header: dict, pushed: dict):
        """Send one request with the storages it names and receive the answer: the storages'
        bytes that came back written into them, a failure raised here (`raise_failure`)."""
        if self.broken:
            raise NotServed(self.broken)
        self.calls += header.get("op") != "describe"
        sent: list = []
        header["storages"] = [self._push(h, storage, sent) for h, storage in pushed.items()]
        header["release"], self._released = self._released, []
        try:
            wire.send(self.sock, header, sent)
            reply, answer = wire.receive(self.sock, self._received)
        except (OSError, wire.WireError) as exc:
            self.broken = f"the notebook's kernel stopped answering the judge ({exc})"
            raise NotServed(self.broken) from None
        except BaseException:  # interrupted mid-message (a timeout): nothing more can be read
            self.broken = "the notebook's kernel did not answer in time"
            raise
        if not reply.get("ok"):  # what the call wrote before it failed stays there, unknown
            for handle in pushed:
                self._synced.pop(handle, None)
            raise_failure(reply.get("error"))
        for item in reply.get("storages", []):
            index = item.get("blob") if isinstance(item, dict) else None
            if not isinstance(index, int) or not 0 <= index < len(answer):
                raise wire.WireError(f"a storage naming blob {index!r}")
            handle = item.get("id")
            if item.get("new") is True and isinstance(handle, int) and handle < 0:
                import torch  # a storage the student's code made: a copy of it here

                made = torch.empty(len(answer[index]), dtype=torch.uint8, device=self.device)
                pushed[handle] = made.untyped_storage()
            elif handle not in pushed or handle < 0:
                raise wire.WireError(f"bytes for a storage the judge did not send: {item!r}")
            wire.fill_storage(pushed[handle], answer[index])
            if handle > 0:
                self._synced[handle] = wire.flat(pushed[handle]).clone()
        return reply, answer

    def _push(self, handle: int, storage, sent: list) -> dict:
        """How a storage goes with a request: `same` where its mirror there holds its bytes
        (the last sent or received), else its bytes, appended to `sent`."""
        import torch

        now, was = wire.flat(storage), self._synced.get(handle)
        if was is not None and was.shape == now.shape and torch.equal(now, was):
            return {"id": handle, "same": True}
        sent.append(wire.storage_bytes(storage, self._sending(len(sent), now.numel())))
        self._synced[handle] = now.clone()
        return {"id": handle, "blob": len(sent) - 1}

    def end(self) -> None:
        with contextlib.suppress(OSError, wire.WireError):
            if not self.broken:
                wire.send(self.sock, {"op": "end"})
        self.sock.close()
        # its copies of what the mirrors held, and the memory messages landed in, go with it
        # (a measurement kept for the next cell keeps the session, for its count of calls)
        self._synced.clear()
        self._received, self._sending, self.last_result = wire.Landing(), wire.Landing(), None


class Context:
    """What a watch's `absorb` may use: the answer's blobs as tensors, spans of the student's
    mirrors as addresses of the judge's tensors."""

    def __init__(self, blobs: list, pushed: dict):
        self.blobs, self.pushed = blobs, pushed

    def tensor(self, index: object, dtype, shape, device):
        if not isinstance(index, int) or not 0 <= index < len(self.blobs):
            raise wire.WireError(f"a report naming blob {index!r}")
        return wire.from_bytes(self.blobs[index], dtype, list(shape), device)

    def span(self, found: object) -> tuple[int, int] | None:
        """[handle, first byte, end byte] of a mirror as (start, stop) addresses here."""
        if not isinstance(found, list) or len(found) != 3:
            return None
        handle, start, stop = found
        storage = self.pushed.get(handle)
        if storage is None or not all(isinstance(v, int) for v in (start, stop)):
            return None
        if not 0 <= start <= stop <= storage.nbytes():
            return None
        return storage.data_ptr() + start, storage.data_ptr() + stop


# -- the judge ---------------------------------------------------------------------------------


class Judge:
    """Runs a notebook's judge cells in an IPython shell holding the release's names and, cell by
    cell, the student's (proxies or values). `path`: the socket the student's kernel connects to;
    `folder`: the notebook's (its side files: 05's gemm.py, 08's drafts)."""

    def __init__(self, path: Path, folder: Path, device: str, settings: tuple[str, ...] = ()):
        self.path = Path(path)
        self.settings = settings
        self.folder = Path(folder)
        self.device = device
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        os.chmod(self.path, 0o777)  # the sandbox's uid connects
        self.listener.listen(1)
        self.sources: dict[str, tuple[str, int]] = {}  # grader.grading.roles.sources
        self.launchable: frozenset[str] = frozenset()  # grader.grading.roles.launchable
        # the code before this cell that a call of the notebook's function needs (roles.replay)
        self.prefix: Callable[[str], list[str]] = lambda reached: []
        self.profiled: Callable | None = None  # runs ncu in the student's sandbox (profile.Runner)
        self.shell = Shell()
        self._session: Session | None = None

    def session(self) -> Session:
        if self._session is None:
            raise NotServed("the student's notebook is not being served to the judge now")
        return self._session

    def begin(self, served: tuple[str, ...]) -> None:
        """Take the student's kernel's connection and bind its `served` names into the shell."""
        self.listener.settimeout(ACCEPT_TIMEOUT)
        try:
            sock, _ = self.listener.accept()
        except OSError as exc:  # nothing connected: every name of the student's fails when used
            why = f"the notebook's kernel did not connect to the judge ({exc})"
            for name in served:
                self.shell.user_ns[name] = Missing(name, why)
            return
        sock.settimeout(None)
        self._session = Session(sock, self.device, self._settings)
        try:
            found = self._session.describe(list(served)) if served else {}
        except (NotServed, wire.WireError, AssertionError, RuntimeError) as exc:
            found = {}
            self._session.broken = self._session.broken or f"unreadable description ({exc})"
        for name in served:
            self.shell.user_ns[name] = self._proxy(name, *found.get(name, ({}, None)))

    def _settings(self) -> dict:
        """The release's settings a test may have changed (roles.Plan.settings), as they are."""
        return {n: self.shell.user_ns[n] for n in self.settings if n in self.shell.user_ns}

    def _proxy(self, name: str, info: dict, codec: wire.Codec | None):
        kind = info.get("kind")
        if kind == "kernel" and name in self.launchable:
            return RemoteKernel(self, name)
        if kind == "kernel":
            why = (f"`{name}` is not a Triton kernel as your notebook binds it (a wrapper, a "
                   "replaced method, an import under its name, or a decorator of your own): the "
                   "grader launches Triton kernels defined with @triton.jit alone")  # fmt: skip
            return Missing(name, why)
        if kind == "function":
            return Remote(self, name)
        if kind == "value" and codec is not None:
            try:
                return codec.decode(info.get("value"))
            except wire.WireError as exc:
                return Missing(name, f"`{name}` could not be read from the notebook ({exc})")
        if kind == "opaque":
            why = f"`{name}` is a {info.get('type')}, which the grader cannot read"
            return Missing(name, why, NotAFunction)
        if self._session is not None and self._session.broken:
            return Missing(name, self._session.broken)
        return Missing(name, f"`{name}` is not defined in the notebook that was graded")

    def end(self) -> None:
        if self._session is not None:
            self._session.end()
            self._session = None

    def run(self, source: str, *, timeout: float | None, silent: bool = False) -> list[dict]:
        """Run one cell's source in the notebook's folder, first on the import path (its side
        modules); its outputs as nbformat dicts (none when `silent`)."""
        before, folder = os.getcwd(), str(self.folder)
        os.chdir(folder)
        sys.path.insert(0, folder)
        try:
            return self.shell.capture(source, timeout=timeout, silent=silent)
        finally:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)
            os.chdir(before)

    def close(self) -> None:
        self.end()
        self.listener.close()
        with contextlib.suppress(OSError):
            self.path.unlink()


# -- the shell ---------------------------------------------------------------------------------


class Shell:
    """An IPython shell whose cells' outputs are collected as nbformat outputs: streams,
    displays, the last expression's result and errors, in the order they came."""

    def __init__(self):
        from IPython.core.displayhook import DisplayHook
        from IPython.core.displaypub import DisplayPublisher
        from IPython.core.interactiveshell import InteractiveShell

        outputs = self.outputs = []

        class Publisher(DisplayPublisher):
            def publish(self, data, metadata=None, *args, **kwargs):
                outputs.append(
                    {"output_type": "display_data", "data": dict(data), "metadata": metadata or {}}
                )

            def clear_output(self, wait=False):
                outputs.clear()

        class Hook(DisplayHook):
            def write_output_prompt(self):
                pass

            def write_format_data(self, format_dict, md_dict=None):
                outputs.append(
                    {
                        "output_type": "execute_result",
                        "data": dict(format_dict),
                        "metadata": md_dict or {},
                        "execution_count": self.shell.execution_count,
                    }
                )

            def finish_displayhook(self):
                pass

        shell = self.shell = InteractiveShell.instance(colors="nocolor")
        shell.display_pub = Publisher(shell=shell)
        shell.displayhook = Hook(shell=shell, cache_size=0)
        shell.display_trap.hook = shell.displayhook

        def show(etype, evalue, stb):
            outputs.append(
                {
                    "output_type": "error",
                    "ename": getattr(etype, "__name__", str(etype)),
                    "evalue": str(evalue),
                    "traceback": list(stb),
                }
            )

        shell._showtraceback = show
        self.user_ns = shell.user_ns

    def capture(self, source: str, *, timeout: float | None, silent: bool) -> list[dict]:
        self.outputs.clear()
        out, err = Stream(self.outputs, "stdout"), Stream(self.outputs, "stderr")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            alarm = signal.signal(signal.SIGALRM, _timed_out) if timeout else None
            if timeout:
                signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                self.shell.run_cell(source, store_history=not silent, silent=silent)
            finally:
                if timeout:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    signal.signal(signal.SIGALRM, alarm)
        found = [dict(o) for o in self.outputs]
        self.outputs.clear()
        return [] if silent and not any(o["output_type"] == "error" for o in found) else found


def _timed_out(signum, frame):
    raise CellTimeoutError("the cell ran past its time limit and was stopped")


class Stream:
    """sys.stdout or sys.stderr while a cell runs: text appended to the cell's outputs."""

    encoding = "utf-8"

    def __init__(self, outputs: list, name: str):
        self.outputs, self.name = outputs, name

    def write(self, text: str) -> int:
        text = text if isinstance(text, str) else str(text)
        last = self.outputs[-1] if self.outputs else None
        if last is not None and last.get("output_type") == "stream" and last["name"] == self.name:
            if len(last["text"]) < OUTPUT_TEXT:
                last["text"] += text
        else:
            self.outputs.append({"output_type": "stream", "name": self.name, "text": text})
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


# -- speed ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Kept:
    """The student's side of a speed cell's measurement: its call's time, what its timing
    flagged and what the checks after it found; the code cell it ended in (Speed.cells), and the
    session with the number of calls it had made by then."""

    key: tuple
    mine: object  # grader.runtime.timing.Timing
    timing_flags: tuple[str, ...]
    checked: tuple[str, ...]
    cell: int
    session: Session
    calls: int

    @staticmethod
    def of(case) -> tuple:
        """What makes two cases one call: the function, its tensors, its kernels, its check."""
        return (case.candidate, case.out, *case.inputs, case.verify, *case.kernels)

    def holds(self, case, cell: int, session: Session) -> bool:
        """Whether `case`, asked in code cell `cell` before `session` sent anything, is the call
        kept in the code cell before, whose session sent nothing after the measurement."""
        same = len(self.key) == len(key := Kept.of(case)) and all(
            _same(a, b) for a, b in zip(self.key, key, strict=True)
        )
        return (
            same
            and cell == self.cell + 1
            and session.calls == 0
            and self.session.calls == self.calls
        )


def _same(a, b) -> bool:
    """Whether two parts of a case are one: the same object, equal strings, or two functions the
    same code made from the same objects in the same namespace (03's cells each build their case
    by one function of the release, whose lambda reads the notebook's globals). The cells
    compared are the release's own, adjacent, with nothing asked of the student's kernel between:
    only the release's code could rebind a global the lambda reads."""
    if a is b or (isinstance(a, str) and a == b):
        return True
    if not (isinstance(a, types.FunctionType) and isinstance(b, types.FunctionType)):
        return False
    return (
        a.__code__ is b.__code__
        and a.__globals__ is b.__globals__
        and _bound(a.__defaults__) == _bound(b.__defaults__)
        and _bound(a.__kwdefaults__) == _bound(b.__kwdefaults__)
        and _bound(a.__closure__) == _bound(b.__closure__)
    )


def _bound(values) -> tuple[int, ...] | None:
    """The identities of a function's defaults, keyword defaults or closure cells' contents."""
    if values is None:
        return None
    if isinstance(values, dict):
        return tuple(sorted((k, id(v)) for k, v in values.items()))
    found = []
    for v in values:
        if isinstance(v, types.CellType):
            try:
                v = v.cell_contents
            except ValueError:  # a cell not yet filled
                return (id(v),)
        found.append(id(v))
    return tuple(found)


class Speed:
    """The judge's measurement of a speed cell whose graded call runs in the student's kernel
    (perf asks it first, through watches.elsewhere). The call is made once to compile and tune,
    once more kept (Session.tracing); for each timed call the student's kernel draws the inputs
    from the judge's seed, flushes the L2 cache and makes the kept call again. Its time: its
    kernels' GPU time in the activity log (grader.grading.activity), which shows all the process
    ran. Calls picked after they ran are checked on inputs drawn here; baselines are timed here.

    A speed cell right after one that measured the same call (the same function on the same
    tensors, checked the same way), nothing having been asked of the student's kernel since,
    times its own baselines against that measurement (`Kept`): 02's two thresholds on one
    kernel measure it once."""

    PASSES = 2
    CALLS = 15  # timed calls a pass
    CHECKED = 3  # of which the judge checks the output: the last, and others at random

    def __init__(self, judge: Judge, log=None, why: str | None = None):
        self.judge = judge
        self.log = log  # grader.grading.activity.Log, or None (then `why` says why)
        self.why = why
        self.cells = 0  # code cells begun (`next_cell`)
        self._kept: Kept | None = None  # the last measurement, for the next cell

    def next_cell(self) -> None:
        """A code cell begins, in the judge or in the student's kernel."""
        self.cells += 1

    def measure(self, case):
        """perf.Measured for `case`, or None where its call asks nothing of the student's kernel
        (perf then measures it here)."""
        from grader.grading import activity
        from grader.runtime import census, checks, perf

        session = self.judge._session
        if session is None or session.broken:
            return None
        label = case.name or "this problem"
        kept, self._kept = self._kept, None
        try:
            if kept is not None and kept.holds(case, self.cells, session):
                return self._timed_against(case, kept)
            checks.call_graded(case.candidate, what="the timed code")  # compiles, tunes
            with session.tracing() as traced:
                checks.call_graded(case.candidate, what="the timed code")
            if not traced:
                return None
            if self.log is None or not self.log.connected:
                why = self.why or (self.log.broken if self.log else None) or "no GPU activity log"
                return perf.Measured(label, unavailable=f"speed cannot be measured here: {why}")
            return self._measured(case, session, label)
        except (activity.ActivityError, census.CensusUnavailable) as exc:
            return perf.Measured(label, unavailable=f"speed cannot be measured here: {exc}")

    def _measured(self, case, session: Session, label: str):
        import random
        import secrets

        import torch

        from grader.grading import activity
        from grader.runtime import perf, timing

        if case.out is None and not isinstance(session.last_result, torch.Tensor):
            return perf.Measured(label, flags=("the timed code returned no tensor",))
        flags = self._checked(case)
        if flags:
            return perf.Measured(label, flags=tuple(flags))
        # the output checked: `out`, or the tensor the last call returned, which case.verify
        # reads (the judge's copy of the checked call's result, which a fetch writes again)
        output = case.out if case.out is not None else session.last_result
        inputs = [t for t in case.inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
        moments = [(float(t.float().mean()), float(t.float().std())) for t in inputs]
        fills = sum(3 if t.element_size() == 1 else 1 for t in inputs)  # float8: draw, clamp, copy
        marker = timing.FLUSH_BYTES + 2 * secrets.randbelow(1 << 16) + 1  # a size no one fills
        before = len(self.log.flush())
        fetched: dict[int, int] = {}  # timed call -> bytes of its output copied here
        redraw, flush, seen = self._baselines_first(case)
        with seen.session():
            for p in range(self.PASSES):
                picked = {self.CALLS - 1, *random.sample(range(self.CALLS - 1), self.CHECKED - 1)}
                for i in range(self.CALLS):
                    seed = secrets.randbits(62)
                    session.timed(inputs, moments, seed, marker)
                    if i in picked:
                        fetched[p * self.CALLS + i] = session.fetch(output, result=case.out is None)
                        wrong = self._output_of(case, inputs, moments, seed)
                        if wrong:
                            return perf.Measured(label, flags=(wrong,))
                self._baselines_once(case, seen, redraw, flush)
            torch.cuda.synchronize()
        baselines = self._baseline_times(case, seen)
        records = self.log.flush()[before:]
        calls = self.PASSES * self.CALLS
        found = activity.timed_calls(records, calls=calls, marker=marker, fills=fills,
                                     kernels=set(case.kernels), fetched=fetched)  # fmt: skip
        flags = list(found.flags)
        times = tuple(ns / 1e6 for ns in found.ns if ns)
        if not times:
            return perf.Measured(label, flags=tuple(flags or ["no timed call ran a kernel"]))
        mine = timing.Timing(times, self.PASSES, True)
        flags, checked = tuple(flags), () if flags else tuple(self._checked(case))
        measured = self._verdict(case, mine, flags, checked, baselines)
        # kept once the checks after it are made: the next cell may ask nothing more of the kernel
        self._kept = Kept(Kept.of(case), mine, flags, checked, self.cells, session, session.calls)
        return measured

    def _timed_against(self, case, kept: Kept):
        """`case`'s verdict from the student's call as `kept` measured it, its own baselines
        timed now, as the student's call was: fresh inputs, the L2 cache flushed."""
        import torch

        redraw, flush, seen = self._baselines_first(case)
        with seen.session():
            for _ in range(self.PASSES):
                self._baselines_once(case, seen, redraw, flush)
            torch.cuda.synchronize()
        baselines = self._baseline_times(case, seen)
        return self._verdict(case, kept.mine, kept.timing_flags, kept.checked, baselines)

    def _baselines_first(self, case):
        """What timing `case`'s baselines uses (a redraw of its inputs, a buffer whose fill
        flushes the L2 cache, a census of their GPU time), after a first call of each."""
        import torch

        from grader.runtime import census, perf, timing

        for b in case.baselines:
            b.fn()  # a first call: workspaces, handles
        flush = torch.empty(timing.FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        return perf.Redraw(case.inputs), flush, census.Census()

    def _baselines_once(self, case, seen, redraw, flush) -> None:
        """One pass of `case`'s baselines, timed as the student's call: fresh inputs, L2 flushed."""
        for b in case.baselines:
            for _ in range(self.CALLS):
                redraw()
                flush.zero_()
                with seen.window(b.name):
                    b.fn()

    def _baseline_times(self, case, seen) -> dict:
        """Each baseline's GPU time: torch's profiler reads the CUPTI records the log does."""
        from grader.runtime import timing

        baselines = {}
        for b in case.baselines:
            times = tuple(us / 1e3 for us in seen.durations(b.name) if us) or (float("nan"),)
            baselines[b.name] = timing.Timing(times, self.PASSES, True)
        return baselines

    def _verdict(self, case, mine, timing_flags: tuple, checked: tuple, baselines: dict):
        """perf.Measured of the student's call timed at `mine` against `baselines`: what the
        timing flagged, then the checks after it (`checked`), a baseline's output reproduced,
        a ceiling passed; where none, the DRAM bytes where the case counts them."""
        from grader.runtime import perf

        results = [perf.Comparison("yours", mine, n, t, timing_flags) for n, t in baselines.items()]
        flags = [*timing_flags, *checked]
        if not flags:
            flags += perf.identity_flags(case)
        if not flags:
            flags += perf.ceiling_flags_of(case, {c.baseline_name: c for c in results})
        measured = perf.measured_from(case, results, flags)
        if case.traffic is None or flags:
            return measured
        # the DRAM bytes, counted by ncu run as root in the student's sandbox, its report in a
        # folder only root enters; the profiled child, as the sandbox's user, replays the
        # notebook's answer cells before this one and the given cells the call needs, then makes
        # the call
        sources = self.judge.prefix(case.traffic.factory.__name__)
        found = perf.counted(case.traffic, case.kernels, sources=sources,
                             runner=self.judge.profiled)  # fmt: skip
        return dataclasses.replace(measured, **found)

    def _checked(self, case) -> list[str]:
        """One call on the judge's inputs, `out` poisoned first: the log must show the
        exercise's kernels alone, and `out` must be right (then every element is their work)."""
        from grader.runtime import census, checks, perf

        kernels = " or ".join(case.kernels)
        if case.out is not None:
            case.out.copy_(checks.poisoned(case.out.shape, case.out.dtype, case.out.device.type))
        before = len(self.log.flush())
        checks.call_graded(case.candidate, what="the timed code")
        ran = [r.name for r in self.log.flush()[before:] if r.kind == "kernel"]
        flags = [
            f"`{census.short(name)}` ran inside a checked call: only the exercise's Triton kernels "
            "may run there. Did a library compute the result?"
            for name in dict.fromkeys(n for n in ran if n not in case.kernels)
        ]
        if not any(n in case.kernels for n in ran):
            flags.append(f"the checked call launched none of {kernels}")
        try:
            case.verify()
        except checks.KernelCheckError as wrong:
            flags += perf.not_their_work(case.kernels, wrong)
        return flags

    def _output_of(self, case, inputs, moments, seed: int) -> str | None:
        """Why the output of the timed call just made, fetched, is wrong for the inputs drawn
        from `seed` (drawn again here, the same way), or None."""
        import torch

        from grader.runtime import checks, perf

        generator = torch.Generator(inputs[0].device)
        generator.manual_seed(seed)
        perf.draw(inputs, moments, generator)
        try:
            case.verify()
        except checks.KernelCheckError as wrong:
            return perf.wrong_output(wrong)
        return None
