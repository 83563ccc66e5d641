"""grader.grading.jail: what a student's kernel can reach. Each probe is a small Python program
run through the real launcher (`python -m grader.grading.jail`), in a course directory laid out
as nbgrader's, from the folder nbgrader would run the student's notebook in. Each probe also runs
without the sandbox, where the access it tries must succeed: the probe can see what it looks for,
so its failing inside is the sandbox's doing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from grader.grading import devices, hostlock, jail

pytestmark = [
    pytest.mark.tooling,  # jupyter_client comes with the grading toolchain
    pytest.mark.skipif(
        not jail.available() or os.geteuid() != 0,
        reason=f"the grading sandbox needs bwrap ({jail.INSTALL}) and root",
    ),
]
MIB = 1 << 20
SECRET = "INSTRUCTOR_TEST_SECRET"


@pytest.fixture
def course(tmp_path):
    """A course directory: the gradebook, hidden tests, another student, and the folder
    nbgrader runs this student's notebook in (its files and a released side file)."""
    root = tmp_path / "course"
    (root / "source" / "00_setup").mkdir(parents=True)
    (root / "source" / "00_setup" / "setup.ipynb").write_text("hidden tests")
    (root / "gradebook.db").write_bytes(b"SQLite format 3\0")
    other = root / "submitted" / "other" / "00_setup"
    other.mkdir(parents=True)
    (other / "setup.ipynb").write_text("the other student's work")
    work = root / "autograded" / "me" / "00_setup"
    (work / "drafts").mkdir(parents=True)
    (work / "setup.ipynb").write_text("the sanitized notebook, hidden tests included")
    (work / "gemm.py").write_text("TUNED = 1\n")
    (work / "drafts" / "a.py").write_text("draft\n")
    return root


def probe(
    course, code, jailed=True, nproc=256, scratch=64 * MIB, timeout=120, gpu=None, kernels=None
):
    """Run `code` as the student's kernel would run (its cwd, its environment), with the batch's
    compiled `kernels` where given; what it printed as JSON, and the outcome."""
    work = course / "autograded" / "me" / "00_setup"
    program = [sys.executable, "-c", textwrap.dedent(code)]
    env = {**os.environ, SECRET: "s3cret"}
    if not jailed:
        done = subprocess.run(program, cwd=work, env=env, capture_output=True, text=True)
    else:
        with (
            jail.slot() as n,
            jail.prepared(
                program,
                uid=jail.UID_BASE + n,
                scratch_bytes=scratch,
                nproc=nproc,
                gpu=gpu,
                kernel_cache=kernels,
            ) as (spec, _),
        ):
            connection = spec.parent / "run" / "kernel.json"
            connection.write_text("{}")
            launcher = [sys.executable, "-m", "grader.grading.jail", str(spec), str(connection)]
            done = subprocess.run(
                launcher, cwd=work, env=env, capture_output=True, text=True, timeout=timeout
            )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


ATTEMPT = """
import json, os, pathlib, sys
root = pathlib.Path.cwd().parents[2]
seen = {}
def attempt(name, action):
    try:
        seen[name] = action()
    except Exception as e:
        seen[name] = type(e).__name__
"""


def test_the_kernel_sees_its_own_folder_without_the_notebooks(course):
    seen = probe(
        course,
        ATTEMPT
        + """
attempt("files", lambda: sorted(str(p) for p in pathlib.Path(".").rglob("*")))
attempt("gemm", lambda: open("gemm.py").read())
attempt("write", lambda: open("gemm.py", "a").write("MINE = 2\\n"))
attempt("cwd", os.getcwd)
print(json.dumps(seen))
""",
    )
    work = course / "autograded" / "me" / "00_setup"
    assert seen["cwd"] == str(work)  # relative paths and side files work as in nbgrader
    assert seen["files"] == ["drafts", "drafts/a.py", "gemm.py"]  # no notebook: hidden tests
    assert seen["gemm"] == "TUNED = 1\n" and seen["write"] == 9
    assert (work / "gemm.py").read_text() == "TUNED = 1\n"  # its writes stay inside


def test_the_course_directory_is_out_of_reach(course):
    code = (
        ATTEMPT
        + """
attempt("gradebook", lambda: open(root / "gradebook.db", "rb").read().decode(errors="replace"))
attempt("root", lambda: sorted(os.listdir(root)))
attempt("source", lambda: os.listdir(root / "source" / "00_setup"))
attempt("other", lambda: open(root / "submitted/other/00_setup/setup.ipynb").read())
attempt("write-other", lambda: open(root / "submitted/other/00_setup/x.txt", "w").write("x"))
attempt("write-root", lambda: open(root / "escaped.txt", "w").write("x"))
print(json.dumps(seen))
"""
    )
    outside = probe(course, code, jailed=False)
    assert outside["gradebook"].startswith("SQLite") and outside["source"] == ["setup.ipynb"]
    assert outside["other"] == "the other student's work" and outside["write-root"] == 1
    for made in (course / "escaped.txt", course / "submitted/other/00_setup/x.txt"):
        made.unlink()
    inside = probe(course, code)
    assert inside["root"] == ["autograded"], inside  # an empty path down to its own folder
    for name in ("gradebook", "source", "other"):
        assert inside[name] == "FileNotFoundError", (name, inside[name])
    for name in ("write-other", "write-root"):
        assert inside[name] in ("FileNotFoundError", "PermissionError"), (name, inside[name])
    assert not (course / "escaped.txt").exists()
    assert not (course / "submitted/other/00_setup/x.txt").exists()


