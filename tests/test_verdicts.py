"""grader.grading.verdicts: speed verdicts read as data, never from printed text; a malformed
record is named, never read as a verdict."""

import pytest
from nbformat.v4 import new_output

from grader.grading import verdicts
from grader.runtime import perf


def shown(data, kind="display_data"):
    extra = {"execution_count": 1} if kind == "execute_result" else {}
    return new_output(kind, data={perf.SPEED_MIMETYPE: data, "text/plain": "..."}, **extra)


def good(comparison="eager", measured=1.5, needed=1.2, unit="x"):
    return perf.Verdict(comparison, measured, needed, unit).record()


def error():
    return new_output("error", ename="AssertionError", evalue="", traceback=[])


def test_the_graders_records_read_back():
    (r,) = verdicts.published([shown(good()), new_output("stream", name="stdout", text="x")])
    assert r == verdicts.Record("eager", 1.5, 1.2, "x", True)
    (r,) = verdicts.published([shown(perf.Verdict("copy bandwidth", 71.0, 80.0, "%").record())])
    assert (r.measured, r.needed, r.unit, r.passed) == (71.0, 80.0, "%", False)


@pytest.mark.parametrize(
    "data, why",
    [
        ([1, 2], "not a JSON object"),
        ({**good(), "comparison": ""}, "without a comparison name"),
        ({**good(), "measured": "9.9"}, "without finite figures"),
        ({**good(), "measured": float("inf")}, "without finite figures"),
        ({**good(), "needed": 0}, "without finite figures"),
        ({**good(), "unit": "GB/s"}, "with unit 'GB/s'"),
        ({**good(), "flags": "ok"}, "malformed flags"),
        ({**good(), "passed": False}, "says passed=False of 1.5x"),
        ({**good(measured=0.5), "passed": True}, "says passed=True of 0.5x"),
    ],
)
def test_malformed_records_are_named(data, why):
    (r,) = verdicts.published([shown(data)])
    assert isinstance(r, str) and why in r, r


def test_worst_is_the_comparison_closest_to_failing():
    records = [verdicts.parse(good("a", 0.95, 0.8)), verdicts.parse(good("b", 0.7, 0.8))]
    assert verdicts.worst(records).comparison == "b" and verdicts.worst([]) is None


def test_a_flagged_record_never_passes_and_may_have_no_figure():
    stopped = verdicts.parse(perf.Verdict("eager", None, 2.0, flags=("output wrong",)).record())
    assert (stopped.measured, stopped.passed, stopped.flags) == (None, False, ("output wrong",))
    fast = verdicts.parse(perf.Verdict("eager", 9.0, 2.0, flags=("timer replaced",)).record())
    assert fast.measured == 9.0 and not fast.passed
    assert "says passed=True of no figure" in verdicts.parse({**good(), "measured": None})
    assert "says passed=True" in verdicts.parse({**good(), "flags": ["timer replaced"]})
    assert verdicts.worst([stopped, fast]) is fast


def test_a_ceiling_passes_at_or_below_it_and_its_worst_is_the_closest_to_it():
    lean = perf.Verdict("the fewest DRAM bytes", 1.02, 1.1, at_most=True).record()
    heavy = perf.Verdict("the fewest DRAM bytes", 1.3, 1.1, at_most=True).record()
    assert verdicts.parse(lean).passed and not verdicts.parse(heavy).passed
    assert "says passed=False of 1.02x" in verdicts.parse({**lean, "passed": False})
    assert "says passed=True of 1.3x" in verdicts.parse({**heavy, "passed": True})
    assert "with at_most 'yes'" in verdicts.parse({**lean, "at_most": "yes"})
    assert "with at_most True in '%'" in verdicts.parse({**lean, "unit": "%"})
    speed = verdicts.parse(good("eager", 2.1, 2.0))  # 5% past its floor
    ceiling = verdicts.parse(lean)  # 8% under its ceiling
    assert verdicts.worst([speed, ceiling]) is speed
    assert verdicts.worst([speed, verdicts.parse(heavy)]).at_most


def test_a_cells_speed_reads_a_ceiling_the_right_way_up():
    from grader.grading import findings

    heavy = findings.Speed("speed-f", True, False, 1.3, 1.1, "x", 2, at_most=True)
    assert heavy.relative == pytest.approx(1.1 / 1.3) == verdicts.margin(1.3, 1.1, True)
    assert findings.Speed("speed-f", True, True, 2.4, 2.0, "x", 1).relative == pytest.approx(1.2)
    assert verdicts.margin(None, 1.1, True) is None
