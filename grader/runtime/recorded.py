"""The course's GPU measurements, recorded, for where a timing cell cannot run.

On a GPU, with COURSE_RECORD naming a folder (`make recordings` sets it), each measurement cell
keeps what it showed as data: `with recorded.cell("NN_topic/name"):` around the cell's GPU
branch captures its printed lines, and the figures it drew through a `replayable` function
(grader.runtime.plots, roofline.show, the autotuning explorer) as that function's arguments; a
speed cell (perf.grade) keeps its lines and verdicts under a key made from its own source.
`python -m grader recordings` collects them into one JSON file per notebook in RECORDINGS, with
the device, the driver, CUDA, torch and Triton versions and the date; those files ship with the
course. Where the cell cannot time (the interpreter), `recorded.show(key)` prints the recording's
label and replays it: the same lines, the same plots drawn from the recorded data.

While nbgrader grades (NBGRADER_EXECUTION=autograde), a figure is named, not drawn: it grades
nothing, and drawing cost up to a second of each graded student's CPU. Nothing here is ever
parsed back from text."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from pathlib import Path

from grader.runtime import device

RECORD_ENV = "COURSE_RECORD"  # a folder: this run's measurement cells write their records there
READ_ENV = "COURSE_RECORDINGS"  # a folder to read recordings from instead of RECORDINGS
RECORDINGS = Path(__file__).with_name("recordings")
SPOOL = "records.jsonl"  # the file in the COURSE_RECORD folder, one record a line
SPEED_PREFIX = "speed "  # the key of a speed cell: this and a digest of the cell's source
# the dataclasses a replayable function may take, rebuilt from their fields on replay
TYPES = {
    "roofline.Ceilings",
    "roofline.Point",
    "profile.Profile",
    "profile.KernelProfile",
    "profile.Conditions",
    "profile.Stall",
}
GRADING_ENV, GRADING = "NBGRADER_EXECUTION", "autograde"  # set in the kernel nbgrader grades in


class RecordingError(RuntimeError):
    """A record cannot be written or collected as it is."""


# -- recording, on a GPU ------------------------------------------------------------------------


class _Cell:
    """What one cell showed while recorded: its outputs in order, as data."""

    def __init__(self, stdout):
        self.outputs: list[dict] = []
        self.text: list[str] = []
        self.stdout = stdout
        self.muted = 0  # inside a replayable call: what it prints is not kept (replay prints it)

    def write(self, text: str) -> int:
        if not self.muted:
            self.text.append(text)
        return self.stdout.write(text)

    def __getattr__(self, name):  # flush, isatty, encoding, ... as the real stream's
        return getattr(self.stdout, name)

    def flush_text(self) -> None:
        if self.text:
            self.outputs.append({"text": "".join(self.text)})
            self.text = []

    def add(self, output: dict) -> None:
        self.flush_text()
        self.outputs.append(output)


_active: _Cell | None = None


def recording() -> bool:
    """Whether this run records its measurements (COURSE_RECORD is set)."""
    return bool(os.environ.get(RECORD_ENV))


def cell(key: str) -> AbstractContextManager[None]:
    """Around a measurement cell's GPU branch: when recording, keep what it prints and draws
    under `key` ("NN_topic/name", unique in the course). A branch that raises keeps nothing."""
    notebook, _, name = key.partition("/")
    if not (notebook and name):
        raise ValueError(f"a recorded cell's key is 'NN_topic/name', not {key!r}")
    return _capture(key, notebook)


@contextmanager
def _capture(key: str, notebook: str, **extra) -> Iterator[None]:
    global _active
    if not recording() or _active is not None:
        yield
        return
    record = _Cell(sys.stdout)
    _active, sys.stdout = record, record
    try:
        yield
    finally:
        sys.stdout, _active = record.stdout, None
    record.flush_text()
    write({"notebook": notebook, "key": key, "outputs": record.outputs, **extra})


def speed_cell() -> AbstractContextManager[None]:
    """Around a speed cell's grading, on a GPU: when recording, keep what it prints and its
    verdicts under the key of the cell's source (`speed_key`)."""
    source = cell_source()
    if source is None:
        return nullcontext()
    return _capture(speed_key(source), Path.cwd().name, source=source)


