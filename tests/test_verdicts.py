"""grader.grading.verdicts: speed verdicts read as data, never from printed text."""

import pytest
from nbformat.v4 import new_output

from grader.grading import verdicts
from grader.runtime import perf


def shown(data, kind="display_data"):
    extra = {"execution_count": 1} if kind == "execute_result" else {}
    return new_output(kind, data={perf.SPEED_MIMETYPE: data, "text/plain": "..."}, **extra)


def good(comparison="eager", measured=1.5, needed=1.2, unit="x"):
    return perf.Verdict(comparison, measured, needed, unit).record()


def test_the_graders_records_read_back():
    (r,) = verdicts.published([shown(good()), new_output("stream", name="stdout", text="x")])
    assert r == perf.Verdict("eager", 1.5, 1.2, "x") and r.passed
    (r,) = verdicts.published([shown(perf.Verdict("copy bandwidth", 71.0, 80.0, "%").record())])
    assert (r.measured, r.needed, r.unit, r.passed) == (71.0, 80.0, "%", False)


def test_worst_is_the_comparison_closest_to_failing():
    records = [perf.Verdict.read(good("a", 0.95, 0.8)), perf.Verdict.read(good("b", 0.7, 0.8))]
    assert verdicts.worst(records).comparison == "b" and verdicts.worst([]) is None


def test_a_flagged_record_never_passes_and_may_have_no_figure():
    stopped = perf.Verdict.read(perf.Verdict("eager", None, 2.0, flags=("output wrong",)).record())
    assert (stopped.measured, stopped.passed, stopped.flags) == (None, False, ("output wrong",))
    fast = perf.Verdict.read(perf.Verdict("eager", 9.0, 2.0, flags=("timer replaced",)).record())
    assert fast.measured == 9.0 and not fast.passed
    assert verdicts.worst([stopped, fast]) is fast


def test_a_ceiling_passes_at_or_below_it_and_its_worst_is_the_closest_to_it():
    lean = perf.Verdict("the fewest DRAM bytes", 1.02, 1.1, at_most=True).record()
    heavy = perf.Verdict("the fewest DRAM bytes", 1.3, 1.1, at_most=True).record()
    assert perf.Verdict.read(lean).passed and not perf.Verdict.read(heavy).passed
    speed = perf.Verdict.read(good("eager", 2.1, 2.0))  # 5% past its floor
    ceiling = perf.Verdict.read(lean)  # 8% under its ceiling
    assert verdicts.worst([speed, ceiling]) is speed
    assert verdicts.worst([speed, perf.Verdict.read(heavy)]).at_most


def test_a_cells_speed_reads_a_ceiling_the_right_way_up():
    from grader.grading import findings

    heavy = findings.Speed("speed-f", True, False, 1.3, 1.1, "x", 2, at_most=True)
    assert heavy.relative == pytest.approx(1.1 / 1.3) == verdicts.margin(1.3, 1.1, True)
    assert findings.Speed("speed-f", True, True, 2.4, 2.0, "x", 1).relative == pytest.approx(1.2)
    assert verdicts.margin(None, 1.1, True) is None
