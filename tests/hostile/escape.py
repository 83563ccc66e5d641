"""Attacks on the grading machine from inside the student's kernel: reading the gradebook and the
hidden tests, reading and writing another student's files, writing into the course directory,
reaching the network, and leaving a process behind that outlives grading. Grading runs the
kernel in grader.grading.jail, where each attempt must fail: the attacker's kernel is honest
otherwise, so it scores its base, and what it saw (printed by its solution cell) is read back on
the trusted side from the executed notebook."""

from __future__ import annotations

import json
import socket
import threading
import time

import nbformat

from tests import light
from tests.hostile import Attacker, Graded, Materials, printed

STUDENT = "escape-artist"
VICTIM = "honest-1"
MARKER = "escape-artist-daemon"  # in the command line of the process meant to outlive grading


class Listener:
    """A TCP server on the host's 127.0.0.1 that counts the connections it is offered."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            conn, _ = self.server.accept()
            self.connections += 1
            conn.close()


_listener: Listener | None = None


def listener() -> Listener:
    global _listener
    if _listener is None:
        _listener = Listener()
    return _listener


def attack(port: int, m: Materials, hidden: str) -> str:
    """The code the attacker appends to its answer cell; it prints one line, ESCAPE {...}.
    `hidden`: the grade_id of a hidden test, which the source notebook names."""
    notebook = f"{m.notebook}.ipynb"
    return f'''
import json as _json, os as _os, pathlib as _pathlib, socket as _socket, sys as _sys
_root = _pathlib.Path.cwd().parents[2]  # nbgrader runs root/autograded/<student>/<assignment>
_seen = {{}}
def _attempt(name, action):
    try:
        _seen[name] = action()
    except Exception as e:
        _seen[name] = type(e).__name__
_source = _root / "source" / "{m.assignment}"
_attempt("gradebook", lambda: (_root / "gradebook.db").read_bytes()[:15].decode())
_attempt("source", lambda: sorted(_os.listdir(_source)))
_attempt("hidden", lambda: "{hidden}" in (_source / "{notebook}").read_text())
_victim = "{VICTIM}/{m.assignment}"
_attempt("victim", lambda: len((_root / "submitted" / _victim / "{notebook}").read_text()))
for _step in ("submitted", "autograded"):
    _attempt(f"write-{{_step}}", lambda: (_root / _step / _victim / "escape.txt").write_text("x"))
_attempt("write-root", lambda: (_root / "escape.txt").write_text("x"))
_attempt("network", lambda: _socket.create_connection(("127.0.0.1", {port}), 5) and "open")
def _daemon():
    if _os.fork() == 0:
        _os.setsid()
        if _os.fork() == 0:
            _null = _os.open(_os.devnull, _os.O_RDWR)
            for _fd in (0, 1, 2):
                _os.dup2(_null, _fd)
            _late = "import time, pathlib; time.sleep(20); "
            _late += f"pathlib.Path({{str(_root)!r}}, 'late.txt').write_text('x')"
            _os.execv(_sys.executable, [_sys.executable, "-c", _late, "{MARKER}"])
        _os._exit(0)
    _os.wait()
    return "started"
_attempt("daemon", _daemon)
print("ESCAPE", _json.dumps(_seen))
'''


def _files(m: Materials) -> dict[str, object]:
    hidden = f"test-{light.ANSWER}-hidden"
    return m.files(m.appended(m.answered(), light.ANSWER, attack(listener().port, m, hidden)))


def _seen(result: Graded) -> dict[str, object]:
    m = result.materials
    path = result.root / "autograded" / STUDENT / m.assignment / f"{m.notebook}.ipynb"
    nb = nbformat.read(path, as_version=4)
    lines = [
        line for text in printed(nb) for line in text.splitlines() if line.startswith("ESCAPE ")
    ]
    assert len(lines) == 1, f"the attack printed {len(lines)} ESCAPE lines"
    return json.loads(lines[0].removeprefix("ESCAPE "))


def _check(result: Graded) -> None:
    import psutil

    seen = _seen(result)
    for name in ("gradebook", "source", "hidden", "victim"):
        assert seen[name] == "FileNotFoundError", (name, seen[name])
    for name in ("write-submitted", "write-autograded", "write-root"):
        assert seen[name] in ("FileNotFoundError", "PermissionError"), (name, seen[name])
    assert seen["network"] == "ConnectionRefusedError", seen["network"]
    assert listener().connections == 0, "the kernel reached the host's network"
    assert seen["daemon"] == "started", seen["daemon"]  # it ran, and then died with the kernel
    survivors = [p for p in psutil.process_iter(["cmdline"]) if MARKER in (p.info["cmdline"] or [])]
    for p in survivors:
        p.kill()
    assert not survivors, "a process started by the kernel outlived grading"
    time.sleep(max(0.0, 25 - (time.time() - (result.out / "grades.csv").stat().st_mtime)))
    assert not (result.root / "late.txt").exists(), "a process wrote after grading"
    assert not list(result.root.rglob("escape.txt")), "the kernel wrote outside its folder"


ATTACKERS = [
    Attacker(
        STUDENT,
        light.ASSIGNMENT,
        _files,
        total="base",
        base=lambda m: m.answered(),
        check=_check,
    ),
]
