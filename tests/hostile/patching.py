"""Class 2 of the attacks on grading: the checker replaced through a route a simple scan misses.
The patch sits on a blank notebook, so its honest base scores nothing; what nbgrader gives it is
not the question: it must be flagged."""

from tests.hostile import on_blank

QUIET = "lambda *args, **kwargs: None"


def _patch(student, code, detail, flags=frozenset({"cheating"})):
    return on_blank(student, "00_setup", "relu-kernel", code, flags, detail)


ATTACKERS = [
    _patch(
        "patch-checker-by-alias",
        "import grader.runtime.checks as c\nc.check = print",
        "cell relu-kernel replaces grader.runtime.checks.check",
    ),
    _patch(
        "patch-checker-by-exec",
        f"exec('import grader.runtime.checks as c\\nc.check = {QUIET}')",
        "cell relu-kernel replaces grader.runtime.checks.check (through exec)",
        flags=frozenset({"cheating", "dynamic-code"}),
    ),
    _patch(
        "patch-checker-by-built-exec",
        f"exec(''.join(['import grader.runtime.che', 'cks as c\\nc.check = {QUIET}']))",
        "cell relu-kernel runs code from a string with exec",
        flags=frozenset({"dynamic-code"}),
    ),
    _patch(
        "patch-checker-by-sys-modules",
        f"import sys\nsys.modules['grader.runtime.checks'].check = {QUIET}",
        "cell relu-kernel replaces grader.runtime.checks.check",
    ),
    _patch(
        "patch-checker-by-importlib",
        f"import importlib\nimportlib.import_module('grader.runtime.checks').check = {QUIET}",
        "cell relu-kernel replaces grader.runtime.checks.check",
    ),
    _patch(
        "patch-checker-by-setattr",
        f"setattr(checks, 'check', {QUIET})",
        "cell relu-kernel replaces grader.runtime.checks.check",
    ),
    _patch(
        "patch-checker-by-dict",
        f"vars(checks)['check'] = {QUIET}",
        "cell relu-kernel replaces grader.runtime.checks.check",
    ),
    _patch(
        "patch-checker-by-globals",
        f"import types\nglobals()['checks'] = types.SimpleNamespace(check={QUIET})",
        "cell relu-kernel rebinds checks, the release's grader.runtime.checks",
    ),
]
