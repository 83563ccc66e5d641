"""bench/throughput.py's bookkeeping, without a GPU: the synthetic class it grades, and the
summary that compares the runs (scores that must agree, speed within the reference's noise)."""

import importlib

import nbformat
import pytest

from bench import throughput


def test_the_class_mixes_every_kind_in_fixed_proportions():
    members = throughput.synthetic_class("07_flash_attention", 16)
    kinds = [s.kind for s, _ in members]
    assert {k: kinds.count(k) for k in set(kinds)} == {
        "reference": 6, "slow": 4, "wrong": 4, "crash": 2,
    }  # fmt: skip
    assert len({s.name for s, _ in members}) == 16
    module = importlib.import_module("tests.known_wrong.nb07_flash_attention")
    for kind, pool in (("slow", module.SLOW), ("wrong", module.WRONG)):
        used = [s.variant for s, _ in members if s.kind == kind]
        size = sum(len(v) for v in pool.values())
        assert len(set(used)) == min(len(used), size), (kind, used)  # each kind cycles its pool


@pytest.mark.slow  # a generated course
def test_each_member_differs_from_the_reference_where_its_kind_says(tmp_path, registered_course):
    members = throughput.synthetic_class("07_flash_attention", 8)
    throughput.write_inbox(tmp_path, "07_flash_attention", registered_course, members)
    notebooks = {
        s.name: nbformat.read(next((tmp_path / s.name).rglob("*.ipynb")), as_version=4)
        for s, _ in members
    }
    reference = [s.name for s, _ in members if s.kind == "reference"]
    assert len({nbformat.writes(notebooks[r]) for r in reference}) == 1
    for student, sources in members:
        text = nbformat.writes(notebooks[student.name])
        if student.kind == "crash":
            assert "os._exit(1)" in text
        elif student.kind != "reference":
            assert text != nbformat.writes(notebooks[reference[0]]), student
            for source in sources.values():
                assert source in [c.source for c in notebooks[student.name].cells]


def _run(gpus, seconds, totals, speed):
    return throughput.Run(gpus, seconds + 10, seconds, totals, speed)


def test_summary_finds_a_changed_score_and_speed_beyond_the_noise():
    members = [
        (throughput.Student("a", "reference", ""), {}),
        (throughput.Student("b", "reference", ""), {}),
        (throughput.Student("c", "slow", "x"), {}),
    ]
    one = _run(
        "0",
        300.0,
        {"a": 10, "b": 10, "c": 7},
        {"a": {"speed-x": 1.60}, "b": {"speed-x": 1.70}, "c": {"speed-x": 0.30}},
    )
    two = _run(
        "0,1",
        160.0,
        {"a": 10, "b": 10, "c": 6},
        {"a": {"speed-x": 1.65}, "b": {"speed-x": 1.95}, "c": {"speed-x": 0.31}},
    )
    s = throughput.summary(
        "07_flash_attention", members, [one, two], {"device": "d", "versions": {}}
    )
    assert s["disagreements"] == [{"student": "c", "totals": [7, 6]}]
    within = {row["student"]: row["within_noise"] for row in s["speed"]}
    assert within == {"a": True, "b": False, "c": True}  # noise: 1.70 / 1.60
    assert "| b | speed-x | 1.700 / 1.950 | **no** |" in throughput.markdown(s)
    assert s["gain"] == [1.0, 300 / 160]
    p = s["projection"]
    assert p["seconds_per_student_one_gpu"] == 100.0
    assert p["hours"] == 100.0 * 300 / (8 * (300 / 160) / 2) / 3600
    assert "scores differ for 1 of 3 students" in throughput.markdown(s)


def test_summary_of_the_first_run_alone():
    members = [(throughput.Student("a", "reference", ""), {})]
    one = _run("0", 60.0, {"a": 10}, {"a": {"speed-x": 1.6}})
    s = throughput.summary("07_flash_attention", members, [one], {"device": "d", "versions": {}})
    assert s["speed"] == [] and s["gain"] == [1.0] and s["disagreements"] == []
    assert s["projection"]["hours"] == 60.0 * 300 / 8 / 3600
    assert "| 0 | 70.0 | 60.0 | 60.0 | 1.00x | - |" in throughput.markdown(s)  # no student times


def test_the_gain_a_class_allows_is_its_last_students_tail():
    """Eight students as grade_here hands them out, by name, each to the first GPU free: on two
    GPUs the last ends alone, so the class allows less than 2x whatever the grader does."""
    seconds = {"s0": 40, "s1": 45, "s2": 30, "s3": 40, "s4": 5, "s5": 45, "s6": 30, "s7": 40}
    # GPU A: s0 (0-40), s2 (40-70), s4 (70-75), s5 (75-120); GPU B: s1 (0-45), s3 (45-85),
    # s6 (85-115), s7 (115-155)
    assert throughput.allowed(seconds, 2) == 275 / 155
    assert throughput.allowed(seconds, 1) == 1.0
    assert throughput.allowed({f"s{i:02d}": 30.0 for i in range(300)}, 2) == 2.0
    assert throughput.allowed({}, 2) is None
    members = [(throughput.Student(s, "reference", ""), {}) for s in seconds]
    one = throughput.Run("0", 290.0, 280.0, {s: 10 for s in seconds}, {}, seconds)
    two = throughput.Run("0,1", 170.0, 160.0, {s: 10 for s in seconds}, {})
    s = throughput.summary(
        "06_online_softmax", members, [one, two], {"device": "d", "versions": {}}
    )
    assert s["allowed"] == [1.0, 275 / 155]
    assert "| 0,1 | 170.0 | 160.0 | 180.0 | 1.75x | 1.77x |" in throughput.markdown(s)


