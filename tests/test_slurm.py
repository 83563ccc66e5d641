"""Grading through a Slurm job array (grader.grading.slurm) against a real Slurm: a controller
and one node daemon on this host (Debian's slurm-wlm, `AuthType=auth/none`), started for this
module from a slurm.conf of its own and stopped after it, whatever happens. A class of two
students (one right, one with a wrong answer) is graded once by a local batch and once
through the array; the gradebooks, the CSVs and the reasons for a human look must be the same.
A student whose task Slurm stops at its time limit is reported as timed out, and no task leaves
anything in the node's temporary folder. The class is of tests/light.py's assignment, whose
notebook imports nothing: the pipeline is what is compared, not a kernel. The checks on what a
task leaves (it is data the trusted side must not believe) run without Slurm."""

from __future__ import annotations

import copy
import csv
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from grader import cli
from grader.grading import autograde, devices, findings, gradebook, hostlock, jail, slurm
from tests import light, shared

pytestmark = [pytest.mark.slow, pytest.mark.tooling]

ASSIGNMENT, NOTEBOOK = light.ASSIGNMENT, light.NOTEBOOK
DAEMONS = ("slurmctld", "slurmd", "sbatch", "squeue")
needs_slurm = pytest.mark.skipif(
    any(shutil.which(d) is None for d in DAEMONS) or not jail.available() or os.geteuid() != 0,
    reason="needs Slurm (apt-get install slurm-wlm), bwrap and root",
)


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


SLURM_CONF = """\
ClusterName=grading
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
NodeName=gradenode NodeAddr=127.0.0.1 NodeHostname={host} CPUs=2 State=UNKNOWN
PartitionName=grading Nodes=gradenode Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """slurmctld and slurmd in the foreground, as this test's children; SLURM_CONF points the
    client commands at them. Stopped (and waited for) at the end, on failure too."""
    folder = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool"):
        (folder / sub).mkdir()
    ctld_port, slurmd_port = _free_ports(2)
    host = socket.gethostname().split(".")[0]
    conf = folder / "slurm.conf"
    conf.write_text(
        SLURM_CONF.format(host=host, ctld_port=ctld_port, slurmd_port=slurmd_port, folder=folder)
    )
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    started = []
    try:
        for argv in (
            ["slurmctld", "-D", "-i", "-f", str(conf)],
            ["slurmd", "-D", "-f", str(conf), "-N", "gradenode"],
        ):
            started.append(
                subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            )
        deadline = time.monotonic() + 30
        while True:
            state = subprocess.run(
                ["sinfo", "--noheader", "--format=%T"], capture_output=True, text=True
            )
            if state.stdout.strip() == "idle":
                break
            if time.monotonic() > deadline or any(p.poll() is not None for p in started):
                logs = "".join(
                    (folder / f).read_text()[-2000:]
                    for f in ("slurmctld.log", "slurmd.log")
                    if (folder / f).exists()
                )
                pytest.fail(f"Slurm did not start: {state.stdout}{state.stderr}\n{logs}")
            time.sleep(0.2)
        yield folder
    finally:
        for p in started:
            p.terminate()
        for p in started:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before


def _answered(release, source, broken: bool):
    """The release with its solution cells answered from the source; `broken`: an answer that
    is right for x >= 0 only (it passes the visible test, not the hidden one)."""
    nb = copy.deepcopy(release)
    theirs = [c for c in source.cells if c.metadata.get("nbgrader", {}).get("solution")]
    mine = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    for a, b in zip(mine, theirs, strict=True):
        a.source = "\n".join(
            line
            for line in b.source.split("\n")
            if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line
        )
    if broken:
        (answer,) = [c for c in nb.cells if findings.grade_id_of(c) == light.ANSWER]
        assert "return 2 * x" in answer.source, "tests/light.py changed: update this test"
        answer.source = answer.source.replace("return 2 * x", "return abs(2 * x)")
    return nb


@pytest.fixture(scope="module")
def course(tmp_path_factory, registered_light):
    """Three course directories with the assignment registered, and the class's submissions."""
    tmp = tmp_path_factory.mktemp("class")
    for name in ("local", "slurm", "limit"):
        shared.copy_course(registered_light, tmp / name)
    roots = {name: tmp / name for name in ("local", "slurm", "limit")}
    release = nbformat.read(tmp / "local" / "release" / ASSIGNMENT / f"{NOTEBOOK}.ipynb", 4)
    source = nbformat.read(tmp / "local" / "source" / ASSIGNMENT / f"{NOTEBOOK}.ipynb", 4)
    inbox = tmp / "inbox"
    for student, broken in {"right": False, "wrong": True}.items():
        (inbox / student / ASSIGNMENT).mkdir(parents=True)
        nbformat.write(
            _answered(release, source, broken), inbox / student / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
        )
    return roots, inbox


