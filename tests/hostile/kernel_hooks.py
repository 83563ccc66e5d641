"""Attacks through the kernel's own machinery: an answer cell that installs IPython hooks so that
the test cells would run as something else, or their failures or scores would show as something
else (an input transformer, a pre_run_cell hook that quiets the checker, a custom exception
handler, no traceback, a display formatter that shows 0.0 as 1.0). The test cells run in the
judge, where no hook of the student's is installed: each scores its base."""

from tests import light
from tests.hostile import Attacker, on_blank

TRANSFORMER = """
def _skip_tests(lines):
    return ["pass\\n"] if any(line.startswith("assert ") for line in lines) else lines


get_ipython().input_transformers_post.append(_skip_tests)
"""

PRE_RUN_CELL = """
def _before(info):
    if "checks.check" in info.raw_cell:
        import grader.runtime.checks as quiet
        quiet.check = lambda *args, **kwargs: None


get_ipython().events.register("pre_run_cell", _before)
"""

CUSTOM_EXC = """
def _swallow(shell, etype, value, tb, tb_offset=None):
    return None


get_ipython().set_custom_exc((Exception,), _swallow)  # AssertionError and the stub's error
"""

NO_TRACEBACK = """
get_ipython().showtraceback = lambda *args, **kwargs: None
"""

# On the CPU the speed cell scores 0.0; shown as 1.0, nbgrader would record a point.
FORMATTER = """
_plain = get_ipython().display_formatter.formatters["text/plain"]
_plain.for_type(float, lambda value, p, cycle: p.text("1.0" if value == 0.0 else repr(value)))
"""


def _light(student, code):
    return on_blank(student, light.ASSIGNMENT, light.ANSWER, code)


ATTACKERS = [
    _light("hook-input-transformer", TRANSFORMER),
    on_blank(  # it quiets 00's checker, which the light assignment does not use
        "hook-pre-run-cell",
        "00_setup",
        "relu-kernel",
        PRE_RUN_CELL,
        frozenset({"cheating"}),
        "cell relu-kernel replaces grader.runtime.checks.check",
    ),
    _light("hook-custom-exception", CUSTOM_EXC),
    _light("hook-no-traceback", NO_TRACEBACK),
    Attacker(  # on a right kernel: its correctness points are its own, the speed point is not
        "hook-display-formatter",
        "00_setup",
        lambda m: m.files(m.appended(m.answered(), "relu-kernel", FORMATTER)),
        base=lambda m: m.answered(),
    ),
]