def test_a_run_keeps_each_students_grading_time(monkeypatch, tmp_path):
    """grade() records the seconds grade_here reports for each student (the GPU batch itself
    needs a GPU; here the batch is a stand-in that hands two students to grade_here)."""
    from types import SimpleNamespace

    from grader.grading import autograde, devices, findings

    monkeypatch.setattr(devices, "detect", lambda: [])
    monkeypatch.setattr(devices, "select", lambda gpus, found: ["g0", "g1"])
    monkeypatch.setattr(
        autograde, "grade_here",
        lambda batch, todo, given: {s: findings.Run("ok", 10.0 + i) for i, s in enumerate(todo)},
    )  # fmt: skip

    def batch_of_two(batch, *, grade, **_):
        grade(batch, ["s00", "s01"], {})
        return SimpleNamespace(students=[]), {}

    monkeypatch.setattr(autograde, "autograde", batch_of_two)
    dev = SimpleNamespace(mode="gpu", describe=lambda: "d", grades_speed=True)
    run = throughput.grade("06_online_softmax", "0,1", tmp_path, tmp_path, dev)
    assert run.student_seconds == {"s00": 10.0, "s01": 11.0}
    assert run.grading_seconds >= 0 and run.gpus == "0,1"


def test_a_speed_cell_that_measured_nothing_is_reported_with_what_it_printed(tmp_path):
    """said() keeps the end of a silent speed cell's output from the graded notebook, and the
    report lists it under its run, so that a lost speed point shows its reason."""
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("perf.grade(...)")
    cell.metadata["nbgrader"] = {"grade_id": "speed-relu"}
    cell.outputs = [nbformat.v4.new_output("stream", text="NOT SCORED: no GPU activity log\n")]
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), cell]
    (tmp_path / "s05" / "00_setup").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "s05" / "00_setup" / "setup.ipynb")
    found = throughput.said(tmp_path / "s05", ["speed-relu"])
    assert found == {"speed-relu": "NOT SCORED: no GPU activity log\n"}
    members = [(throughput.Student("s05", "reference", ""), {})]
    one = throughput.Run("0", 30.0, 25.0, {"s05": 3}, {"s05": {"speed-relu": None}})
    one.unmeasured = {"s05": found}
    s = throughput.summary("00_setup", members, [one], {"device": "d", "versions": {}})
    text = throughput.markdown(s)
    assert "- GPUs 0, s05, `speed-relu`: 'NOT SCORED: no GPU activity log'" in text


def test_how_a_wider_run_changed_each_steps_time_is_named(tmp_path):
    """Each student's Execute record (grader.grading.cost), its cells named as the release names
    them, and the steps whose time changed most from the first run to the two-GPU run."""
    from grader.grading.cost import NotebookTimes

    nb = nbformat.v4.new_notebook()
    speed = nbformat.v4.new_code_cell("perf.grade(...)")
    speed.metadata["nbgrader"] = {"grade_id": "speed-relu"}
    nb.cells = [nbformat.v4.new_code_cell("# setup\nimport torch"), speed]
    (tmp_path / "release" / "00_setup").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "release" / "00_setup" / "setup.ipynb")

    def times(student, start, cells):
        return NotebookTimes("setup", student, start, 0.5, cells)

    alone = [times("a", 2.0, [3.0, 9.0]), times("b", 2.0, [3.0, 8.0])]
    steps = throughput.steps(tmp_path, "00_setup", alone)
    assert steps["a"] == {"kernel start": 2.0, "kernel stop": 0.5, "import torch": 3.0,
                          "speed-relu": 9.0}  # fmt: skip
    side_by_side = throughput.steps(
        tmp_path, "00_setup", [times("b", 2.5, [3.1, 10.0]), times("a", 1.0, [3.0, 10.5])]
    )
    one = throughput.Run("0", 30.0, 25.0, {"a": 4, "b": 4}, {}, steps=steps)
    two = throughput.Run("0,1", 20.0, 15.0, {"a": 4, "b": 4}, {}, steps=side_by_side)
    assert throughput.changed(one, two)[:3] == [["speed-relu", 3.5], ["kernel start", -0.5],
                                              ["import torch", 0.1]]  # fmt: skip
    members = [(throughput.Student(s, "reference", ""), {}) for s in "ab"]
    s = throughput.summary("00_setup", members, [one, two], {"device": "d", "versions": {}})
    assert "summed over the class: `speed-relu` +3.5 s, `kernel start` -0.5 s" in (
        throughput.markdown(s)
    )