def test_only_the_runtime_of_the_grader(course):
    seen = probe(
        course,
        ATTEMPT
        + """
import importlib
attempt("runtime", lambda: importlib.import_module("grader.runtime.checks").__file__)
attempt("grading", lambda: importlib.import_module("grader.grading.autograde").__file__)
attempt("secret", lambda: os.environ.get("INSTRUCTOR_TEST_SECRET"))
attempt("home", lambda: (os.environ["HOME"], os.listdir(os.environ["HOME"])))
print(json.dumps(seen))
""",
    )
    assert seen["runtime"] == f"{jail.RUNTIME}/grader/runtime/checks.py"
    assert seen["grading"] == "ModuleNotFoundError"  # nor solutions/, tests/, build/
    assert seen["secret"] is None  # the instructor's environment stays outside
    assert seen["home"] == [jail.HOME, []]


def test_the_batchs_kernels_start_the_kernels_own_cache_and_stay_read_only(course, tmp_path):
    kernels = tmp_path / "kernels"
    (kernels / "ab12").mkdir(parents=True)
    (kernels / "ab12" / "__grp__k.json").write_text('{"child_paths": {}}')
    (kernels / "ab12" / "k.cubin").write_bytes(b"compiled")
    jail.readable(kernels)
    code = (
        ATTEMPT
        + f"""
cache = pathlib.Path(os.environ["TRITON_CACHE_DIR"])
attempt("cache", lambda: sorted(str(p.relative_to(cache)) for p in cache.rglob("*")))
attempt("mine", lambda: (cache / "ab12" / "k.cubin").stat().st_uid == os.getuid())
attempt("poison", lambda: open("{jail.KERNEL_CACHE}/ab12/k.cubin", "wb").write(b"evil"))
attempt("add", lambda: open("{jail.KERNEL_CACHE}/new.json", "w").write("x"))
attempt("own", lambda: (cache / "ab12" / "k.cubin").write_bytes(b"mine"))
print(json.dumps(seen))
"""
    )
    seen = probe(course, code, kernels=kernels)
    assert seen["cache"] == ["ab12", "ab12/__grp__k.json", "ab12/k.cubin"]
    assert seen["mine"] is True and seen["own"] == 4  # a copy of its own, to change at will
    for name in ("poison", "add"):
        assert seen[name] in ("PermissionError", "OSError"), (name, seen[name])
    assert (kernels / "ab12" / "k.cubin").read_bytes() == b"compiled"
    assert sorted(p.name for p in kernels.rglob("*")) == ["__grp__k.json", "ab12", "k.cubin"]
    assert probe(course, code)["cache"] == []  # no batch kernels: an empty cache


def test_no_network(course):
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(30)
    port = server.getsockname()[1]
    code = (
        ATTEMPT
        + f"""
import socket
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=5) and "open")
print(json.dumps(seen))
"""
    )
    with server:
        assert probe(course, code, jailed=False)["tcp"] == "open"
        server.accept()[0].close()
        assert probe(course, code)["tcp"] == "ConnectionRefusedError"  # its own loopback
        server.settimeout(0.5)
        with pytest.raises(TimeoutError):
            server.accept()


def test_unprivileged_with_no_capabilities(course):
    seen = probe(
        course,
        ATTEMPT
        + """
status = dict(l.split(":\\t", 1) for l in open("/proc/self/status").read().splitlines())
seen["uid"] = os.getuid()
seen["caps"] = [status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")]
seen["no_new_privs"] = status["NoNewPrivs"].strip()
attempt("setuid", lambda: os.setuid(0))
attempt("pids", lambda: sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
print(json.dumps(seen))
""",
    )
    assert seen["uid"] >= jail.UID_BASE
    assert seen["caps"] == ["0000000000000000"] * 5 and seen["no_new_privs"] == "1"
    assert seen["setuid"] == "PermissionError"
    assert seen["pids"] == [1, 2]  # bwrap's init and itself: no other process is visible


