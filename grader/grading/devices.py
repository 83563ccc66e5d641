"""The GPUs of one host, handed out by the batch: each student graded on a GPU holds it alone for
its whole grading (its speed cells time kernels), and no other student of this batch or of
another batch on the host runs on it meanwhile (grader.grading.hostlock).

The batch, not the student's code, picks the device: the sandbox binds only that GPU's device
node into the kernel's /dev (grader.grading.jail) and sets CUDA_VISIBLE_DEVICES to its UUID,
which names it whatever order CUDA counts devices in. GPUs are found with `nvidia-smi -q -x`, in
a process of its own: the trusted process never initializes CUDA.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from grader.grading import hostlock

NVIDIA_SMI = "nvidia-smi"
VISIBLE = "CUDA_VISIBLE_DEVICES"


class DeviceError(RuntimeError):
    """The GPUs asked for cannot be used; the message says what to fix."""


@dataclass(frozen=True)
class Gpu:
    """One GPU: `index` as nvidia-smi numbers it (PCI bus order), `minor` its device node
    /dev/nvidia<minor>, `uuid` what CUDA_VISIBLE_DEVICES names it by."""

    index: int
    minor: int
    uuid: str
    name: str = ""

    @property
    def node(self) -> str:
        return f"/dev/nvidia{self.minor}"

    @property
    def env(self) -> dict[str, str]:
        """The variables that show a CUDA program this GPU alone."""
        return {VISIBLE: self.uuid}


def parse_nvidia_smi(xml: str) -> list[Gpu]:
    """The GPUs of `nvidia-smi -q -x`'s report, in its order (its indexes)."""
    found = []
    for index, gpu in enumerate(ET.fromstring(xml).iter("gpu")):
        minor, uuid = gpu.findtext("minor_number"), gpu.findtext("uuid")
        if not (minor and minor.strip().isdigit() and uuid and uuid.strip()):
            raise DeviceError(
                f"nvidia-smi's report of GPU {index} has no minor number or UUID (a MIG "
                "instance, or an unusual driver): pass --gpus none and grade on one device"
            )
        found.append(Gpu(index, int(minor), uuid.strip(), (gpu.findtext("product_name") or "")))
    return found


def detect() -> list[Gpu]:
    """Every NVIDIA GPU of this host, as nvidia-smi lists them; none without nvidia-smi."""
    program = shutil.which(NVIDIA_SMI)
    if program is None:
        return []
    done = subprocess.run([program, "-q", "-x"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        if "couldn't communicate with the NVIDIA driver" in done.stdout + done.stderr:
            return []
        raise DeviceError(f"`nvidia-smi -q -x` failed: {(done.stdout + done.stderr)[-500:]}")
    return parse_nvidia_smi(done.stdout)


def _named(found: Sequence[Gpu], name: str) -> Gpu:
    """The GPU of `found` that `name` names: an index, a UUID, or a UUID's unique prefix."""
    name = name.strip()
    if name.isdigit():
        match = [g for g in found if g.index == int(name)]
    else:
        match = [g for g in found if g.uuid.startswith(name)]
    if len(match) != 1:
        known = ", ".join(f"{g.index} ({g.uuid})" for g in found) or "none"
        raise DeviceError(f"no single GPU named {name!r} on this host; its GPUs: {known}")
    return match[0]


def visible(found: Sequence[Gpu], env: Mapping[str, str]) -> list[Gpu]:
    """The GPUs of `found` this process may use: those CUDA_VISIBLE_DEVICES names where it is
    set (Slurm sets it for a job's GPUs), else all."""
    names = env.get(VISIBLE)
    if names is None:
        return list(found)
    return [_named(found, n) for n in names.split(",") if n.strip()]


def select(request: str, found: Sequence[Gpu], env: Mapping[str, str] = os.environ) -> list[Gpu]:
    """The GPUs `request` asks for: "all" (those `visible`), or a comma-separated list of
    nvidia-smi indexes or UUIDs, each once."""
    chosen = (
        visible(found, env) if request == "all" else [_named(found, n) for n in request.split(",")]
    )
    if not chosen:
        raise DeviceError(
            "no GPU to grade on: nvidia-smi lists none"
            + (f" that {VISIBLE}={env.get(VISIBLE)!r} names" if VISIBLE in env else "")
            + "; check `nvidia-smi`, or grade on the CPU (--mode interpreter)"
        )
    if len(set(chosen)) != len(chosen):
        raise DeviceError(f"--gpus {request}: a GPU is named twice")
    return chosen


class Pool:
    """GPUs handed out one student at a time. `lease` waits for a GPU no grading on this host
    holds and holds it until its block ends, however the block ends."""

    def __init__(self, gpus: Sequence[Gpu]):
        self.gpus = list(gpus)

    @contextmanager
    def lease(self) -> Iterator[Gpu | None]:
        """A GPU of the pool held alone while the block runs; None for a pool of no GPU."""
        if not self.gpus:
            yield None
            return
        by_lock = {f"gpu-{g.uuid}": g for g in self.gpus}
        with hostlock.first_free(list(by_lock)) as name:
            yield by_lock[name]
