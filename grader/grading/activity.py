"""The GPU activity log of a student's kernel, read by the judge: every kernel, copy and fill the
GPU ran for the student's process, with the GPU's own start and end times. Speed is graded from
it (grader.grading.judge): the student's process only launches its work; what ran, and for how
long, is what the GPU recorded.

`activity.c` is built on the grading host against its CUDA toolkit's CUPTI (`build`) and loaded
by the CUDA driver into the student's process as CUDA starts there (CUDA_INJECTION64_PATH), in the
notebook's first cell, a given one, before any of the student's code runs. It connects to the
judge's socket (`Log`), which sends it a fresh key; it sends back frames of records, each signed
with HMAC-SHA256 under that key and numbered. The judge accepts one connection, as the kernel's
first cell runs, and believes a frame only with its signature and the next number: a student's
code can stop the log (no speed is then graded, and the cell says why), not write it, short of
reading the library's memory from below Python (ctypes, /proc/self/mem: what
grader.grading.detectors flags for a human in the answer cells).

`flush()` asks for everything recorded so far and waits for the mark that ends it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import shutil
import socket
import struct
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from grader.runtime import census, wire

SOURCE = Path(__file__).with_name("activity.c")
LIBRARY = "COURSE_ACTIVITY_LIBRARY"  # nbgrader's environment: the library built for the batch
UNBUILT = "COURSE_ACTIVITY_UNBUILT"  # or why there is none
SOCKET = "COURSE_ACTIVITY_SOCKET"  # the kernel's: where the library connects
KEY_BYTES = 32
MAX_FRAME = 64 << 20
CUDA_ENV = ("CUDA_HOME", "CUDA_PATH")
CUDA_PLACES = ("/usr/local/cuda",)


class ActivityError(RuntimeError):
    """No trustworthy activity log: the message says why (to the student and the instructor)."""


@dataclass(frozen=True)
class Record:
    """One thing the GPU ran: "kernel" (with its name, grid and block), "memset" or "memcpy"
    (with their size in bytes), its start and end in GPU nanoseconds, and its stream."""

    kind: str
    start: int
    end: int
    stream: int
    name: str = ""
    size: int = 0
    grid: tuple[int, int, int] = (0, 0, 0)
    block: tuple[int, int, int] = (0, 0, 0)

    @property
    def ns(self) -> int:
        return self.end - self.start


def parse(payload: bytes) -> tuple[list[Record], list[int], int]:
    """The records of one frame's payload, the marks in it, and the records CUPTI dropped."""
    records, marks, lost, at = [], [], 0, 0
    while at < len(payload):
        kind = payload[at : at + 1]
        if kind == b"K":
            start, end, stream, _, *dims, length = struct.unpack_from("<QQII6iH", payload, at + 1)
            if at + 51 + length > len(payload):
                raise ActivityError("a kernel record cut short")
            name = payload[at + 51 : at + 51 + length].decode("utf-8", "replace")
            records.append(Record("kernel", start, end, stream, name, 0, tuple(dims[:3]),
                                  tuple(dims[3:])))  # fmt: skip
            at += 51 + length
        elif kind == b"S":
            start, end, stream, size = struct.unpack_from("<QQIQ", payload, at + 1)
            records.append(Record("memset", start, end, stream, size=size))
            at += 29
        elif kind == b"C":
            start, end, stream, size, _ = struct.unpack_from("<QQIQB", payload, at + 1)
            records.append(Record("memcpy", start, end, stream, size=size))
            at += 30
        elif kind == b"M":
            marks.append(struct.unpack_from("<Q", payload, at + 1)[0])
            at += 9
        elif kind == b"L":
            lost += struct.unpack_from("<Q", payload, at + 1)[0]
            at += 9
        else:
            raise ActivityError(f"an activity record of unknown kind {kind!r}")
    return records, marks, lost


