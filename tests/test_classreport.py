"""grader.grading.classreport on synthetic grades: the CSV an LMS imports, the Markdown report
and its plots, including what it says when speed could not be graded on the grading device."""

import csv

import pytest

from grader.grading import classreport
from grader.grading.findings import Finding, Speed

pytestmark = pytest.mark.tooling  # the HTML report uses mistune, which comes with nbconvert
POINTS = {"test-relu-visible": 1.0, "test-relu-hidden": 2.0, "speed-relu": 1.0}


def row(student, visible, hidden, speed, *found, late=0.0, penalty=0.0, measured=None):
    verdicts = []
    if measured is not None:
        verdicts = [Speed("speed-relu", True, measured >= 80, measured, 80.0, "%", 1)]
    return classreport.StudentRow(
        student,
        {"test-relu-visible": visible, "test-relu-hidden": hidden, "speed-relu": speed},
        list(found),
        verdicts,
        seconds_late=late,
        penalty=penalty,
    )


@pytest.fixture
def cpu_class():
    return classreport.ClassResults(
        "00_setup",
        "the CPU, in Triton's interpreter mode",
        False,
        dict(POINTS),
        [
            row("ana", 1, 2, 0),
            row("ben", 1, 0, 0),
            row("cy", None, None, None, Finding("not-a-notebook", "setup.ipynb is a PDF")),
            row("dee", 1, 2, 0, Finding("late", "2 h after the due date; a penalty of 1 points"),
                penalty=1),
            row("eve", 1, 2, 0, Finding("cheating", "cell f replaces grader.runtime.checks.check")),
        ],
    )  # fmt: skip


@pytest.fixture
def gpu_class(cpu_class):
    students = [
        row("ana", 1, 2, 1, measured=91),
        row("ben", 1, 0, 0, measured=42),
        row("cy", 1, 2, 1, measured=88),
    ]
    return classreport.ClassResults("00_setup", "NVIDIA H100 (sm_90)", True, POINTS, students)


def test_csv_has_one_row_per_student_and_a_column_per_cell(tmp_path, cpu_class):
    path = classreport.write_csv(cpu_class, tmp_path / "grades.csv")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["student_id"] for r in rows] == ["ana", "ben", "cy", "dee", "eve"]
    assert list(rows[0])[:6] == ["student_id", "score", "max_score", *POINTS]
    by = {r["student_id"]: r for r in rows}
    assert (by["ana"]["score"], by["ana"]["max_score"]) == ("3", "4")
    assert by["ben"]["test-relu-hidden"] == "0" and by["ben"]["needs_review"] == ""
    assert by["cy"]["score"] == "0" and by["cy"]["test-relu-visible"] == ""  # nothing recorded
    assert by["cy"]["needs_review"] == "not a notebook: setup.ipynb is a PDF"
    assert (by["dee"]["score"], by["dee"]["late_penalty"]) == ("2", "1")


def test_pass_rates(cpu_class):
    assert classreport.pass_rates(cpu_class) == {
        "test-relu-visible": 4 / 5,
        "test-relu-hidden": 3 / 5,
        "speed-relu": 0.0,
    }


def test_report_on_the_cpu_says_speed_was_not_graded(tmp_path, cpu_class):
    written = classreport.write(cpu_class, tmp_path)
    assert set(written) == {"csv", "scores", "cells", "markdown", "html"}
    text = written["markdown"].read_text()
    assert "**Speed was not graded on this device** (the CPU, in Triton's interpreter mode)" in text
    assert "`speed-relu` (not graded on this device)" in text
    assert "5 submissions, 3 of them need a human look" in text
    assert "| eve | 3 | cheating flagged: cell f replaces grader.runtime.checks.check |" in text
    assert "| ana |" not in text
    assert "not a notebook: 1, cheating flagged: 1, late: 1" in text
    assert "![score distribution](scores.png)" in text
    for figure in ("scores", "cells"):
        assert written[figure].read_bytes().startswith(b"\x89PNG")
    html = written["html"].read_text()
    assert "<table>" in html and '<img src="pass_rate.png"' in html


