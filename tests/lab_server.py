"""JupyterLab for the tests, started as `make lab` starts it (`python -m grader lab`).

`running(tmp, *extra)` starts it on a free loopback port with a token, headless, and stops it and
its kernels afterwards; `start`, `Lab.wait_ready` and `stop` do the same for several servers side
by side. Runtime files, saved workspaces and user settings live under `tmp`, so that a developer's
own JupyterLab neither changes what the tests see nor is changed by them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from grader.authoring import build

TOKEN = "course-test"
START_TIMEOUT_S = 120  # a busy 2-core CI machine imports the server's extensions slowly


@dataclass(frozen=True)
class Lab:
    """A JupyterLab server: where it listens, its runtime folder, its log and its process."""

    port: int
    runtime: Path
    log: Path
    process: subprocess.Popen = field(repr=False)

    def url(self, path: str = "/lab") -> str:
        """The address of `path` with the token, as a browser opens it."""
        quoted = urllib.parse.quote(path)
        return f"http://127.0.0.1:{self.port}{quoted}?token={TOKEN}"

    def api(self, path: str, method: str = "GET", body: dict | None = None):
        """Call the server's REST API; returns the decoded JSON reply."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Return once the server answers; raise with the end of its log if it never does."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.api("/api/status")
                return
            except OSError as exc:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"JupyterLab did not start within {timeout_s:.0f} s ({exc}); "
                        f"its log ends:\n{self.log_tail()}"
                    ) from None
                time.sleep(0.25)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(
    tmp: Path,
    *extra: str,
    cwd: Path | None = None,
    settings: dict[str, dict] | None = None,
    env: dict[str, str] | None = None,
) -> Lab:
    """Start `python -m grader lab *extra` on a free port and return at once; `cwd` is the folder
    it starts in, `settings` its user settings by plugin (e.g.
    {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}), `env` variables
    set on top of its environment (a user's HOME and Jupyter folders)."""
    tmp.mkdir(parents=True, exist_ok=True)
    for plugin, values in (settings or {}).items():
        package, name = plugin.split(":")
        path = tmp / "settings" / package / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    port, log = free_port(), tmp / "server.log"
    env = {**build.nbgrader_env(), "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"), **(env or {})}
    command = [
        sys.executable,
        "-m",
        "grader",
        "lab",
        "--no-browser",
        f"--port={port}",
        f"--IdentityProvider.token={TOKEN}",
        f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
        f"--LabApp.user_settings_dir={tmp / 'settings'}",
        *extra,
    ]
    with open(log, "wb") as out:
        # a process group of its own: `grader lab` waits on JupyterLab, and stop() ends both
        process = subprocess.Popen(
            command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Lab(port, tmp / "runtime", log, process)


def stop(*labs: Lab, timeout_s: float = 30) -> None:
    """SIGTERM to each server's process group, which lets JupyterLab shut its kernels down; SIGKILL
    to what is left of a group after `timeout_s`."""
    for lab in labs:
        try:
            os.killpg(lab.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    for lab in labs:
        try:
            while time.monotonic() < deadline:
                lab.process.poll()  # reaps `grader lab` once it has exited
                os.killpg(lab.process.pid, 0)  # raises once no process of the group is left
                time.sleep(0.1)
            os.killpg(lab.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        lab.process.wait()


@contextmanager
def running(
    tmp: Path,
    *extra: str,
    cwd: Path | None = None,
    settings: dict[str, dict] | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[Lab]:
    """A started server (see `start`) for the length of the block."""
    lab = start(tmp, *extra, cwd=cwd, settings=settings, env=env)
    try:
        lab.wait_ready()
        yield lab
    finally:
        stop(lab)
