"""Recorded GPU measurements: a record run, the collector, the CPU path that shows them, and the
lint that holds every notebook cell that measures on a GPU to a recording path."""

import json

import pytest

from grader.authoring import build, recordings
from grader.runtime import perf, recorded

FAKE_GPU = {
    "mode": "gpu",
    "device": "NVIDIA H200",
    "capability": "sm_90",
    "driver": "570.86.15",
    "cuda": "12.8",
    "torch": "2.11.0",
    "triton": "3.6.0",
    "date": "2026-12-01",
}
DRAWN = []


@recorded.replayable("tests.test_recordings:draw")
def draw(x, ys, *, title):
    DRAWN.append((list(x), dict(ys), title))


@pytest.fixture
def record_run(tmp_path, monkeypatch):
    """A synthetic record run: COURSE_RECORD set, the machine a fake GPU."""
    spool = tmp_path / "spool"
    monkeypatch.setenv(recorded.RECORD_ENV, str(spool))
    monkeypatch.setattr(recorded, "environment", lambda: dict(FAKE_GPU))
    DRAWN.clear()
    return spool


def collected(spool, tmp_path, monkeypatch, sources=None):
    into = tmp_path / "recordings"
    recordings.collect(spool, into, sources)
    monkeypatch.delenv(recorded.RECORD_ENV)
    monkeypatch.setenv(recorded.READ_ENV, str(into))
    return into


SOURCE = '# %%\nwith recorded.cell("00_setup/sweep"):\n    x\nrecorded.show("00_setup/sweep")\n'


def test_a_recorded_cell_is_shown_on_the_cpu_with_its_label_and_plot(
    record_run, tmp_path, monkeypatch, capsys
):
    with recorded.cell("00_setup/sweep"):
        print("copy: 3900 GB/s")
        draw([1, 2], {"yours": (10.0, 20.0)}, title="Bandwidth on NVIDIA H200")
        print("after the plot")
    collected(record_run, tmp_path, monkeypatch, {"00_setup": SOURCE})
    capsys.readouterr()
    DRAWN.clear()

    assert recorded.show("00_setup/sweep")
    shown = capsys.readouterr().out
    label = shown.splitlines()[0]
    for part in ("Recorded on NVIDIA H200 (sm_90)", "2026-12-01", "torch 2.11.0", "Triton 3.6.0",
                 "driver 570.86.15", "CUDA 12.8"):  # fmt: skip
        assert part in label
    assert shown.index("copy: 3900 GB/s") < shown.index("after the plot")
    ((x, ys, title),) = DRAWN  # the same plot, drawn from the recorded data
    assert (x, ys) == ([1, 2], {"yours": [10.0, 20.0]})
    assert title.startswith("Bandwidth on NVIDIA H200") and "recorded on NVIDIA H200" in title


def test_while_grading_a_figure_is_named_not_drawn(record_run, tmp_path, monkeypatch, capsys):
    with recorded.cell("00_setup/sweep"):
        print("copy: 3900 GB/s")
        draw([1, 2], {"yours": (10.0, 20.0)}, title="Bandwidth on NVIDIA H200")
    collected(record_run, tmp_path, monkeypatch, {"00_setup": SOURCE})
    capsys.readouterr()
    DRAWN.clear()
    monkeypatch.setenv(recorded.GRADING_ENV, recorded.GRADING)

    assert recorded.show("00_setup/sweep")
    shown = capsys.readouterr().out
    assert "copy: 3900 GB/s" in shown
    assert "(a figure, tests.test_recordings:draw: not drawn while grading)" in shown
    assert DRAWN == []
    draw([1], {"mine": (1.0,)}, title="drawn live")  # a figure of the student's own numbers
    assert "not drawn while grading" in capsys.readouterr().out and DRAWN == []


def test_a_cell_without_a_recording_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(recorded.READ_ENV, str(tmp_path / "none"))
    assert not recorded.show("00_setup/sweep")
    assert "No GPU recording of this cell (00_setup/sweep)" in capsys.readouterr().out


def test_nothing_is_recorded_without_course_record(tmp_path, monkeypatch):
    monkeypatch.delenv(recorded.RECORD_ENV, raising=False)
    with recorded.cell("00_setup/sweep"):
        print("x")
    assert not list(tmp_path.iterdir())


def test_a_failing_cell_records_nothing(record_run):
    with pytest.raises(ZeroDivisionError), recorded.cell("00_setup/sweep"):
        print("half")
        1 / 0  # noqa: B018
    assert not (record_run / recorded.SPOOL).exists()