LIMITS = ["--cell-timeout", "60", "--speed-cell-timeout", "60", "--timeout", "300"]


def _rows(batch):
    with open(batch.out / "grades.csv", newline="") as f:
        return {r["student_id"]: r for r in csv.DictReader(f)}


@needs_slurm
def test_a_class_graded_through_slurm_gets_the_local_grades(
    cluster, course, tmp_path, monkeypatch, node_tmp
):
    """The local batch on two GPUs (fake ones: the interpreter ignores them, the scheduler hands
    them out), then `python -m grader autograde --slurm` on the same class."""
    roots, inbox = course
    monkeypatch.setenv(hostlock.FOLDER_VARIABLE, str(tmp_path / "locks"))
    fake = [devices.Gpu(i, 70 + i, f"GPU-fake{i}") for i in range(2)]
    local = autograde.Batch(
        ASSIGNMENT, "interpreter", root=roots["local"], jobs=2, cell_timeout=60,
        speed_cell_timeout=60, timeout=300, memory_limit=3 << 30, gpus=fake,
    )  # fmt: skip
    autograde.autograde(local, submissions=inbox, device="CPU", grades_speed=False)
    argv = [
        "autograde", ASSIGNMENT, "--submissions", str(inbox), "--root", str(roots["slurm"]),
        "--mode", "interpreter", "--memory-limit", "3", *LIMITS,
        "--slurm", "--jobs", "2", "--slurm-folder", str(tmp_path / "jobs"), "--sbatch", "-t 20",
    ]  # fmt: skip
    assert cli.main(argv) == 0
    assert list(node_tmp.iterdir()) == []  # nothing of the course left on the node
    remote = autograde.Batch(ASSIGNMENT, "interpreter", root=roots["slurm"])
    mine = gradebook.grades(remote.url, ASSIGNMENT)
    theirs = gradebook.grades(local.url, ASSIGNMENT)
    assert {s: (g.scores, g.penalty) for s, g in mine.items()} == {
        s: (g.scores, g.penalty) for s, g in theirs.items()
    }
    assert mine["right"].total > mine["wrong"].total > 0
    assert _rows(remote) == _rows(local)
    for student in ("right", "wrong"):
        run = json.loads((remote.out / "runs" / f"{student}.json").read_text())
        assert run["status"] == "ok", run
        assert (remote.out / "feedback" / student / f"{NOTEBOOK}.html").is_file()
        log = (remote.out / "logs" / f"{student}.log").read_text()
        assert "[merged from Slurm task output" in log
    # each student was a task of one array, with its own output folder; nothing ran in the merge
    (job,) = (tmp_path / "jobs").iterdir()
    assert sorted(p.name for p in (job / "out").iterdir()) == ["right", "wrong"]
    assert not (job / "work").exists()  # the tasks' course directories are gone
    assert len(list(job.glob("slurm-*_*.out"))) == 2
    merged = (job / "merge" / "merge.log").read_text()
    assert "Autograding" in merged and "Kernel" not in merged and "Unrecognized" not in merged

    # the same outputs, altered: a test cell swapped, a result naming the other student
    graded = job / "out" / "wrong" / "autograded" / f"{NOTEBOOK}.ipynb"
    nb = nbformat.read(graded, 4)
    (test,) = [c for c in nb.cells if findings.grade_id_of(c) == "test-double-hidden"]
    test.source = "pass"
    graded.chmod(0o644)
    nbformat.write(nb, graded)
    result = job / "out" / "right" / slurm.RESULT
    result.write_text(result.read_text().replace('"right"', '"wrong"'))
    shutil.rmtree(job / "merge")
    runs = slurm.merge(remote, ["right", "wrong"], autograde.released(remote), job)
    assert runs["right"].status == "failed" and "another student" in runs["right"].detail
    assert runs["wrong"].status == "failed" and "test-double-hidden" in runs["wrong"].detail
    assert not (job / "merge" / "merge.log").exists()  # nothing left to record
    after = gradebook.grades(remote.url, ASSIGNMENT)
    assert {s: g.scores for s, g in after.items()} == {s: g.scores for s, g in mine.items()}


