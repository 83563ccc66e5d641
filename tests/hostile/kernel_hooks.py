"""Class 1 of the attacks on grading: a solution cell that changes how the cells after it run,
through the kernel's own machinery, so that the test cells run as something else or the score
shown is not the score earned. Each attack sits on a blank notebook (the released stub), where
every test must fail (the light assignment's of tests/light.py, or 00's for the attacks on its
checker): nbgrader's raw score may be fooled, which is why each must be flagged, by the scan
of its code (hooks) and, where the outputs give it away, by the tell-tale outputs (forged
output). Two routes do not fool nbgrader 0.9.6, which records an error from the kernel's
reply when no error output was shown: they must score 0 and still be flagged."""

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

# ipykernel still publishes the error a custom handler was given (its name and value): the
# handler changes only the traceback shown, so nbgrader scores the cell 0 all the same.
CUSTOM_EXC = """
def _swallow(shell, etype, value, tb, tb_offset=None):
    return None


get_ipython().set_custom_exc((Exception,), _swallow)  # AssertionError and the stub's error
"""

# Without showtraceback no error output is published at all; nbgrader adds the error from the
# kernel's reply itself, so this too scores 0.
NO_TRACEBACK = """
get_ipython().showtraceback = lambda *args, **kwargs: None
"""

# On the CPU the speed cell scores 0.0; shown as 1.0, nbgrader would record a point.
FORMATTER = """
_plain = get_ipython().display_formatter.formatters["text/plain"]
_plain.for_type(float, lambda value, p, cycle: p.text("1.0" if value == 0.0 else repr(value)))
"""


def _on_stub(student, code, detail, flags=frozenset({"hooks", "forged-output"})):
    return on_blank(student, light.ASSIGNMENT, light.ANSWER, code, flags, detail)


ATTACKERS = [
    _on_stub(
        "hook-input-transformer",
        TRANSFORMER,
        f"cell {light.ANSWER} adds an IPython input transformer: it can rewrite the test cells",
    ),
    on_blank(  # it quiets 00's checker, which the light assignment does not use
        "hook-pre-run-cell",
        "00_setup",
        "relu-kernel",
        PRE_RUN_CELL,
        frozenset({"hooks", "cheating", "forged-output"}),
        "cell relu-kernel registers an IPython pre_run_cell hook: it can rewrite the test cells",
    ),
    Attacker(
        "hook-custom-exception",
        light.ASSIGNMENT,
        lambda m: m.files(m.appended(m.release, light.ANSWER, CUSTOM_EXC)),
        flags=frozenset({"hooks"}),
        detail=f"cell {light.ANSWER} sets a custom exception handler: it can hide the tests' "
        "failures",
        total=0.0,
    ),
    Attacker(
        "hook-no-traceback",
        light.ASSIGNMENT,
        lambda m: m.files(m.appended(m.release, light.ANSWER, NO_TRACEBACK)),
        flags=frozenset({"hooks"}),
        detail=f"cell {light.ANSWER} replaces how IPython shows errors",
        total=0.0,
    ),
    Attacker(  # on a right kernel: its correctness points are its own, the speed point is not
        "hook-display-formatter",
        "00_setup",
        lambda m: m.files(m.appended(m.answered(), "relu-kernel", FORMATTER)),
        flags=frozenset({"hooks", "forged-output"}),
        detail="cell speed-relu scored 1 where speed is not graded",
        base=lambda m: m.answered(),
    ),
]
