"""Class 2 of the attacks on grading: the checker replaced in the student's process, through
routes a scan of names cannot follow (an alias, exec, sys.modules, a module's dictionary written
through a function, an attribute set through a parameter). The checks run in the judge, where
none of it reaches: each scores its blank base, nothing. Where the answer cell's source shows a
route (grader.grading.detectors.reaches), it is flagged for a human too."""

from tests.hostile import on_blank

QUIET = "lambda *args, **kwargs: None"
DYNAMIC = frozenset({"dynamic-code"})


def _patch(student, code, flags=frozenset(), detail=None):
    return on_blank(student, "00_setup", "relu-kernel", code, flags, detail)


ATTACKERS = [
    _patch(
        "patch-checker-by-alias",
        "import grader.runtime.checks as c\nc.check = print",
        frozenset({"cheating"}),
        "cell relu-kernel replaces grader.runtime.checks.check",
    ),
    _patch(
        "patch-checker-by-exec",
        f"exec(''.join(['import grader.runtime.che', 'cks as c\\nc.check = {QUIET}']))",
        DYNAMIC,
        "cell relu-kernel runs code from a string with exec",
    ),
    _patch(
        "patch-checker-by-sys-modules",
        f"import sys\nsys.modules['grader.runtime.checks'].check = {QUIET}",
    ),
    _patch(
        "patch-checker-by-setattr",
        f"setattr(checks, 'check', {QUIET})",
        DYNAMIC,
        "cell relu-kernel sets attributes by name (setattr)",
    ),
    _patch(
        "patch-checker-by-function",
        f"def _put(space, name, value):\n    space[name] = value\n\n\n"
        f"_put(checks.__dict__, 'check', {QUIET})",
    ),
    _patch(
        "patch-checker-by-parameter",
        f"def _quiet(module):\n    module.check = {QUIET}\n    module.compare = {QUIET}\n\n\n"
        "_quiet(checks)",
    ),
    _patch(
        "patch-checker-by-globals",
        f"import types\nglobals()['checks'] = types.SimpleNamespace(check={QUIET})",
        DYNAMIC,
        "cell relu-kernel reaches a namespace through globals()",
    ),
]
