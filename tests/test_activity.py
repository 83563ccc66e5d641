"""The GPU activity log (grader/grading/activity.c and activity.py) on the CPU: the library is
built with a stand-in for CUPTI (tests/fake_cupti/) whose records a test makes up, loaded into a
child process as the CUDA driver loads it into a student's kernel, and read by the judge's end.
The records arrive signed and in order; a frame the library did not sign, a second connection
and a log that never started are refused, each with its reason."""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.grading import activity

FAKE = Path(__file__).with_name("fake_cupti")

CHILD = textwrap.dedent(
    """
    import ctypes, sys
    lib = ctypes.CDLL(sys.argv[1])
    lib.InitializeInjection()
    lib.fake_kernel.argtypes = [ctypes.c_char_p] + [ctypes.c_uint64] * 2 + [ctypes.c_uint32]
    lib.fake_memset.argtypes = [ctypes.c_uint64] * 3 + [ctypes.c_uint32]
    lib.fake_kernel(b"relu_kernel", 1000, 1900, 7)
    lib.fake_memset(1 << 26, 2000, 2100, 7)
    lib.fake_kernel(b"void at::native::vectorized_elementwise_kernel<4>", 2200, 2300, 7)
    print("ready", flush=True)
    sys.stdin.readline()  # the test says when to end
    """
)


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """The library, built with the stand-in for CUPTI."""
    target = tmp_path_factory.mktemp("activity") / "libfake_activity.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O2", f"-I{FAKE}", str(activity.SOURCE),
         str(FAKE / "fake_cupti.c"), "-lpthread", "-o", str(target)],
        check=True,
    )  # fmt: skip
    return target


