"""Text or data that imitates a speed verdict, and the verdict's publisher replaced. Verdicts are
read only from the records the judge publishes in speed cells, and only where speed is graded: on
the CPU the report must say speed was not graded, whatever a student printed, published or
replaced; each scores its base. (On a GPU, tests/hostile/speed_routes.py's publisher attack.)"""

from tests.hostile import Attacker

PRINTED = 'print("PASS 9.90x copy bandwidth (needs 80%): 1 of 1 points")'

# The type's name is built so that no literal of it appears in the source.
PUBLISHED = """
from IPython.display import display

display({"application/vnd." + "gpu-kernels-" + "course.speed+json": {
    "comparison": "copy bandwidth", "measured": 990.0, "needed": 80.0, "unit": "%",
    "passed": True, "flags": []}, "text/plain": "PASS"}, raw=True)
"""


def _speed_not_reported(graded):
    report = (graded.out / "report.md").read_text()
    speed = report.split("\n## Speed\n", 1)[1].split("\n## ", 1)[0]
    assert "Speed was not graded on this device" in speed, speed
    assert "| speed cell |" not in speed and "9.9" not in speed, speed


# The publisher replaced: every verdict the student's process publishes passes.
PUBLISHER = """
import grader.runtime.perf as _perf

_publish = _perf.publish_verdict


def _passing(verdict, text=None):
    return _publish(_perf.Verdict(verdict.comparison, 99.0, verdict.needed, verdict.unit))


_perf.publish_verdict = _passing
_perf.grade = lambda *args, **kwargs: 1.0
"""

ATTACKERS = [
    Attacker(
        "fake-verdict-printed",
        "00_setup",
        lambda m: m.files(m.appended(m.answered(), "relu-kernel", PRINTED)),
        base=lambda m: m.answered(),
        check=_speed_not_reported,
    ),
    Attacker(
        "fake-verdict-published",
        "00_setup",
        lambda m: m.files(m.appended(m.answered(), "relu-kernel", PUBLISHED)),
        base=lambda m: m.answered(),
        check=_speed_not_reported,
    ),
    Attacker(
        "verdict-publisher-replaced",
        "00_setup",
        lambda m: m.files(m.appended(m.answered(), "relu-kernel", PUBLISHER)),
        flags=frozenset({"cheating"}),
        detail="cell relu-kernel replaces grader.runtime.perf.grade",
        base=lambda m: m.answered(),
        check=_speed_not_reported,
    ),
]
