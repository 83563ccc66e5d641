"""Choose the execution mode (CUDA GPU or Triton's CPU interpreter) and answer questions about it.

Call `setup()` before `import triton`: the interpreter is switched on by `TRITON_INTERPRET=1`,
which Triton reads when kernels are defined. The mode can be forced with `COURSE_MODE=gpu` or
`COURSE_MODE=interpreter`; the default, `auto`, uses a CUDA GPU when one is visible.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

GPU = "gpu"
INTERPRETER = "interpreter"
MODES = (GPU, INTERPRETER)

# The course's supported class: Ampere (sm_80) or newer. Hopper (sm_90) content is flagged.
SUPPORTED_CAPABILITY = (8, 0)
FEATURE_CAPABILITY = {"sm_80": (8, 0), "sm_90": (9, 0), "bf16": (8, 0), "tf32": (8, 0)}
FEATURE_NAMES = {
    "sm_80": "an Ampere-class GPU (sm_80) or newer",
    "sm_90": "a Hopper-class GPU (sm_90) or newer",
    "bf16": "bfloat16, which needs sm_80 or newer and which the interpreter lacks",
    "tf32": "TF32 tensor cores, which need sm_80 or newer",
    "timing": "a CUDA GPU: interpreter times say nothing about GPU speed",
}


class ModeError(RuntimeError):
    """The requested mode cannot be used here, or was chosen too late."""


@dataclass(frozen=True)
class Device:
    """Where this notebook's kernels run."""

    mode: str
    name: str
    capability: tuple[int, int] | None = None
    memory_bytes: int | None = None

    @property
    def is_gpu(self) -> bool:
        return self.mode == GPU

    @property
    def torch_device(self) -> str:
        """Where tensors for kernels must live: CUDA memory on a GPU, host memory otherwise."""
        return "cuda" if self.is_gpu else "cpu"

    @property
    def grades_speed(self) -> bool:
        """Speed is graded only on a GPU of the supported class."""
        capability = self.capability or (0, 0)
        return self.is_gpu and capability >= SUPPORTED_CAPABILITY

    def supports(self, feature: str) -> bool:
        """True when `feature` (one of FEATURE_NAMES) is available on this device."""
        if feature not in FEATURE_NAMES:
            raise ValueError(f"unknown feature {feature!r}; known: {', '.join(FEATURE_NAMES)}")
        if not self.is_gpu:
            return False
        if feature == "timing":
            return True
        return self.capability is not None and self.capability >= FEATURE_CAPABILITY[feature]

    def explain(self, feature: str) -> str:
        """One sentence on whether `feature` is available and why not."""
        if self.supports(feature):
            return f"{self.name} supports {feature}."
        return f"This needs {FEATURE_NAMES[feature]}; this notebook runs on {self.describe()}."

    def pick(self, *, gpu, interpreter):
        """Choose a problem size (or any setting) for the current mode."""
        return gpu if self.is_gpu else interpreter

    def describe(self) -> str:
        if not self.is_gpu:
            return "the CPU, in Triton's interpreter mode"
        major, minor = self.capability or (0, 0)
        return f"{self.name} (sm_{major}{minor})"


_current: Device | None = None


def requested_mode(mode: str | None = None) -> str:
    """The mode asked for by argument, else by COURSE_MODE, else 'auto'."""
    asked = (mode or os.environ.get("COURSE_MODE") or "auto").strip().lower()
    if asked not in (*MODES, "auto"):
        raise ModeError(f"unknown mode {asked!r}: use 'gpu', 'interpreter' or 'auto'")
    return asked


def setup(mode: str | None = None) -> Device:
    """Decide the mode, set Triton's environment for it, and return the Device.

    Run this before `import triton`. Calling it again with the same answer is harmless.
    """
    global _current
    asked = requested_mode(mode)
    chosen = asked
    if asked != INTERPRETER:  # only then ask torch about CUDA (importing it takes seconds)
        import torch

        cuda = torch.cuda.is_available()
        if asked == GPU and not cuda:
            raise ModeError(
                "COURSE_MODE=gpu, but torch sees no CUDA GPU (torch.cuda.is_available() is "
                "False). Check `nvidia-smi` and that torch is a CUDA build, or use the interpreter."
            )
        if asked == "auto":
            # An explicit TRITON_INTERPRET=1 from the user is honoured even where a GPU is present.
            wants_interpreter = os.environ.get("TRITON_INTERPRET") == "1" or not cuda
            chosen = INTERPRETER if wants_interpreter else GPU

    set_triton_environment(chosen)
    if chosen == GPU:  # torch was imported above: only an interpreter request skips it
        props = torch.cuda.get_device_properties(0)
        _current = Device(GPU, props.name, (props.major, props.minor), props.total_memory)
    else:
        _current = Device(INTERPRETER, "CPU (Triton interpreter)")
    _publish_versions(chosen)
    return _current


def _publish_versions(mode: str) -> None:
    """In a notebook's kernel, the versions it runs on, as a line and as data: the notebook keeps
    what it last ran on, which grading compares with its own (grader.grading.assemble.ran_on)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if getattr(shell, "kernel", None) is None:
        return
    from IPython.display import display

    from grader.runtime import published

    found = {**published.versions(), "mode": mode}
    line = f"torch {found['torch']}, Triton {found['triton']}, {mode} mode"
    display({published.VERSIONS_MIMETYPE: found, "text/plain": line}, raw=True)


def current() -> Device:
    """The Device chosen by setup(); sets up with the default mode if nobody has yet."""
    return _current if _current is not None else setup()


def set_triton_environment(mode: str) -> None:
    """Set Triton's environment for `mode` ("gpu" or "interpreter"), before `import triton`."""
    want = "1" if mode == INTERPRETER else None
    have = os.environ.get("TRITON_INTERPRET")
    if (have == "1") != (want == "1") and "triton" in sys.modules:
        raise ModeError(
            f"triton was imported before grader.runtime.device.setup() chose {mode} mode. "
            "Restart the kernel and run the notebook from the top: setup() must come first."
        )
    if want:
        os.environ["TRITON_INTERPRET"] = want
        # The interpreter computes with numpy, which warns on stderr where a GPU silently gives
        # inf or NaN (exp overflow, -inf - -inf in a masked lane). nbgrader scores a test cell
        # with stderr output 0, so those warnings are turned off, as the hardware has none.
        import numpy

        numpy.seterr(over="ignore", invalid="ignore", divide="ignore", under="ignore")
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    # Triton 3.9 warns on stderr at every first compile unless this is set; 1 is the behaviour of
    # earlier releases (fused multiply-add allowed), so results match across versions.
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