def test_report_on_a_gpu_plots_the_speed(tmp_path, gpu_class):
    written = classreport.write(gpu_class, tmp_path)
    assert written["speed"].read_bytes().startswith(b"\x89PNG")
    text = written["markdown"].read_text()
    assert "not graded on this device" not in text
    assert "| `speed-relu` | 3 | 88% | 80% | 1.10 | 2 of 3 |" in text
    assert "None: every submission was graded without trouble." in text


def test_cells_with_several_comparisons_compare_by_ratio(gpu_class):
    worst = [(0.9, True), (0.6, False), (1.2, True)]  # the comparison closest to failing
    for s, (measured, passed) in zip(gpu_class.students, worst, strict=True):
        s.speed = [Speed("speed-relu", True, passed, measured, 0.8, "x", 4)]
    text = classreport.render_markdown(gpu_class, {})
    assert "| `speed-relu` | 3 | (several comparisons) | each its own | 1.12 | 2 of 3 |" in text


def test_no_measurement_on_a_gpu_is_not_called_a_cpu(gpu_class):
    for s in gpu_class.students:
        s.speed = [Speed("speed-relu", True)]  # every isolated measurement failed
    text = classreport.render_markdown(gpu_class, {})
    assert "no speed cell printed a measurement" in text
    assert classreport.plot_speed(gpu_class, None) is None


def test_an_empty_class_still_reports(tmp_path):
    empty = classreport.ClassResults("00_setup", "the CPU", False, dict(POINTS), [])
    written = classreport.write(empty, tmp_path)
    assert "0 submissions" in written["markdown"].read_text()
    assert written["csv"].read_text().startswith("student_id,score,max_score")


def test_students_whose_notebook_ran_on_other_versions_are_named():
    import nbformat

    from grader.grading import assemble
    from grader.runtime import published

    nb = nbformat.v4.new_notebook()
    setup = nbformat.v4.new_code_cell("DEVICE = device.setup()")
    said = {"torch": "2.13.0", "triton": "3.9.0", "mode": "interpreter"}
    setup.outputs = [nbformat.v4.new_output("display_data", {published.VERSIONS_MIMETYPE: said})]
    nb.cells = [nbformat.v4.new_markdown_cell("# 00"), setup]
    assert assemble.ran_on(nb) == said
    assert assemble.ran_on(nbformat.v4.new_notebook()) == {}
    students = [row("ana", 1, 2, 0), row("ben", 1, 2, 0), row("cy", 1, 2, 0)]
    students[0].ran_on = said
    students[1].ran_on = {"torch": "2.11.0", "triton": "3.6.0", "mode": "gpu"}
    grader = {"torch": "2.11.0", "triton": "3.6.0"}
    results = classreport.ClassResults("00_setup", "NVIDIA H200", True, POINTS, students,
                                       versions=grader)  # fmt: skip
    assert [s.student for s in results.other_versions()] == ["ana"]  # cy recorded nothing
    section = classreport.render_markdown(results, {}).split("## Versions")[1]
    assert "torch 2.11.0, triton 3.6.0" in section
    assert "| ana | 3 | torch 2.13.0, triton 3.9.0, mode interpreter |" in section
    assert "ben" not in section and "cy" not in section


def test_setup_publishes_the_versions_in_a_notebook_kernel_alone(monkeypatch):
    import IPython
    import IPython.display

    from grader.runtime import device, published

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda data, raw: shown.append(data))
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    device._publish_versions("interpreter")
    assert shown == []  # a script, a test: nothing displayed

    monkeypatch.setattr(IPython, "get_ipython", lambda: type("Shell", (), {"kernel": object()})())
    device._publish_versions("interpreter")
    (data,) = shown
    assert data[published.VERSIONS_MIMETYPE] == {**published.versions(), "mode": "interpreter"}
    assert data["text/plain"].startswith(f"torch {published.versions()['torch']}, Triton ")
