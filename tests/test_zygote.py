"""The nbgrader zygote: a forked run takes its arguments, working directory, environment, data
limit and log; its exit status comes back; grader.grading.sandbox watches, limits and kills it
as it does a process it started itself; and a class graded through zygotes gets the scores of
fresh processes (tests/test_autograde.py grades its class so)."""

import json
import os
import resource
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.authoring import build
from grader.grading import sandbox, zygote

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="grading forks on Linux")


def report():
    """A run's main for the tests: prints what it was given; exits with the status asked for."""
    args = sys.argv[1:]
    print("args", args)
    print("cwd", os.getcwd())
    print("env", os.environ.get("ZYGOTE_TEST"), "HOME" in os.environ)
    print("data", resource.getrlimit(resource.RLIMIT_DATA)[0])
    if "sleep" in args:
        time.sleep(60)
    if "hog" in args:
        hog = bytearray(600 << 20)
        print(len(hog))
        time.sleep(60)
    if "raise" in args:
        raise ValueError("a failing run")
    sys.exit(int(args[0]) if args and args[0].isdigit() else 0)


MAIN = "tests.test_zygote:report"
ENV = {"PATH": os.environ["PATH"], "PYTHONPATH": str(build.ROOT)}  # a zygote's own


@pytest.fixture
def forks(tmp_path):
    z = zygote.Zygote(ENV, build.ROOT, main=MAIN)
    yield z
    z.close()
    assert z.process.returncode == 0


def test_a_run_gets_its_arguments_folder_environment_limit_and_log(forks, tmp_path):
    log = tmp_path / "run.log"
    env = {"ZYGOTE_TEST": "mine"}
    pid = forks.start(["7", "--x=1"], cwd=tmp_path, env=env, log=log, data_limit=1 << 33)
    assert pid > 0 and pid != forks.process.pid
    assert forks.wait(pid) == 7
    text = log.read_text()
    assert "args ['7', '--x=1'" in text  # then the kernel connection's options
    assert f"cwd {tmp_path}" in text
    assert "env mine False" in text  # the run's environment alone
    assert f"data {1 << 33}" in text


def test_what_a_run_makes_in_temporary_folders_goes_with_it(forks, tmp_path):
    log = tmp_path / "run.log"
    pid = forks.start(["0"], cwd=tmp_path, env={}, log=log)
    assert forks.wait(pid) == 0
    (sockets,) = [a.partition("=")[2] for a in log.read_text().split("'") if ".ip=" in a]
    assert "/kernel-" in sockets  # kernel_connection's private folder, made in the run
    assert not Path(sockets).parent.exists()


def test_runs_follow_one_another_and_failures_are_reported(forks, tmp_path):
    for n in range(3):
        pid = forks.start([str(n)], cwd=tmp_path, env={}, log=tmp_path / f"{n}.log")
        assert forks.wait(pid) == n
    pid = forks.start(["raise"], cwd=tmp_path, env={}, log=tmp_path / "raise.log")
    assert forks.wait(pid) == 1
    assert "ValueError: a failing run" in (tmp_path / "raise.log").read_text()


def test_runs_side_by_side_each_get_their_own_status(forks, tmp_path):
    """Threads share one zygote: runs started together end in any order, and each wait gets the
    status of its own run."""
    sleeper = forks.start(["sleep"], cwd=tmp_path, env={}, log=tmp_path / "sleep.log")
    quick = {
        n: forks.start([str(n)], cwd=tmp_path, env={}, log=tmp_path / f"{n}.log") for n in (3, 4)
    }
    with ThreadPoolExecutor(2) as threads:
        codes = dict(zip(quick, threads.map(forks.wait, quick.values()), strict=True))
    assert codes == {3: 3, 4: 4}
    os.kill(sleeper, signal.SIGKILL)
    assert forks.wait(sleeper) == -signal.SIGKILL


def test_the_sandbox_kills_a_forked_run_past_its_time(forks, tmp_path):
    done = sandbox.run(
        ["sleep"], log=tmp_path / "log", timeout=2, memory_limit=sandbox.GIB, zygote=forks
    )
    assert done.killed == "timeout" and done.returncode == -9
    assert done.seconds < 30


def test_the_sandbox_kills_a_forked_run_past_its_memory(forks, tmp_path):
    done = sandbox.run(
        ["hog"], log=tmp_path / "log", timeout=60, memory_limit=300 << 20, zygote=forks
    )
    assert done.killed == "memory"
    pid = forks.start(["0"], cwd=tmp_path, env={}, log=tmp_path / "after.log")
    assert forks.wait(pid) == 0  # the zygote goes on


def test_batches_of_one_environment_share_a_zygote_restarted_when_it_dies():
    """Environments that differ only in variables a run reads get one Pool of the process;
    another environment gets its own."""
    mine = zygote.shared({**ENV, "BATCH_ONLY": "a"}, ignored={"BATCH_ONLY"})
    assert zygote.shared({**ENV, "BATCH_ONLY": "b"}, ignored={"BATCH_ONLY"}) is mine
    assert zygote.shared({**ENV, "OTHER": "1"}, ignored={"BATCH_ONLY"}) is not mine
    try:
        assert mine.started == []  # none until a run asks
        first = mine.get()
        assert mine.get() is first  # runs side by side share it
        first.process.kill()
        first.process.wait()
        second = mine.get()
        assert second is not first and second.process.poll() is None
        assert len(mine.started) == 2
    finally:
        mine.close()
    assert second.process.returncode == 0


def test_a_shared_zygote_ends_with_its_process(tmp_path):
    """No zygote outlives the process that started it (grader.grading.zygote.shared)."""
    code = (
        "import json, sys; from grader.grading import zygote; "
        "print(zygote.shared(json.loads(sys.argv[1])).get().process.pid)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(ENV)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[-1])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_zygote_that_dies_fails_the_runs_it_held(tmp_path):
    forks = zygote.Zygote(ENV, build.ROOT, main=MAIN)
    pid = forks.start(["sleep"], cwd=tmp_path, env={}, log=tmp_path / "sleep.log")
    forks.process.kill()
    forks.process.wait()
    with pytest.raises(zygote.ZygoteError, match="before run"):
        forks.wait(pid)
    os.kill(pid, signal.SIGKILL)  # orphaned by the zygote's death
    forks.close()
