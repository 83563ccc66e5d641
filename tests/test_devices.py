"""Several GPUs of one host (grader.grading.devices, hostlock): which GPUs a batch finds and
takes, one student per GPU at a time across threads and processes, a GPU freed when its student
crashes, the uid slots of two batches apart, and the environment and device nodes a student's
kernel gets. No GPU is needed: the GPUs are fake (nvidia-smi's report as text, made-up UUIDs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from grader.grading import autograde, devices, findings, hostlock, jail

# nvidia-smi -q -x, cut to what is read; minor numbers in another order than the indexes
REPORT = """<?xml version="1.0" ?>
<nvidia_smi_log>
  <driver_version>580.159.04</driver_version>
  <attached_gpus>2</attached_gpus>
  <gpu id="00000000:18:00.0">
    <product_name>NVIDIA H100 80GB HBM3</product_name>
    <uuid>GPU-aaaaaaaa-0000-0000-0000-000000000000</uuid>
    <minor_number>1</minor_number>
  </gpu>
  <gpu id="00000000:2A:00.0">
    <product_name>NVIDIA H100 80GB HBM3</product_name>
    <uuid>GPU-bbbbbbbb-0000-0000-0000-000000000000</uuid>
    <minor_number>0</minor_number>
  </gpu>
</nvidia_smi_log>
"""
FAKE = [devices.Gpu(i, 7 + i, f"GPU-fake{i}-0000") for i in range(3)]


@pytest.fixture(autouse=True)
def locks(tmp_path, monkeypatch):
    """Lock files of these tests' own, apart from any batch running on this host."""
    monkeypatch.setenv(hostlock.FOLDER_VARIABLE, str(tmp_path / "locks"))
    return tmp_path / "locks"


def test_nvidia_smi_report_gives_index_node_and_uuid():
    found = devices.parse_nvidia_smi(REPORT)
    assert [(g.index, g.node, g.uuid[:12]) for g in found] == [
        (0, "/dev/nvidia1", "GPU-aaaaaaaa"),
        (1, "/dev/nvidia0", "GPU-bbbbbbbb"),
    ]
    assert found[0].env == {"CUDA_VISIBLE_DEVICES": found[0].uuid}
    broken = REPORT.replace("<minor_number>0</minor_number>", "<minor_number>N/A</minor_number>")
    with pytest.raises(devices.DeviceError, match="no minor number"):
        devices.parse_nvidia_smi(broken)


def test_select_by_index_uuid_all_and_cuda_visible_devices():
    found = devices.parse_nvidia_smi(REPORT)
    assert devices.select("all", found, {}) == found
    assert devices.select("1", found, {}) == [found[1]]
    assert devices.select("GPU-bbbb,0", found, {}) == [found[1], found[0]]
    # a Slurm job, or an instructor, narrowed what this process may use
    assert devices.select("all", found, {"CUDA_VISIBLE_DEVICES": "1"}) == [found[1]]
    assert devices.select("all", found, {"CUDA_VISIBLE_DEVICES": found[0].uuid}) == [found[0]]
    with pytest.raises(devices.DeviceError, match="no single GPU named '2'"):
        devices.select("0,2", found, {})
    with pytest.raises(devices.DeviceError, match="no single GPU named 'GPU-'"):
        devices.select("GPU-", found, {})  # a prefix of both
    with pytest.raises(devices.DeviceError, match="named twice"):
        devices.select("0,GPU-aaaa", found, {})
    with pytest.raises(devices.DeviceError, match="no GPU to grade on"):
        devices.select("all", [], {})
    with pytest.raises(devices.DeviceError, match="no GPU to grade on"):
        devices.select("all", found, {"CUDA_VISIBLE_DEVICES": ""})


