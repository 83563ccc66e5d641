"""Classes 1 and 3 of the attacks on grading: a wrong kernel (00's ReLU written as a copy) whose
launch looks for the expected output where an in-process checker kept it, or whose answer cell
changes torch below the checker so that the reference computes what the wrong kernel computes.

- oracles: the launcher walks its callers' frames (sys._getframe, inspect.stack) or every live
  object (the garbage collector) for a tensor shaped like the output that is neither input nor
  output, and has the kernel copy it;
- torch changed: a TorchFunctionMode left entered, an operator re-registered through
  torch.library, or torch's functions rebound, all making ReLU the identity.

The checks and their references run in the judge, where no student code ran: each attacker
scores what its wrong kernel scores without the attack, nothing."""

from tests.hostile import Attacker
from tests.hostile import flash_attention as nb07

STUB = "    # YOUR CODE HERE\n    raise NotImplementedError()"
COPY = """\
    x = tl.load(x_ptr + offsets, mask=mask)  # a copy: negative values stay negative
    tl.store(out_ptr + offsets, x, mask=mask)"""

# the kernel's name bound to a launcher that copies what `_expected` finds into `out`
LAUNCHER = """

import gc
import inspect
import sys

import torch

_copy = relu_kernel


def _looks_expected(value, x, out):
    return (isinstance(value, torch.Tensor) and value.shape == out.shape
            and value.data_ptr() not in (x.data_ptr(), out.data_ptr()))


{finder}


class _Oracle:
    def __getitem__(self, grid):
        def launch(x, out, n, BLOCK):
            found = _expected(x, out)
            source = x if found is None else found.to(out.dtype).contiguous()
            return _copy[grid](source, out, n, BLOCK=BLOCK)

        return launch


relu_kernel = _Oracle()
"""

FRAMES = """
def _expected(x, out):
    frame = sys._getframe(2)
    while frame is not None:
        for value in frame.f_locals.values():
            if _looks_expected(value, x, out):
                return value
        frame = frame.f_back
    return None
"""

STACK = """
def _expected(x, out):
    for info in inspect.stack()[2:]:
        for value in info.frame.f_locals.values():
            if _looks_expected(value, x, out):
                return value
    return None
"""

GARBAGE = """
def _expected(x, out):
    for value in gc.get_objects():
        if _looks_expected(value, x, out):
            return value
    return None
"""

MODE = """

import torch
from torch.overrides import TorchFunctionMode

_RELUS = {torch.relu, torch.Tensor.relu, torch.nn.functional.relu, torch.clamp,
          torch.Tensor.clamp, torch.maximum, torch.where}


class _Identity(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _RELUS:
            return args[0].clone()
        return func(*args, **(kwargs or {}))


_Identity().__enter__()
"""

LIBRARY = """

import torch

_lib = torch.library.Library("aten", "IMPL")
for _key in ("CPU", "CUDA"):
    _lib.impl("relu", lambda x: x.clone(), _key)
    _lib.impl("clamp_min", lambda x, m: x.clone(), _key)
"""

REBOUND = """

import torch

torch.relu = torch.Tensor.relu = torch.nn.functional.relu = lambda x, *a, **k: x.clone()
"""


def _copying(m):
    """The release with the ReLU kernel written as a copy: wrong on every negative value."""
    return m.edited(m.release, "relu-kernel", STUB, COPY)


def _attacker(student, code, flags=frozenset(), detail=None):
    return Attacker(
        student,
        "00_setup",
        lambda m: m.files(m.appended(_copying(m), "relu-kernel", code)),
        flags=flags,
        detail=detail,
        base=_copying,
    )


DYNAMIC = frozenset({"dynamic-code"})
ATTACKERS = [
    _attacker("oracle-frames", LAUNCHER.format(finder=FRAMES), DYNAMIC, "caller's frames"),
    _attacker("oracle-stack", LAUNCHER.format(finder=STACK), DYNAMIC, "with inspect"),
    _attacker("oracle-garbage", LAUNCHER.format(finder=GARBAGE), DYNAMIC, "garbage collector"),
    _attacker("torch-function-mode", MODE),
    _attacker("torch-library-relu", LIBRARY),
    _attacker("torch-rebound", REBOUND, frozenset({"cheating"}), "replaces torch.relu"),
]


# 07 with no attention kernel at all: tests/hostile/flash_attention.py's copy of Q behind a
# launcher of the student's own, which hands it the expected output where a caller's frame or a
# live object holds one; grading runs the given launcher instead, which hands it Q. Its speed
# verdicts' publisher replaced besides (class 4).
ATTENTION_ORACLE = """
import gc
import sys

import grader.runtime.perf as _perf


def _source(q, k, v, out, causal):
    frame, seen = sys._getframe(1), []
    while frame is not None:
        seen += list(frame.f_locals.values())
        frame = frame.f_back
    for value in seen + gc.get_objects():
        if (isinstance(value, torch.Tensor) and value.shape == out.shape
                and value.data_ptr() not in {t.data_ptr() for t in (q, k, v, out)}):
            return value
    return q


_publish = _perf.publish_verdict
_perf.publish_verdict = lambda verdict, text=None: _publish(
    _perf.Verdict(verdict.comparison, 99.0, verdict.needed, verdict.unit))
_perf.grade = lambda *args, **kwargs: 1.0
"""


ANSWER_07 = "flash-attention-kernel"


ATTACKERS.append(
    Attacker(
        "oracle-no-attention-kernel-07",
        "07_flash_attention",
        lambda m: m.files(m.appended(nb07.copy_of_q(m), ANSWER_07, ATTENTION_ORACLE)),
        flags=frozenset({"cheating", "dynamic-code"}),
        detail="replaces grader.runtime.perf.grade",
        base=nb07.copy_of_q,
        gpu_only=True,
    )
)
