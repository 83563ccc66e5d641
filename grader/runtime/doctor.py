"""What this machine is, which versions it runs, what can be graded here, and which known-bad
combinations of versions and settings are present."""

from __future__ import annotations

import importlib.metadata as metadata
import os
import platform
import re
import sys
from dataclasses import dataclass

from grader.runtime import device

# The course build's and batch grading's tools, which students do not install (the student kit
# has none): listed only where they are.
AUTHOR_TOOLS = ("nbgrader", "papermill", "jupytext")
PACKAGES = (
    *"torch triton numpy matplotlib ipywidgets jupyterlab_widgets jupyterlab".split(),
    *AUTHOR_TOOLS,
)
# The releases the course is tested on (docs/versions.md: the GPU image's and the newest with a
# CPU build), and the oldest it supports (pyproject.toml's ranges). Others in between are
# supported but untested.
TESTED = {"triton": ("3.6", "3.9"), "torch": ("2.11", "2.13")}
MINIMUM = {"triton": (3, 2), "torch": (2, 5)}
# Triton's interpreter before 3.7 converts 1-element arrays to Python ints, which NumPy 2.4 refuses:
# a loop over a runtime bound (`range(tl.cdiv(K, BLOCK_K))`) fails in interpreter mode.
INTERPRETER_NUMPY_FIX = {"triton": (3, 7), "numpy": (2, 4)}


@dataclass(frozen=True)
class Finding:
    level: str  # "problem" (fix it) or "note" (know it)
    message: str