def test_process_and_file_size_limits(course):
    seen = probe(
        course,
        ATTEMPT
        + """
import threading, time
def threads():
    started = []
    try:
        for _ in range(200):
            t = threading.Thread(target=time.sleep, args=(2,), daemon=True)
            t.start()
            started.append(t)
    except RuntimeError:
        pass
    return len(started)
attempt("threads", threads)
import errno
def write(path, mib):
    try:
        with open(path, "wb") as f:
            for _ in range(mib):
                f.write(bytes(1 << 20))
    except OSError as e:
        return errno.errorcode[e.errno]
    return mib
attempt("big", lambda: write("big", 30))
attempt("bigger", lambda: write("/tmp/bigger", 40))
attempt("fill", lambda: [write(f"{os.environ['HOME']}/fill{i}", 30) for i in range(3)])
print(json.dumps(seen))
""",
        nproc=32,
        scratch=64 * MIB,
    )
    assert 0 < seen["threads"] < 32  # RLIMIT_NPROC counts threads too
    assert seen["big"] == 30
    assert seen["bigger"] == "EFBIG"  # RLIMIT_FSIZE: half a scratch folder
    assert seen["fill"] == [30, 30, "ENOSPC"]  # each scratch folder is a tmpfs of its size


def test_nothing_outlives_the_kernel(course, tmp_path):
    import psutil

    marker = f"outlive-{os.getpid()}-{time.monotonic_ns()}"
    code = f"""
import json, os, subprocess, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", "{marker}"])
    os._exit(0)
os.wait()
print(json.dumps({{"forked": True}}))
"""

    def survivors():
        return [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]

    try:
        assert probe(course, code, jailed=False) == {"forked": True}
        deadline = time.monotonic() + 10
        while not survivors():  # without the sandbox it lives on
            assert time.monotonic() < deadline, "the probe's daemon did not start"
            time.sleep(0.1)
        for p in survivors():
            p.kill()
        assert probe(course, code) == {"forked": True}
        deadline = time.monotonic() + 10
        while survivors():
            assert time.monotonic() < deadline, "a process outlived the sandboxed kernel"
            time.sleep(0.1)
    finally:
        for p in survivors():
            p.kill()


def test_slots_are_distinct_while_held(tmp_path, monkeypatch):
    monkeypatch.setenv(hostlock.FOLDER_VARIABLE, str(tmp_path))  # apart from batches running
    with jail.slot() as a, jail.slot() as b:
        assert a != b
    with jail.slot() as c:
        assert c == min(a, b)


def test_gpu_nodes_are_bound_when_a_gpu_is_assigned(tmp_path):
    spec = jail.Spec(str(tmp_path), [sys.executable], jail.UID_BASE, MIB, 64, gpu=3)
    argv = jail.command(spec, str(tmp_path / "work"), "unused")
    binds = {argv[i + 1] for i, a in enumerate(argv) if a == "--dev-bind-try"}
    assert binds == {*jail.GPU_NODES, "/dev/nvidia3"}
    assert "--dev-bind-try" not in jail.command(
        jail.Spec(str(tmp_path), [sys.executable], jail.UID_BASE, MIB, 64),
        str(tmp_path / "work"),
        "unused",
    )


def test_the_profilers_folder_is_bound_read_only_where_named(tmp_path):
    tool = str(tmp_path / "nsight-compute")
    spec = jail.Spec(str(tmp_path), [sys.executable], jail.UID_BASE, MIB, 64, gpu=0, tools=[tool])
    argv = jail.command(spec, str(tmp_path / "work"), "unused")
    assert any(argv[i : i + 3] == ["--ro-bind", tool, tool] for i in range(len(argv)))


@pytest.mark.gpu
def test_the_assigned_gpu_works_inside_and_no_other(course):
    """On a GPU machine, a kernel in the sandbox computes on the GPU it was given."""
    gpus = devices.detect()
    if not gpus:
        pytest.skip("needs an NVIDIA GPU (nvidia-smi lists none)")
    seen = probe(
        course,
        """
        import json, torch
        x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
        print(json.dumps({
            "devices": torch.cuda.device_count(),
            "name": torch.cuda.get_device_name(0),
            "sum": float((x * 2).sum()),
        }))
        """,
        scratch=1 << 30,
        gpu=gpus[0].minor,
        timeout=300,
    )
    assert seen["devices"] == 1, seen
    assert seen["sum"] == float((1 << 20) * ((1 << 20) - 1)), seen


def test_a_python_under_tmp_is_bound_after_the_sandboxes_tmp(tmp_path):
    """A virtual environment in /tmp (a fresh clone's, say) stays visible: bwrap mounts in
    order, and the sandbox's own /tmp is a tmpfs that would hide it."""
    python = tmp_path / "venv" / "bin" / "python"
    spec = jail.Spec(str(tmp_path), [str(python)], jail.UID_BASE, MIB, 64)
    argv = jail.command(spec, str(tmp_path / "work"), "unused")
    tmpfs = next(i for i, a in enumerate(argv) if a == "--tmpfs" and argv[i + 1] == "/tmp")
    prefix = str(tmp_path / "venv")
    bind = next(
        i for i, a in enumerate(argv) if a == "--ro-bind" and argv[i + 1 : i + 3] == [prefix] * 2
    )
    assert tmpfs < bind, "the Python's prefix is mounted before /tmp's tmpfs, which hides it"