class Log:
    """The judge's end: listens at `path`, takes the first connection, sends it a key, reads and
    checks its frames on a thread of its own."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.key = os.urandom(KEY_BYTES)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        os.chmod(self.path, 0o777)  # the sandbox's uid connects
        self.listener.listen(1)
        self.records: list[Record] = []
        self.marks: set[int] = set()
        self.lost = 0
        self.broken: str | None = None
        self._sock: socket.socket | None = None
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def connected(self) -> bool:
        return self._sock is not None and self.broken is None

    def _run(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        self.listener.close()  # one connection: the first, as the kernel's first cell runs
        self._sock = sock
        try:
            sock.sendall(self.key)
            expected = 0
            while True:
                head = wire.exactly(sock, 12)
                size, number = struct.unpack("<IQ", head)
                if size > MAX_FRAME:
                    raise ActivityError(f"a frame of {size} bytes")
                payload = wire.exactly(sock, size)
                mac = wire.exactly(sock, 32)
                want = hmac.new(self.key, head[4:] + payload, hashlib.sha256).digest()
                if not hmac.compare_digest(mac, want) or number != expected:
                    raise ActivityError("a frame that the activity library did not sign")
                expected += 1
                records, marks, lost = parse(payload)
                with self._changed:
                    self.records += records
                    self.marks.update(marks)
                    self.lost += lost
                    self._changed.notify_all()
        except (OSError, ConnectionError, ActivityError, struct.error) as exc:
            with self._changed:
                self.broken = self.broken or f"the GPU activity log broke off ({exc})"
                self._changed.notify_all()

    def flush(self, timeout: float = 30.0) -> list[Record]:
        """Every record up to now: asks the library to flush CUPTI's buffers and waits for its
        mark. ActivityError when the log is not there or broke."""
        if self._sock is None:
            raise ActivityError(
                "the GPU activity log never started: the kernel's process did not load the "
                "grader's CUPTI library as CUDA started (see docs/instructors.md)"
            )
        nonce = int.from_bytes(os.urandom(8), "little")
        with self._changed:
            if self.broken:
                raise ActivityError(self.broken)
            try:
                self._sock.sendall(b"F" + struct.pack("<Q", nonce))
            except OSError as exc:
                raise ActivityError(f"the GPU activity log is gone ({exc})") from None
            if not self._changed.wait_for(lambda: nonce in self.marks or self.broken, timeout):
                raise ActivityError("the GPU activity log did not answer a flush in time")
            if self.broken:
                raise ActivityError(self.broken)
            if self.lost:
                raise ActivityError(f"CUPTI dropped {self.lost} activity records")
            return list(self.records)

    def close(self) -> None:
        for s in (self.listener, self._sock):
            if s is not None:
                s.close()
        try:
            self.path.unlink()
        except OSError:
            pass


# -- building the library ------------------------------------------------------------------------


def cuda_root() -> Path | None:
    """The CUDA toolkit whose CUPTI the library is built against."""
    for name in CUDA_ENV:
        if os.environ.get(name):
            return Path(os.environ[name])
    nvcc = shutil.which("nvcc")
    places = [*CUDA_PLACES, *([str(Path(nvcc).resolve().parent.parent)] if nvcc else [])]
    return next((Path(p) for p in places if Path(p, "include", "cuda.h").exists()), None)


def _cupti(root: Path) -> tuple[Path, Path]:
    """(include folder, library folder) of CUPTI in the toolkit at `root`."""
    for include, lib in (
        ("include", "lib64"),
        ("include", "lib"),
        ("extras/CUPTI/include", "extras/CUPTI/lib64"),
        ("targets/x86_64-linux/include", "targets/x86_64-linux/lib"),
    ):
        if (root / include / "cupti.h").exists() and list((root / lib).glob("libcupti.so*")):
            return root / include, root / lib
    raise ActivityError(f"no CUPTI (cupti.h and libcupti.so) in the CUDA toolkit at {root}")


def build(into: Path) -> Path:
    """Compile activity.c into `into`/libcourse_activity.so (again only when the source or the
    toolkit changed), against the CUPTI of the host's toolkit."""
    root = cuda_root()
    if root is None:
        raise ActivityError("no CUDA toolkit found (set CUDA_HOME): it brings CUPTI")
    include, lib = _cupti(root)
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise ActivityError("no C compiler (cc) to build the GPU activity library")
    stamp = hashlib.sha256(SOURCE.read_bytes() + f"{include}{lib}".encode()).hexdigest()[:16]
    target = Path(into) / f"libcourse_activity-{stamp}.so"
    if target.exists():
        return target
    Path(into).mkdir(parents=True, exist_ok=True)
    made = target.with_suffix(".tmp")
    argv = [compiler, "-shared", "-fPIC", "-O2", f"-I{include}", str(SOURCE), f"-L{lib}",
            "-lcupti", "-lpthread", "-ldl", f"-Wl,-rpath,{lib}", "-o", str(made)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise ActivityError(f"building the GPU activity library failed:\n{done.stderr[-2000:]}")
    made.chmod(0o755)
    os.replace(made, target)
    return target


# -- a speed cell's timed calls, as the log shows them --------------------------------------------

TORCH_KERNEL = ("_ZN2at6native", "at::native::")  # torch's own kernels, mangled or not


@dataclass
class Timed:
    """What the log says of a speed cell's timed calls: the GPU time of the exercise's kernels in
    each call (nanoseconds), and why the figures cannot be trusted."""

    ns: list[int]
    flags: list[str]


def timed_calls(
    records: list[Record],
    *,
    calls: int,
    marker: int,
    fills: int,
    kernels: set[str],
    fetched: dict[int, int],
) -> Timed:
    """Read `calls` timed calls from the records the student's process ran while they were made,
    each expected as: the inputs drawn by `fills` of torch's own kernels, a fill of `marker`
    bytes (the L2 flush, which starts the call), the exercise's `kernels` and nothing else, then,
    for a call in `fetched` ({call: bytes}), the copy of its output to the host."""
    ordered = sorted(records, key=lambda r: (r.start, r.end))
    starts = [i for i, r in enumerate(ordered) if r.kind == "memset" and r.size == marker]
    flags = []
    if len(starts) != calls:
        return Timed([], [f"the log shows {len(starts)} timed calls where {calls} were made: "
                          "the calls did not run as the judge asked"])  # fmt: skip
    ends = [*starts[1:], len(ordered)]
    segments = [ordered[: starts[0]]] + [
        ordered[a + 1 : b] for a, b in zip(starts, ends, strict=True)
    ]
    times, idle, foreign = [], 0, {}
    for call, segment in enumerate(segments[1:]):
        ours = [r for r in segment if r.kind == "kernel" and r.name in kernels]
        times.append(sum(r.ns for r in ours))
        idle += not ours
        drawn = [r for r in segment if r.kind == "kernel" and r.name.startswith(TORCH_KERNEL)]
        copied = sum(r.size for r in segment if r.kind == "memcpy")  # the driver may split one
        if copied != fetched.get(call, 0):
            foreign.setdefault("a copy", None)
        last = call == calls - 1
        if len(drawn) != (0 if last else fills):
            foreign.setdefault("more or fewer of torch's own kernels than the inputs' draw", None)
        for r in segment:
            if r.kind == "kernel" and r.name not in kernels and not r.name.startswith(TORCH_KERNEL):
                foreign.setdefault(f"`{census.short(r.name)}`", None)
            elif r.kind == "memset":
                foreign.setdefault(f"a fill of {r.size} bytes", None)
        if drawn and ours and min(r.start for r in drawn) < max(r.end for r in ours):
            foreign.setdefault("torch's own kernels between the exercise's kernels", None)
    first = segments[0]
    if any(r.kind == "kernel" and r.name in kernels for r in first):
        foreign.setdefault("the exercise's kernel before the first timed call", None)
    if sum(r.kind == "kernel" and r.name.startswith(TORCH_KERNEL) for r in first) != fills:
        foreign.setdefault("more or fewer of torch's own kernels than the inputs' draw", None)
    flags += [
        f"{what} ran inside the timed calls: only the exercise's Triton kernels may run there. "
        "Did a library compute the result, or did the kernel run outside the calls timed?"
        for what in foreign
    ]
    if idle:
        flags.append(
            f"{idle} of {calls} timed calls launched none of {' or '.join(sorted(kernels))}: "
            "is work skipped on some calls?"
        )
    return Timed(times, flags)