@pytest.fixture
def node_tmp(monkeypatch):
    """An empty temporary folder for the tasks (TMPDIR, which sbatch hands them with the rest of
    its environment), with a short path as the sandbox's Unix sockets need; removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="node-"))
    monkeypatch.setenv("TMPDIR", str(folder))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


@needs_slurm
def test_a_task_stopped_at_slurms_time_limit_is_timed_out_and_leaves_nothing(
    cluster, course, tmp_path, monkeypatch, node_tmp
):
    """A submission whose answer sleeps, with Slurm's time limit (1 minute) below the grader's
    own (15): Slurm stops the task (SIGTERM, then SIGKILL), and the student is reported as timed
    out, not as crashed; neither the node's temporary folder nor the job folder keeps the task's
    course directory (the hidden tests)."""
    roots, inbox = course
    release = nbformat.read(roots["limit"] / "release" / ASSIGNMENT / f"{NOTEBOOK}.ipynb", 4)
    source = nbformat.read(roots["limit"] / "source" / ASSIGNMENT / f"{NOTEBOOK}.ipynb", 4)
    nb = _answered(release, source, broken=False)
    (answer,) = [c for c in nb.cells if findings.grade_id_of(c) == light.ANSWER]
    answer.source += "\n\nimport time\n\ntime.sleep(900)\n"
    (tmp_path / "slow" / "sleeper" / ASSIGNMENT).mkdir(parents=True)
    nbformat.write(nb, tmp_path / "slow" / "sleeper" / ASSIGNMENT / f"{NOTEBOOK}.ipynb")
    monkeypatch.setenv(hostlock.FOLDER_VARIABLE, str(tmp_path / "locks"))
    argv = [
        "autograde", ASSIGNMENT, "--submissions", str(tmp_path / "slow"),
        "--root", str(roots["limit"]), "--mode", "interpreter", "--memory-limit", "3",
        "--cell-timeout", "900", "--speed-cell-timeout", "900", "--timeout", "900",
        "--slurm", "--slurm-folder", str(tmp_path / "jobs"), "--sbatch=--time=1",
    ]  # fmt: skip
    assert cli.main(argv) == 0
    batch = autograde.Batch(ASSIGNMENT, "interpreter", root=roots["limit"])
    run = json.loads((batch.out / "runs" / "sleeper.json").read_text())
    assert run["status"] == "timeout", run
    assert "Slurm stopped the task at its time limit (1:00)" in run["detail"], run
    review = _rows(batch)["sleeper"]["needs_review"]
    assert review.startswith("timed out: Slurm stopped the task"), review
    (job,) = (tmp_path / "jobs").iterdir()
    (output,) = job.glob("slurm-*_0.out")
    assert "DUE TO TIME LIMIT" in output.read_text()  # Slurm's own limit stopped it
    assert not (job / "out" / "sleeper" / slurm.RESULT).exists()
    assert list(node_tmp.iterdir()) == []
    assert not (job / "work").exists()


# -- what a task leaves is checked, without Slurm ----------------------------------------


def _result(folder, **run):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / slurm.RESULT).write_text(
        json.dumps({"student": "ann", "run": {"status": "ok", **run}})
    )


def test_a_task_result_is_read_as_data(tmp_path):
    _result(tmp_path / "a", seconds=3.5, detail="\x1b[31mred\x1b[0m")
    run, why = slurm.read_result(tmp_path / "a", "ann")
    assert run == findings.Run("ok", 3.5, "\\u001b[31mred\\u001b[0m") and why == ""
    assert "left no result" in slurm.read_result(tmp_path / "none", "ann")[1]
    refusals = {
        "other": ({"student": "bob", "run": {"status": "ok"}}, "another student"),
        "status": ({"student": "ann", "run": {"status": "excellent"}}, "unknown status"),
        "time": ({"student": "ann", "run": {"status": "ok", "seconds": "nan"}}, "not one"),
        "shape": (["ann"], "not one the grader wrote"),
    }
    for name, (data, words) in refusals.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / slurm.RESULT).write_text(json.dumps(data))
        run, why = slurm.read_result(tmp_path / name, "ann")
        assert run is None and words in why, (name, why)
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / slurm.RESULT).write_text(" " * (slurm.MAX_RESULT_BYTES + 1))
    assert "size limit" in slurm.read_result(tmp_path / "big", "ann")[1]
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / slurm.RESULT).symlink_to(tmp_path / "a" / slurm.RESULT)
    assert slurm.read_result(tmp_path / "link", "ann")[0] is None


def test_a_graded_notebook_must_hold_the_released_test_cells(tmp_path):
    nb = nbformat.v4.new_notebook()
    test = nbformat.v4.new_code_cell("assert relu(x) == y")
    test.metadata["nbgrader"] = {
        "grade_id": "test-relu",
        "grade": True,
        "locked": True,
        "points": 1,
    }
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), test]
    path = tmp_path / "setup.ipynb"
    nbformat.write(nb, path)
    locked = {"test-relu": "assert relu(x) == y"}
    assert slurm.checked_notebook(path, locked)[1] is None
    test.source = "pass"  # a test cell replaced
    nbformat.write(nb, path)
    assert "test-relu" in slurm.checked_notebook(path, locked)[1]
    nb.cells.append(nbformat.v4.new_code_cell("pass", metadata=copy.deepcopy(test.metadata)))
    nb.cells[1].source = "assert relu(x) == y"
    nbformat.write(nb, path)
    assert "test-relu" in slurm.checked_notebook(path, locked)[1]
    path.write_text("%PDF-1.7")
    assert "not one" in slurm.checked_notebook(path, locked)[1]
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.ipynb")
    assert "not a plain file" in slurm.checked_notebook(path, locked)[1]


def test_sbatch_options_pass_through_with_defaults_only_where_unset(tmp_path):
    gpu = autograde.Batch(ASSIGNMENT, "gpu", root=tmp_path, timeout=1800)
    argv = slurm.sbatch_command(gpu, tmp_path, 300, slurm.Options(["--partition=gpu"], throttle=8))
    assert "--array=0-299%8" in argv and "--partition=gpu" in argv
    assert "--time=40" in argv and "--gres=gpu:1" in argv
    argv = slurm.sbatch_command(gpu, tmp_path, 3, slurm.Options(["-t", "90", "--gres=gpu:h100:1"]))
    assert not any(a.startswith("--time=") for a in argv)
    assert "--gres=gpu:1" not in argv and "--gres=gpu:h100:1" in argv
    cpu = autograde.Batch(ASSIGNMENT, "interpreter", root=tmp_path)
    assert not any("gres" in a for a in slurm.sbatch_command(cpu, tmp_path, 3, slurm.Options()))


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="needs Slurm's client commands")
def test_slurm_needs_a_mode_the_nodes_grade_in(capsys):
    from grader import cli

    assert cli.main(["autograde", ASSIGNMENT, "--slurm", "--sandbox", "none"]) == 2
    assert "pass --mode gpu or --mode interpreter" in capsys.readouterr().err
