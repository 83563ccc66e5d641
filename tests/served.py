"""A student's namespace served to the judge as at grading (grader.runtime.serve answering
grader.grading.judge), from a process forked from the test's over a socket pair: for the tests
of what crosses the judge's wire."""

from __future__ import annotations

import multiprocessing
import socket

from grader.grading import judge
from grader.runtime import serve


class Served:
    """A session with a student's namespace served from a forked process; `proxy(name)` is the
    judge's. `serving(sock, namespace)`, where given, answers there in place of a plain Server."""

    def __init__(self, namespace: dict, settings=dict, serving=None):
        ours, theirs = socket.socketpair()
        fork = multiprocessing.get_context("fork")
        serving = serving or (lambda sock, ns: serve.Server(sock, ns).run())
        self.process = fork.Process(target=serving, args=(theirs, namespace), daemon=True)
        self.process.start()
        theirs.close()
        self.session = judge.Session(ours, "cpu", settings)
        self.judge = type("J", (), {"session": lambda _: self.session, "sources": {}})()
        self.described = self.session.describe(list(namespace))

    def proxy(self, name: str):
        info, codec = self.described[name]
        kind = info.get("kind")
        if kind == "kernel":
            return judge.RemoteKernel(self.judge, name)
        if kind == "function":
            return judge.Remote(self.judge, name)
        return codec.decode(info["value"]) if kind == "value" else info

    def close(self):
        self.session.end()
        self.process.join(timeout=10)
        assert self.process.exitcode == 0