def test_no_nvidia_smi_means_no_gpu(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert devices.detect() == []


def test_pool_gives_each_student_a_gpu_alone():
    pool = devices.Pool(FAKE[:2])
    busy: dict[str, int] = {}
    seen, clashes = [], []
    guard = threading.Lock()

    def student(n: int) -> None:
        with pool.lease() as gpu:
            with guard:
                busy[gpu.uuid] = busy.get(gpu.uuid, 0) + 1
                if busy[gpu.uuid] > 1:
                    clashes.append(gpu.uuid)
                seen.append(gpu.uuid)
            time.sleep(0.05)
            with guard:
                busy[gpu.uuid] -= 1

    threads = [threading.Thread(target=student, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not clashes
    assert len(seen) == 8 and set(seen) == {g.uuid for g in FAKE[:2]}


def test_a_crashing_student_frees_its_gpu():
    pool = devices.Pool(FAKE[:1])
    with pytest.raises(RuntimeError), pool.lease() as gpu:
        raise RuntimeError("the grading of this student failed")
    done = threading.Event()

    def next_student():
        with pool.lease() as again:
            assert again == gpu
            done.set()

    t = threading.Thread(target=next_student)
    t.start()
    t.join(timeout=10)
    assert done.is_set(), "the GPU of the crashed student was never freed"


HOLD = """
import sys, time
from grader.grading import devices, jail
with devices.Pool([devices.Gpu(0, 7, "GPU-fake0-0000")]).lease(), jail.slot() as n:
    print(n, flush=True)
    time.sleep(600)
"""


def test_another_batch_on_the_host_holds_its_gpu_and_uid_until_it_dies(locks):
    """A second process (another batch) holding GPU fake0 and uid slot 0: this one gets the
    other GPU and slot 1; once that process is killed, both are free again."""
    other = subprocess.Popen(
        [sys.executable, "-c", HOLD],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, hostlock.FOLDER_VARIABLE: str(locks)},
    )
    try:
        assert other.stdout.readline().strip() == "0"
        with devices.Pool(FAKE[:2]).lease() as gpu, jail.slot() as n:
            assert gpu == FAKE[1] and n == 1
    finally:
        other.kill()
        other.wait()
    with devices.Pool(FAKE[:1]).lease() as gpu, jail.slot() as n:
        assert gpu == FAKE[0] and n == 0


def _batch(tmp_path, students, **kw):
    batch = autograde.Batch("00_setup", "gpu", root=tmp_path / "course", gpus=FAKE[:2], **kw)
    for s in students:
        (batch.folder("submitted", s)).mkdir(parents=True)
    return batch


def test_grade_here_runs_one_student_per_gpu_and_survives_a_crash(tmp_path, monkeypatch):
    """The batch's scheduler, with nbgrader's run replaced by a record of which GPU each student
    had and when: every student graded, at most one per GPU at a time, both GPUs used, and a
    student whose grading raised is recorded as failed and frees its GPU."""
    students = [f"s{n}" for n in range(6)]
    batch = _batch(tmp_path, students, jobs=4)  # more threads than GPUs: the others wait
    spans, guard = [], threading.Lock()

    def fake_grade_one(batch, student, given, gpu):
        start = time.monotonic()
        time.sleep(0.1)
        with guard:
            spans.append((gpu.uuid, start, time.monotonic(), student))
        if student == "s2":
            raise RuntimeError("the kernel's process died")
        return findings.Run("ok", 0.1)

    monkeypatch.setattr(autograde, "grade_one", fake_grade_one)
    runs = autograde.grade_here(batch, students, {})
    assert set(runs) == set(students)
    assert runs["s2"].status == "failed" and "kernel's process died" in runs["s2"].detail
    assert autograde.Record.load(batch, "s2").fingerprint == ""  # the next run grades it again
    assert all(runs[s].status == "ok" for s in students if s != "s2")
    assert {u for u, *_ in spans} == {g.uuid for g in FAKE[:2]}
    for gpu in {u for u, *_ in spans}:
        mine = sorted((a, b) for u, a, b, _ in spans if u == gpu)
        assert all(b <= c for (_, b), (c, _) in zip(mine, mine[1:], strict=False)), (
            f"{gpu} shared: {mine}"
        )


def _spec(options: list[str]) -> str:
    """The spec.json of the sandbox that nbgrader's `options` name."""
    ip = next(o.split("=", 1)[1] for o in options if o.startswith("--KernelManager.ip="))
    return os.path.join(os.path.dirname(os.path.dirname(ip)), "spec.json")  # <folder>/run/kernel


def test_the_kernel_sees_only_its_gpu(tmp_path):
    """What autograde hands the sandbox for a student on FAKE[1]: its UUID as
    CUDA_VISIBLE_DEVICES over the instructor's, and only its device node besides the driver's
    shared ones."""
    batch = _batch(tmp_path, [])
    gpu = FAKE[1]
    given = {"CUDA_VISIBLE_DEVICES": "0,1,2", "PATH": "/usr/bin"}
    with autograde.kernel_sandbox(batch, gpu) as (options, env):
        assert env["CUDA_VISIBLE_DEVICES"] == gpu.uuid  # nbgrader's, and what it passes on
        spec = jail.read(_spec(options))
    assert spec.gpu == gpu.minor
    assert jail.environment(spec, given)["CUDA_VISIBLE_DEVICES"] == gpu.uuid
    argv = jail.command(spec, str(tmp_path / "work"), "unused")
    nodes = {argv[i + 1] for i, a in enumerate(argv) if a == "--dev-bind-try"}
    assert nodes == {*jail.GPU_NODES, gpu.node}
    assert not any(g.node in argv for g in FAKE if g != gpu)
    with pytest.raises(devices.DeviceError, match="none was"):  # GPU mode needs one handed in
        with autograde.kernel_sandbox(batch):
            pass
    cpu = autograde.Batch("00_setup", "interpreter", root=tmp_path / "course")
    with autograde.kernel_sandbox(cpu) as (options, env):  # the interpreter: nothing bound
        spec = jail.read(_spec(options))
    assert spec.gpu is None and "--dev-bind-try" not in jail.command(spec, "/w", "unused")


@pytest.mark.skipif(
    not jail.available() or os.geteuid() != 0,
    reason=f"the sandbox needs bwrap ({jail.INSTALL}) and root",
)
def test_inside_the_sandbox_the_kernel_sees_its_gpu_alone(tmp_path):
    """The same through the real launcher and bwrap: a program in place of the kernel prints
    what it sees."""
    batch = _batch(tmp_path, [])
    gpu = FAKE[1]
    probe = (
        "import json, os; print(json.dumps({'visible': os.environ.get('CUDA_VISIBLE_DEVICES')}))"
    )
    with autograde.kernel_sandbox(batch, gpu) as (options, env):
        path = _spec(options)
        spec = json.loads(open(path).read())
        spec["kernel_argv"] = [sys.executable, "-c", probe]
        with open(path, "w") as f:
            json.dump(spec, f)
        connection = os.path.join(os.path.dirname(path), "run", "kernel.json")
        open(connection, "w").write("{}")
        work = tmp_path / "work"
        work.mkdir()
        done = subprocess.run(
            [sys.executable, "-m", "grader.grading.jail", path, connection],
            cwd=work,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": "0,1,2"},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"visible": gpu.uuid}


def test_the_command_refuses_gpus_without_gpu_mode(capsys):
    """Asked of the interpreter, refused before the device is set up (which a process that has
    imported triton for the GPU, as the GPU tests' has, would refuse first)."""
    from grader import cli

    argv = ["autograde", "00_setup", "--mode", "interpreter", "--gpus", "0", "--sandbox", "none"]
    assert cli.main(argv) == 2
    assert "--gpus needs GPU mode; this batch grades in the interpreter" in capsys.readouterr().err


def test_the_command_refuses_gpus_where_torch_finds_none(capsys, dev):
    from grader import cli

    if dev.is_gpu:
        pytest.skip("this machine has a GPU")
    argv = ["autograde", "00_setup", "--gpus", "0", "--sandbox", "none"]
    assert cli.main(argv) == 2
    assert "--gpus needs GPU mode; torch finds no GPU here" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder of another user needs root")
def test_a_lock_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 12345, 12345)
    monkeypatch.setenv(hostlock.FOLDER_VARIABLE, str(theirs))
    with pytest.raises(PermissionError, match="belongs to another user"):
        jail.slot().__enter__()
