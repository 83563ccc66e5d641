import os
import subprocess
import sys

import pytest

from grader.runtime import device

H100 = device.Device(device.GPU, "NVIDIA H100 80GB HBM3", (9, 0), 80 * 2**30)
A100 = device.Device(device.GPU, "NVIDIA A100-SXM4-40GB", (8, 0), 40 * 2**30)
T4 = device.Device(device.GPU, "Tesla T4", (7, 5), 16 * 2**30)
CPU = device.Device(device.INTERPRETER, "CPU (Triton interpreter)")


def test_capability_gating():
    assert H100.supports("sm_90") and H100.supports("bf16") and H100.grades_speed
    assert A100.supports("sm_80") and not A100.supports("sm_90") and A100.grades_speed
    assert T4.is_gpu and not T4.supports("bf16") and not T4.grades_speed
    assert T4.supports("timing")
    assert not CPU.supports("timing") and not CPU.supports("bf16") and not CPU.grades_speed


def test_explain_says_what_is_missing():
    assert "Hopper" in A100.explain("sm_90") and "sm_80" in A100.explain("sm_90")
    assert CPU.explain("timing").endswith("the CPU, in Triton's interpreter mode.")
    with pytest.raises(ValueError, match="unknown feature"):
        H100.supports("sm_100a")


def test_problem_sizes_per_mode():
    assert H100.pick(gpu=4096, interpreter=64) == 4096
    assert CPU.pick(gpu=4096, interpreter=64) == 64
    assert H100.torch_device == "cuda" and CPU.torch_device == "cpu"


def test_requested_mode(clean_env, monkeypatch):
    assert device.requested_mode() == "auto"
    monkeypatch.setenv("COURSE_MODE", "Interpreter")
    assert device.requested_mode() == "interpreter"
    assert device.requested_mode("gpu") == "gpu"
    with pytest.raises(device.ModeError, match="unknown mode 'tpu'"):
        device.requested_mode("tpu")


def run_python(code, **env):
    full_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("COURSE_MODE", "TRITON_INTERPRET", "TRITON_DEFAULT_FP_FUSION")
    }
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120
    )


@pytest.mark.skipif(device.current().is_gpu, reason="checks the machine without a GPU")
def test_setup_without_gpu_chooses_interpreter_and_sets_triton_environment():
    result = run_python(
        "import os; from grader.runtime import device; d = device.setup(); "
        "print(d.mode, os.environ['TRITON_INTERPRET'], os.environ['TRITON_DEFAULT_FP_FUSION'])"
    )
    assert result.stdout.split() == ["interpreter", "1", "1"], result.stderr


@pytest.mark.skipif(device.current().is_gpu, reason="checks the machine without a GPU")
def test_asking_for_gpu_without_one_says_what_to_check():
    result = run_python("from grader.runtime import device; device.setup('gpu')")
    assert "ModeError" in result.stderr and "no CUDA GPU" in result.stderr


def test_importing_triton_first_is_caught_with_a_fix():
    result = run_python(
        "import triton; from grader.runtime import device; device.setup('interpreter')"
    )
    assert "ModeError" in result.stderr
    assert "Restart the kernel and run the notebook from the top" in result.stderr


def test_user_fp_fusion_choice_is_kept():
    result = run_python(
        "import os; from grader.runtime import device; device.setup('interpreter'); "
        "print(os.environ['TRITON_DEFAULT_FP_FUSION'])",
        TRITON_DEFAULT_FP_FUSION="0",
    )
    assert result.stdout.strip() == "0", result.stderr


@pytest.mark.skipif(device.current().is_gpu, reason="checks interpreter mode")
def test_interpreter_mode_keeps_numpy_quiet_on_stderr():
    result = run_python(
        "import numpy as np; from grader.runtime import device; device.setup('interpreter'); "
        "np.exp(np.float32(1e4)); np.float32('-inf') - np.float32('-inf')"
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