def version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _tuple(v: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", v.split("+")[0])[:3]) if v else ()


def support(package: str, installed: str | None) -> tuple[str, str]:
    """Whether the course supports this torch or triton release: ("tested" | "untested" |
    "unsupported" | "missing", one sentence)."""
    tested = " and ".join(TESTED[package])
    if installed is None:
        return "missing", (
            f"{package} is not installed: run `bash setup.sh` in the student kit "
            "(`make setup` in the repository)."
        )
    have = _tuple(installed)
    oldest = ".".join(map(str, MINIMUM[package]))
    if have < MINIMUM[package]:
        return "unsupported", (
            f"{package} {installed} is older than the course supports ({oldest}); "
            f"tested on {tested}. Install a newer {package}."
        )
    if ".".join(map(str, have[:2])) in TESTED[package]:
        return "tested", f"{package} {installed}: tested."
    return "untested", (
        f"{package} {installed} is supported ({oldest} or newer) but untested: the course is "
        f"tested on {tested}. Report what fails."
    )


def torch_wants_triton() -> str | None:
    """The exact triton version torch declares, if it declares one."""
    for req in metadata.requires("torch") or []:
        m = re.match(r"triton\s*==\s*([\w.]+)", req.split(";")[0].strip())
        if m:
            return m.group(1)
    return None


def findings(
    dev: device.Device,
    versions: dict[str, str | None],
    *,
    cuda_visible: bool,
    torch_cuda: str | None,
    triton_for_torch: str | None,
    env: dict[str, str],
) -> list[Finding]:
    """Known-bad combinations, from facts passed in (so each rule is testable)."""
    out: list[Finding] = []

    def problem(message: str) -> None:
        out.append(Finding("problem", message))

    def note(message: str) -> None:
        out.append(Finding("note", message))

    triton_v = _tuple(versions.get("triton"))
    for package in ("torch", "triton"):
        status, message = support(package, versions.get(package))
        if status != "tested":
            (note if status == "untested" else problem)(message)
    if (
        not dev.is_gpu
        and () < triton_v < INTERPRETER_NUMPY_FIX["triton"]
        and _tuple(versions.get("numpy")) >= INTERPRETER_NUMPY_FIX["numpy"]
    ):
        problem(
            f"triton {versions['triton']} with numpy {versions['numpy']} in interpreter "
            "mode: Triton's interpreter before 3.7 cannot take a loop bound from a kernel "
            "argument under NumPy 2.4 or newer (TypeError: only 0-dimensional arrays can be "
            "converted to Python scalars). Install numpy==2.3.5 or triton 3.7 or newer."
        )
    if triton_for_torch and versions.get("triton") and (_tuple(triton_for_torch) != triton_v):
        problem(
            f"torch {versions['torch']} was built against triton {triton_for_torch}, but triton "
            f"{versions['triton']} is installed: torch.compile and Triton kernels may fail. "
            "Reinstall the pair."
        )
    widgets = _tuple(versions.get("ipywidgets"))
    lab_widgets = _tuple(versions.get("jupyterlab_widgets"))
    if widgets and lab_widgets and (widgets[0] - 5) != lab_widgets[0]:
        problem(
            f"ipywidgets {versions['ipywidgets']} needs jupyterlab_widgets {widgets[0] - 5}.x, "
            f"found {versions['jupyterlab_widgets']}: widgets will not render in the lab."
        )
    if env.get("TRITON_INTERPRET") == "1" and cuda_visible:
        problem(
            "TRITON_INTERPRET=1 is set although a CUDA GPU is visible: kernels run on the CPU and "
            "nothing can be timed. Unset it."
        )
    if torch_cuda and not cuda_visible:
        note(
            f"torch is a CUDA {torch_cuda} build but sees no GPU: check `nvidia-smi` and the "
            "driver. Interpreter mode is used meanwhile."
        )
    if dev.is_gpu and not dev.grades_speed:
        problem(
            f"{dev.describe()} is older than sm_80: correctness runs, but bf16, TF32 and speed "
            "grading need sm_80 or newer."
        )
    if dev.is_gpu and dev.capability and dev.capability < (9, 0):
        note("Hopper-only (sm_90) sections will be skipped here.")
    if not dev.is_gpu:
        note("interpreter mode: no bfloat16, no timing; use small sizes.")
    if triton_v >= (3, 9) and "TRITON_DEFAULT_FP_FUSION" not in env:
        note(
            "triton 3.9+ warns on stderr at the first compile unless TRITON_DEFAULT_FP_FUSION is "
            "set, and nbgrader scores a test cell with stderr output 0. "
            "grader.runtime.device.setup() sets it to 1."
        )
    return out


def collect(env: dict[str, str] | None = None) -> tuple[list[tuple[str, str]], list[Finding]]:
    """Rows of facts about this machine, and the findings about them. `env` is the environment
    as the user set it (before device.setup() adjusted it); by default, the current one."""
    env_before = dict(os.environ if env is None else env)
    dev = device.current()
    import torch

    versions = {p: version(p) for p in PACKAGES}
    rows = [
        ("python", sys.version.split()[0]),
        ("platform", platform.platform()),
        ("mode", f"{dev.mode} ({dev.describe()})"),
    ]
    if dev.is_gpu:
        major, minor = dev.capability
        rows += [
            ("capability", f"sm_{major}{minor}"),
            ("GPU memory", f"{dev.memory_bytes / 2**30:.0f} GiB"),
            ("CUDA (torch build)", str(torch.version.cuda)),
        ]
    rows += [(p, v or "not installed") for p, v in versions.items() if v or p not in AUTHOR_TOOLS]
    rows += [(f"{p} support", support(p, versions[p])[0]) for p in ("torch", "triton")]
    rows += [
        ("TRITON_INTERPRET", env_before.get("TRITON_INTERPRET", "unset")),
        ("grades correctness", "yes"),
        ("grades speed", "yes" if dev.grades_speed else "no: needs an NVIDIA GPU, sm_80+"),
        ("hardware counters", counters(dev)),
    ]
    found = findings(
        dev,
        versions,
        cuda_visible=torch.cuda.is_available(),
        torch_cuda=torch.version.cuda,
        triton_for_torch=torch_wants_triton(),
        env=env_before,
    )
    return rows, found


def counters(dev: device.Device) -> str:
    """Where this machine's profiles come from: Nsight Compute (its path; whether the counters may
    be read shows at the first profile, and `profile.canary()` says whether they can be
    believed), or the recordings that ship with the course, and why."""
    from grader.runtime import profile

    if not dev.is_gpu:
        return "recorded profiles (live ones need an NVIDIA GPU and Nsight Compute)"
    try:
        return f"Nsight Compute, {profile.find_ncu()} (profile.canary() checks them)"
    except profile.ProfileError:
        return f"recorded profiles: no Nsight Compute (ncu); set {profile.NCU_ENV} or install it"


def report(env: dict[str, str] | None = None) -> tuple[str, list[Finding]]:
    """The doctor's printable report, and its findings."""
    rows, found = collect(env)
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    count = sum(f.level == "problem" for f in found)
    lines += ["", "known-bad combinations: " + (f"{count} found" if count else "none found")]
    lines += [f"  {f.level.upper()}: {f.message}" for f in found]
    return "\n".join(lines), found