def test_collect_refuses_interpreter_records_and_missing_cells(record_run, tmp_path, monkeypatch):
    with recorded.cell("00_setup/sweep"):
        print("x")
    source = SOURCE + '# %%\nwith recorded.cell("00_setup/other"):\n    y\n'
    with pytest.raises(recordings.CollectError, match="no record of 00_setup/other"):
        recordings.collect(record_run, tmp_path / "out", {"00_setup": source})
    monkeypatch.setattr(recorded, "environment", lambda: {**FAKE_GPU, "mode": "interpreter"})
    (record_run / recorded.SPOOL).unlink()
    with recorded.cell("00_setup/sweep"):
        print("x")
    with pytest.raises(recordings.CollectError, match="not on a GPU"):
        recordings.collect(record_run, tmp_path / "out")


def test_a_speed_cell_shows_the_recorded_verdicts_and_still_scores_nothing(
    record_run, tmp_path, monkeypatch, capsys
):
    source = "perf.grade(case, points=1)"
    monkeypatch.setattr(recorded, "cell_source", lambda: source)
    with recorded.speed_cell():
        print("yours: 1.0 ms")
        verdicts = [
            perf.Verdict("eager", 2.5, 2.0),
            perf.Verdict("the fewest DRAM bytes", 0.96, 1.1, at_most=True),
        ]
        assert perf.score(verdicts, 1) == 1.0
    into = collected(record_run, tmp_path, monkeypatch)
    (path,) = into.glob("*.json")
    assert recorded.speed_key(source) in json.loads(path.read_text())["cells"]
    capsys.readouterr()

    assert perf.not_graded_here(1) == 0.0
    shown = capsys.readouterr().out
    assert "Your instructor grades speed on a GPU" in shown
    assert "Recorded on NVIDIA H200" in shown and "yours: 1.0 ms" in shown
    assert "2.50x eager (needs 2x)\n" in shown
    assert "0.96x the fewest DRAM bytes (at most 1.1x)\n" in shown  # a ceiling, shown as one
    replayed = shown.partition("(a recording awards nothing):")[2]
    assert replayed and not [w for w in JUDGED if w in replayed], shown
    monkeypatch.setattr(recorded, "cell_source", lambda: "perf.grade(other, points=1)")
    perf.not_graded_here(1)
    assert "No GPU recording of this speed cell" in capsys.readouterr().out


JUDGED = ("PASS", "NOT YET", "TOO SLOW", " ok", "points")  # what only a measurement here may say


@pytest.mark.parametrize("path", sorted(recorded.RECORDINGS.glob("*.json")), ids=lambda p: p.stem)
def test_a_committed_speed_recording_replays_figures_and_no_verdict(path, capsys):
    """A replayed speed cell shows what the reference measured on the recording's GPU, each
    comparison with its threshold, and no mark or score: a recording judges nothing here."""
    recording = json.loads(path.read_text())
    speed = [e for key, e in recording["cells"].items() if key.startswith("speed ")]
    for entry in speed:
        recorded.replay(entry["outputs"], recording["environment"])
        shown = capsys.readouterr().out
        assert [o for o in entry["outputs"] if "verdict" in o], entry["key"]
        for o in entry["outputs"]:
            if "verdict" in o:
                assert f"(needs {o['verdict']['needed']:g}" in shown or "at most" in shown, shown
        assert not [w for w in JUDGED if w in shown], (entry["key"], shown)


@pytest.mark.parametrize("a", build.assignments(), ids=lambda a: a.name)
def test_every_cell_that_measures_on_a_gpu_has_a_recording_path(a):
    assert recordings.problems(a.name, a.source.read_text()) == []


@pytest.mark.parametrize(
    ("cell", "problem"),
    [
        ("if DEVICE.supports('timing'):\n    t = timing.bench(f)\n", "records nothing"),
        ('print("On a GPU this cell times it")\n', "records nothing"),
        ('with recorded.cell("00_setup/a"):\n    timing.bench(f)\n', "never shown"),
        (
            'with recorded.cell("01_roofline/a"):\n    x\nrecorded.show("01_roofline/a")\n',
            "another notebook",
        ),  # fmt: skip
    ],
)
def test_the_lint_catches_a_cell_without_a_recording_path(cell, problem):
    assert problem in " ".join(recordings.problems("00_setup", "# %%\n" + cell))
    good = "# %%\n" + 'with recorded.cell("00_setup/a"):\n    timing.bench(f)\n'
    good += 'recorded.show("00_setup/a")\n'
    assert recordings.problems("00_setup", good) == []


def test_committed_recordings_cover_every_declared_cell():
    """Once `make recordings` has written a notebook's file, it holds every declared key."""
    for a in build.assignments():
        found = recorded.load(a.name)
        if found is None:
            continue
        assert found["environment"]["mode"] == "gpu"
        missing = [k for k in recordings.declared(a.source.read_text()) if k not in found["cells"]]
        assert not missing, f"{a.name}: rerun `make recordings NOTEBOOKS={a.name}` ({missing})"
