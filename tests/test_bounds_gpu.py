"""On a GPU, compute-sanitizer's memcheck finds what grader.runtime.bounds finds in the
interpreter: a load past the end of a tensor. The masked kernel of tests/bounds_kernels.py runs
clean under memcheck; the one whose load carries no mask, whose output is right without it, is
reported.
Each runs in a child process under `compute-sanitizer --tool memcheck` (on the GPU image at
/usr/local/cuda/bin), with torch's caching allocator off, so that every tensor is an allocation
of its own and a read past its end leaves the allocation that memcheck knows."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent
SANITIZER = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"

LAUNCH = """
import torch, triton
from tests import bounds_kernels
kernel = getattr(bounds_kernels, "{kernel}")
x = torch.randn(1000, device="cuda")
out = torch.empty_like(x)
kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
torch.cuda.synchronize()
assert torch.equal(out, x), "the copy is wrong"
print("copied")
"""


def memcheck(kernel: str) -> subprocess.CompletedProcess:
    if not os.access(SANITIZER, os.X_OK):
        pytest.skip(f"compute-sanitizer not found ({SANITIZER})")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(ROOT), PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    command = [SANITIZER, "--tool", "memcheck", sys.executable, "-c", LAUNCH.format(kernel=kernel)]
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_memcheck_finds_the_masked_kernel_clean():
    run = memcheck("copy_masked")
    assert run.returncode == 0 and "copied" in run.stdout, run.stdout + run.stderr
    assert "ERROR SUMMARY: 0 errors" in run.stdout + run.stderr, run.stdout + run.stderr


def test_memcheck_reports_the_unmasked_load():
    run = memcheck("copy_unmasked_load")
    said = run.stdout + run.stderr
    assert "Invalid __global__ read" in said and "ERROR SUMMARY: 0 errors" not in said, said