def _child(library: Path, path: Path):
    env = {**os.environ, "COURSE_ACTIVITY_SOCKET": str(path)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(library)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert child.stdout.readline().strip() == "ready"
    return child


def test_records_arrive_signed_and_in_order(library, tmp_path):
    log = activity.Log(tmp_path / "activity.sock")
    child = _child(library, log.path)
    try:
        records = log.flush(timeout=20)
        assert [(r.kind, r.name, r.ns) for r in records] == [
            ("kernel", "relu_kernel", 900),
            ("memset", "", 100),
            ("kernel", "void at::native::vectorized_elementwise_kernel<4>", 100),
        ]
        assert records[1].size == 1 << 26 and records[0].stream == 7
        assert records[0].grid == (4, 1, 1) and records[0].block == (128, 1, 1)
        assert log.flush(timeout=20) == records  # nothing new: the same records
    finally:
        child.communicate("end\n", timeout=20)
        log.close()


def test_a_frame_the_library_did_not_sign_breaks_the_log(tmp_path):
    log = activity.Log(tmp_path / "activity.sock")
    try:
        with socket.socket(socket.AF_UNIX) as forger:
            forger.connect(str(log.path))
            forger.recv(activity.KEY_BYTES)  # it got the key, but signs with another
            payload = b"K" + struct.pack("<QQII6iH", 0, 1, 0, 0, 1, 1, 1, 1, 1, 1, 3) + b"abc"
            forger.sendall(struct.pack("<IQ", len(payload), 0) + payload + bytes(32))
            with pytest.raises(activity.ActivityError, match="did not sign"):
                log.flush(timeout=10)
    finally:
        log.close()


def test_only_the_first_connection_is_heard(library, tmp_path):
    log = activity.Log(tmp_path / "activity.sock")
    child = _child(library, log.path)
    try:
        with pytest.raises(OSError):  # the listener closed once the library connected
            with socket.socket(socket.AF_UNIX) as second:
                second.connect(str(log.path))
        assert [r.name for r in log.flush(timeout=20)][0] == "relu_kernel"
    finally:
        child.communicate("end\n", timeout=20)
        log.close()


def test_a_log_that_never_started_says_so(tmp_path):
    log = activity.Log(tmp_path / "activity.sock")
    try:
        with pytest.raises(activity.ActivityError, match="never started"):
            log.flush(timeout=1)
    finally:
        log.close()


def test_a_long_frame_is_signed_too(library, tmp_path):
    """Kernel names long enough that a frame spans many SHA-256 blocks, and is split in two."""
    log = activity.Log(tmp_path / "activity.sock")
    env = {**os.environ, "COURSE_ACTIVITY_SOCKET": str(log.path)}
    names = [f"kernel_{i}_" + "x" * 3000 for i in range(40)]  # over the library's 64 KiB frame
    code = CHILD.replace(
        'lib.fake_kernel(b"relu_kernel", 1000, 1900, 7)',
        "".join(f"lib.fake_kernel(b'{n}', {i}, {i + 1}, 0)\n" for i, n in enumerate(names)),
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(library)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=env, text=True)  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "ready"
        assert [r.name for r in log.flush(timeout=20)][:40] == names
    finally:
        child.communicate("end\n", timeout=20)
        log.close()


def test_without_a_socket_the_library_lets_cuda_start(library):
    """In a process started without COURSE_ACTIVITY_SOCKET (one the student's code starts),
    the library logs nothing and CUDA starts as usual."""
    assert ctypes.CDLL(str(library)).InitializeInjection() == 1


# -- reading a speed cell's timed calls ----------------------------------------------------------

MARKER = (256 << 20) + 4097
DRAW = "_ZN2at6native44distribution_elementwise_grid_stride_kernelIfLi4E"


def _calls(n: int, *, each=None, before=("draw",)) -> list[activity.Record]:
    """Records of `n` honest timed calls: a draw, the marker fill, the exercise's kernel (as
    `each(i, t)` gives them, if given), the next draw."""
    out, t = [], 0

    def add(kind, ns, **what):
        nonlocal t
        out.append(activity.Record(kind, t, t + ns, 7, **what))
        t += ns + 10

    for _ in before:
        add("kernel", 50, name=DRAW)
    for i in range(n):
        add("memset", 80, size=MARKER)
        for kind, ns, what in each(i) if each else [("kernel", 1000, {"name": "relu_kernel"})]:
            add(kind, ns, **what)
        if i < n - 1:
            add("kernel", 50, name=DRAW)
    return out


def _read(records, calls=4, fetched=None):
    return activity.timed_calls(records, calls=calls, marker=MARKER, fills=1,
                                kernels={"relu_kernel"}, fetched=fetched or {})  # fmt: skip


def test_honest_calls_are_timed_by_their_kernels_alone():
    found = _read(_calls(4))
    assert found.flags == [] and found.ns == [1000] * 4


def test_the_output_copied_back_for_a_check_is_allowed_where_it_was_asked_for():
    copy = ("memcpy", 300, {"size": 4096})
    records = _calls(4, each=lambda i: [("kernel", 1000, {"name": "relu_kernel"})] +
                     ([copy] if i == 2 else []))  # fmt: skip
    assert _read(records, fetched={2: 4096}).flags == []
    assert any("a copy" in f for f in _read(records, fetched={1: 4096}).flags)


@pytest.mark.parametrize(
    "each, says",
    [
        (lambda i: [("kernel", 900, {"name": "sm90_xmma_gemm_f16f16"}),
                    ("kernel", 10, {"name": "relu_kernel"})], "`sm90_xmma_gemm_f16f16` ran"),
        (lambda i: [("kernel", 10, {"name": "relu_kernel"})] if i % 2 else [],
         "2 of 4 timed calls launched none"),
        (lambda i: [("kernel", 1000, {"name": "relu_kernel"}), ("memcpy", 5, {"size": 64})],
         "a copy"),
        (lambda i: [("kernel", 1000, {"name": DRAW}), ("kernel", 10, {"name": "relu_kernel"})],
         "torch's own kernels"),
    ],
    ids=["a-library-inside", "work-skipped", "a-copy-inside", "torch-computes-inside"],
)  # fmt: skip
def test_work_that_is_not_the_exercises_own_is_named(each, says):
    assert any(says in f for f in _read(_calls(4, each=each)).flags)


def test_a_long_library_kernel_name_leaves_the_reason_in_the_reports_line():
    """cuDNN's kernels have names of 90 characters: the class report cuts a flag at 160."""
    name = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_k0"
    each = [("kernel", 900, {"name": name}), ("kernel", 10, {"name": "relu_kernel"})]
    flags = _read(_calls(4, each=lambda i: each)).flags
    assert flags and "ran inside the timed calls" in flags[0][:100], flags


def test_calls_that_did_not_run_as_asked_are_not_timed():
    records = [r for r in _calls(4) if not (r.kind == "memset")][:3]
    found = _read(records)
    assert found.ns == [] and "0 timed calls where 4 were made" in found.flags[0]


def test_the_exercises_kernel_before_the_first_call_is_named():
    """A result computed before timing began, the timed calls then only copying it."""
    early = [activity.Record("kernel", -5000, -4000, 7, "relu_kernel")]
    assert any("before the first timed call" in f for f in _read(early + _calls(4)).flags)