def note_verdict(verdict: dict) -> None:
    """A speed verdict (perf.Verdict.record()), kept as data in the cell being recorded."""
    if _active is not None:
        _active.add({"verdict": verdict})


def say(line: str, data: dict) -> None:
    """Print `line`; while recording, keep `data` in its place, not the text: a replay rebuilds
    what it shows from the data (a verdict's figures; a score, which it does not show)."""
    if _active is None:
        print(line)
        return
    _active.add(data)
    _active.muted += 1
    try:
        print(line)
    finally:
        _active.muted -= 1


def environment() -> dict:
    """The machine and versions a recording comes from."""
    dev = device.current()
    import torch
    import triton

    found = {
        "mode": dev.mode,
        "device": dev.name,
        "capability": f"sm_{''.join(map(str, dev.capability))}" if dev.capability else None,
        "driver": None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    with suppress(OSError, IndexError, subprocess.TimeoutExpired):
        smi = subprocess.run(query, capture_output=True, text=True, timeout=30)
        found["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 else None
    return found


def write(record: dict) -> None:
    """Append `record` (notebook, key, outputs) and this machine's `environment()` to the
    COURSE_RECORD folder's spool."""
    folder = Path(os.environ[RECORD_ENV])
    folder.mkdir(parents=True, exist_ok=True)
    record = {**record, "environment": environment()}
    with open(folder / SPOOL, "a") as f:
        f.write(json.dumps(plain(record)) + "\n")


def replayable(name: str, *, figure: bool = True) -> Callable:
    """Decorate a function that draws a figure (`figure`) or prints a table: while a cell is
    recorded, each call is kept as `name` ("module:function", importable) with its arguments, to
    be called again on replay; what the call itself prints is not kept as text, as its replay
    prints it. While nbgrader grades, a figure is named, not drawn; a table is printed."""

    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            cell_ = _active
            if cell_ is not None:
                cell_.add({"call": name, "args": plain(args), "kwargs": plain(kwargs)})
            if figure and os.environ.get(GRADING_ENV) == GRADING:
                print(f"(a figure, {name}: not drawn while grading)")
                return None
            if cell_ is None:
                return fn(*args, **kwargs)
            cell_.muted += 1
            try:
                return fn(*args, **kwargs)
            finally:
                cell_.muted -= 1

        return call

    return wrap


def plain(value):
    """`value` as JSON data: mappings as objects, sequences as lists, numbers as floats, the
    dataclasses of TYPES as their fields with a `__type__`."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        kind = f"{type(value).__module__.rpartition('.')[2]}.{type(value).__name__}"
        if kind not in TYPES:
            raise RecordingError(f"cannot record a {kind}: add it to recorded.TYPES")
        fields = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"__type__": kind, **fields}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, str | bool | int | float) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if hasattr(value, "tolist"):  # numpy and torch numbers and arrays
        return plain(value.tolist())
    raise RecordingError(f"cannot record a {type(value).__name__}: {value!r}")


def rebuilt(value):
    """Recorded data with the course's dataclasses (TYPES) rebuilt from their fields."""
    if isinstance(value, dict):
        if "__type__" in value:
            module, _, name = value["__type__"].partition(".")
            cls = getattr(importlib.import_module(f"grader.runtime.{module}"), name)
            return cls(**{k: rebuilt(v) for k, v in value.items() if k != "__type__"})
        return {k: rebuilt(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rebuilt(v) for v in value]
    return value


# -- the key of a speed cell --------------------------------------------------------------------


def cell_source() -> str | None:
    """The source of the cell IPython is running, or None outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None or not shell.history_manager.input_hist_raw:
        return None
    return shell.history_manager.input_hist_raw[-1]


def speed_key(source: str) -> str:
    """A speed cell's key: a digest of its source, blank lines and trailing spaces aside."""
    lines = [line.rstrip() for line in source.strip().splitlines() if line.strip()]
    return SPEED_PREFIX + hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


# -- reading and showing, where nothing can be timed ---------------------------------------------


def folder() -> Path:
    return Path(os.environ.get(READ_ENV) or RECORDINGS)


def load(notebook: str) -> dict | None:
    """The recording of `notebook` (NN_topic), or None where none ships."""
    path = folder() / f"{notebook}.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def find(key: str) -> tuple[dict, dict] | None:
    """(the notebook's recording, the cell's entry) for `key`, or None."""
    notebook = key.partition("/")[0] if "/" in key else None
    notebooks = [notebook] if notebook else sorted(p.stem for p in folder().glob("*.json"))
    for recording_ in filter(None, map(load, notebooks)):
        if key in recording_.get("cells", {}):
            return recording_, recording_["cells"][key]
    return None


def entry(key: str) -> dict | None:
    """The recorded cell `key` ({"outputs": [...], ...}): while this run records (`make
    recordings`), the run's own record of it, so that a later cell can read what was just
    measured; else the one that ships with the course; None where there is neither."""
    if recording():
        spool = Path(os.environ[RECORD_ENV]) / SPOOL
        lines = spool.read_text().splitlines() if spool.exists() else []
        mine = next((r for r in map(json.loads, reversed(lines)) if r["key"] == key), None)
        if mine is not None:
            return mine
    found = find(key)
    return None if found is None else found[1]


def label(e: dict) -> str:
    """The line a recorded measurement is shown under: where, when and with what it was taken."""
    where = e["device"] + (f" ({e['capability']})" if e.get("capability") else "")
    extra = ", ".join(
        f"{n} {e[k]}" for n, k in (("driver", "driver"), ("CUDA", "cuda")) if e.get(k)
    )
    return (
        f"Recorded on {where}, {e['date']}, torch {e['torch']}, Triton {e['triton']}"
        f"{f' ({extra})' if extra else ''}: the course's reference solution measured on a GPU, "
        "not this machine and not your code."
    )


def show(key: str) -> bool:
    """Show the recorded GPU measurement of the cell `key`: its label, then what the cell showed
    on the GPU (lines printed again, figures drawn again from their data). Says so plainly where
    none was recorded. Returns whether one was shown."""
    missing = (
        f"No GPU recording of this cell ({key}) ships with this copy of the course; run it on a "
        "GPU to see the measurement."
    )
    return _show(find(key), missing)


def show_speed() -> bool:
    """Show the recorded GPU grading of the speed cell now running (found by its source), if
    the course recorded it."""
    source = cell_source()
    found = None if source is None else find(speed_key(source))
    missing = "No GPU recording of this speed cell ships with this copy of the course."
    return _show(found, missing, " What the reference measured there (a recording awards nothing):")


def _show(found: tuple[dict, dict] | None, missing: str, after_label: str = "") -> bool:
    if found is None:
        print(missing)
        return False
    recording_, entry_ = found
    print(label(recording_["environment"]) + after_label)
    replay(entry_["outputs"], recording_["environment"])
    return True


def replay(outputs: list[dict], env: dict) -> None:
    """Print each recorded text again and draw each recorded figure again; a speed verdict as
    its figure and threshold, with no mark, and no score: nothing is judged here."""
    for output in outputs:
        if "text" in output:
            sys.stdout.write(output["text"])
        elif "call" in output:
            module, _, name = output["call"].partition(":")
            fn = getattr(importlib.import_module(module), name)
            kwargs = rebuilt(output["kwargs"])
            if isinstance(kwargs.get("title"), str):
                kwargs["title"] += f"\n(recorded on {env['device']}, {env['date']})"
            fn(*rebuilt(output["args"]), **kwargs)
        elif "verdict" in output:
            from grader.runtime.published import Verdict

            print(Verdict.read(output["verdict"]).line())
    sys.stdout.flush()
