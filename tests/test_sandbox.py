"""grader.grading.sandbox: a grading run that hangs or eats memory is stopped with its whole process
tree, and the outcome says which limit it hit; a run within its limits is left alone."""

import sys
import textwrap
import time

import pytest

from grader.grading import sandbox

pytestmark = pytest.mark.tooling  # psutil comes with the grading toolchain (IPython)
MIB = 1 << 20


def python(code):
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_a_quiet_command_runs_to_the_end(tmp_path):
    done = sandbox.run(
        python("print('graded')"), log=tmp_path / "log", timeout=60, memory_limit=2 * sandbox.GIB
    )
    assert done.ok and done.returncode == 0 and done.killed is None
    assert (tmp_path / "log").read_text().strip() == "graded"


def test_a_failing_command_is_not_called_killed(tmp_path):
    done = sandbox.run(
        python("raise SystemExit(3)"), log=tmp_path / "log", timeout=60, memory_limit=sandbox.GIB
    )
    assert done.returncode == 3 and done.killed is None and not done.ok


def test_a_hang_is_stopped_with_its_children(tmp_path):
    pid_file = tmp_path / "child.pid"
    code = f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(600)
    """
    start = time.monotonic()
    done = sandbox.run(python(code), log=tmp_path / "log", timeout=3, memory_limit=sandbox.GIB)
    assert done.killed == "timeout" and not done.ok
    assert time.monotonic() - start < 30
    import psutil  # the GPU runner collects this file without the toolchain

    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the grandchild survived the timeout"
        time.sleep(0.1)


def test_memory_growing_past_the_limit_is_stopped(tmp_path):
    code = """
        import time
        hog = []
        for _ in range(400):  # up to 2 GiB, 5 MiB at a time, every page touched
            hog.append(bytearray(5 << 20))
            time.sleep(0.01)
        print("survived")
    """
    done = sandbox.run(python(code), log=tmp_path / "log", timeout=60, memory_limit=300 * MIB)
    assert done.killed == "memory", (tmp_path / "log").read_text()
    assert "survived" not in (tmp_path / "log").read_text()
    assert done.peak_bytes > 300 * MIB


def test_the_data_limit_fails_the_allocation_not_the_process(tmp_path):
    code = """
        try:
            hog = bytearray(1 << 30)
        except MemoryError:
            print("refused")
    """
    done = sandbox.run(
        python(code),
        log=tmp_path / "log",
        timeout=60,
        memory_limit=2 * sandbox.GIB,
        data_limit=512 * MIB,
    )
    assert done.ok, (tmp_path / "log").read_text()
    assert (tmp_path / "log").read_text().strip() == "refused"


def test_default_memory_limit_shares_the_machine():
    one, many = sandbox.default_memory_limit(1), sandbox.default_memory_limit(64)
    assert 2 * sandbox.GIB <= many <= one <= 16 * sandbox.GIB


def test_autograde_refuses_without_bwrap_and_names_the_install(monkeypatch, capsys, tmp_path):
    from grader import cli
    from grader.grading import jail

    monkeypatch.setattr(jail.shutil, "which", lambda name: None)
    with pytest.raises(jail.JailError, match="apt-get install bubblewrap"):
        jail.require()
    code = cli.main(["autograde", "00_setup", "--root", str(tmp_path), "--mode", "interpreter"])
    assert code == 2
    said = capsys.readouterr().err
    assert "apt-get install bubblewrap" in said and "--sandbox none" in said
    assert not (tmp_path / "grading").exists()  # nothing was graded


def test_report_says_when_grading_ran_without_the_sandbox():
    from grader.grading import classreport

    results = classreport.ClassResults("00_setup", "the CPU", False, {"a": 1.0}, [])
    assert "without the sandbox" not in classreport.render_markdown(results, {})
    results.sandboxed = False
    top = classreport.render_markdown(results, {}).split("## Scores")[0]
    assert "**Graded without the sandbox** (`--sandbox none`)" in top
