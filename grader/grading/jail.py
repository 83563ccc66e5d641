"""The Jupyter kernel that runs a student's code, in an OS sandbox (bubblewrap, `bwrap`);
docs/instructors.md ("The sandbox") says what the code inside sees, and under which limits.

nbgrader stays on the trusted side (it needs the gradebook); only its kernel is jailed: its
kernelspec's argv is this module (`python -m grader.grading.jail SPEC CONNECTION_FILE`), which
nbgrader's KernelManager starts in the notebook's folder and which replaces itself with `bwrap
... KERNEL_ARGV`, so the process the kernel manager watches and kills is bwrap, and the sandbox
dies with it. The kernel talks to nbgrader over ZMQ's ipc transport: Unix sockets in a private
folder bound into the sandbox, which has no network. Its working directory, at nbgrader's path,
is a size-limited tmpfs holding a copy of nbgrader's folder without the notebooks (nbgrader's
copy holds the hidden tests).

bwrap runs as root, without a user namespace: as root, bwrap's user namespace would map the
sandbox's uid to root outside, which RLIMIT_NPROC does not count and which would own what the
kernel writes. The first thing run inside, before any student code, is `DROP` below: it sets the
limits, drops to `uid` (one per concurrent student, never root) and clears every capability.
A signal sent to the kernel manager's process group does not reach a kernel inside bwrap, so
the kernelspec asks for interrupts as messages (ipykernel then interrupts itself); the kernel
runs in a session of its own (`--new-session`), with no terminal to type into.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.grading import hostlock

BWRAP = "bwrap"
INSTALL = "apt-get install bubblewrap"
KERNEL_NAME = "course-sandbox"
UID_BASE = 2_000_000_000  # sandboxes run as UID_BASE + slot: ids no account on the host uses
HOME = "/home/student"
RUNTIME = "/opt/course"  # the read-only copy of grader/__init__.py and grader/runtime/
SEED = "/opt/submission"  # the read-only copy of the working directory, copied into it at start
KERNEL_CACHE = "/opt/kernel-cache"  # the batch's compiled kernels (grading.kernel_cache), read-only
TRITON_CACHE = f"{HOME}/.triton/cache"  # the kernel's Triton cache: its own, a tmpfs of HOME
GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
# what the kernel's Python, torch, Triton (its C compiler) and CUDA read from /etc
ETC = "ld.so.cache ld.so.conf ld.so.conf.d passwd group nsswitch.conf localtime alternatives fonts"
KERNEL_MODULES = ("ipykernel", "ipywidgets", "matplotlib", "tqdm", "numpy", "torch", "triton")
KEEP_ENV = {"PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "NBGRADER_EXECUTION"}
KEEP_ENV |= {"CUDA_INJECTION64_PATH"}  # the judge's GPU activity library (grading.activity)
KEEP_PREFIXES = ("COURSE_", "TRITON_", "OMP_", "MKL_", "CUDA_VISIBLE", "NVIDIA_")

# Run inside the sandbox as root (bwrap gave it CAP_SETUID, CAP_SETGID and CAP_SETPCAP only),
# by the kernel's Python with -I: argv is UID NPROC FSIZE SEED CACHE KERNEL_ARGV... (CACHE: the
# batch's compiled kernels, copied into the kernel's own Triton cache; "-" where there are none.
# A copy that fails, for want of room say, is removed: the kernel then compiles everything.)
DROP = """
import ctypes, os, resource, shutil, sys
uid, nproc, fsize, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
libc = ctypes.CDLL(None, use_errno=True)
for cap in range(64):
    libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP: nothing can be regained by exec
resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
os.setgroups([])
os.setresgid(uid, uid, uid)
os.setresuid(uid, uid, uid)
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
if libc.capset(ctypes.byref(Header(0x20080522, 0)), (ctypes.c_uint32 * 6)()) != 0:
    raise OSError(ctypes.get_errno(), "capset")
for entry in os.scandir(seed):  # into the working directory, a tmpfs owned by root
    if entry.is_dir(follow_symlinks=False):
        shutil.copytree(entry.path, entry.name, symlinks=True)
    else:
        shutil.copy2(entry.path, entry.name, follow_symlinks=False)
if sys.argv[5] != "-":
    try:
        shutil.copytree(sys.argv[5], os.environ["TRITON_CACHE_DIR"], dirs_exist_ok=True)
    except Exception:
        shutil.rmtree(os.environ["TRITON_CACHE_DIR"], ignore_errors=True)
os.execv(sys.argv[6], sys.argv[6:])
"""


class JailError(RuntimeError):
    """The sandbox cannot be used; the message says what to install or fix."""


def available() -> bool:
    return shutil.which(BWRAP) is not None


def require() -> None:
    """Fail with the install command where bwrap is missing, or where it cannot run here."""
    if not available():
        raise JailError(
            f"bubblewrap (`bwrap`) is not installed: grading runs each student's code in its "
            f"sandbox. Install it (`{INSTALL}` on Debian and Ubuntu, `dnf install bubblewrap` on "
            "Fedora), or pass `--sandbox none` to grade without it (the class report says so)."
        )
    if os.geteuid() != 0:
        raise JailError(
            "the grading sandbox runs as root (it gives each student's kernel an unprivileged "
            "uid of its own); run `python -m grader autograde` as root, or pass `--sandbox none`"
        )
    probe = [BWRAP, "--dev-bind", "/", "/", "--unshare-pid", "--unshare-net", "--", "true"]
    done = subprocess.run(probe, capture_output=True, text=True)
    if done.returncode != 0:
        raise JailError(
            f"bwrap cannot make namespaces here: {done.stderr.strip()}. Inside a container, "
            "allow it (Docker: `--security-opt seccomp=unconfined --cap-add SYS_ADMIN`, or "
            "`--privileged`), or grade on the host; `--sandbox none` grades without it."
        )


@dataclass(frozen=True)
class Spec:
    """One student's sandbox, as the launcher reads it (JSON beside its private folders)."""

    folder: str  # the private folder: run/ (sockets), lib/ (runtime copy), seed/
    kernel_argv: list[str]  # the real kernel's argv, with "{connection_file}"
    uid: int
    scratch_bytes: int  # size of each writable tmpfs; no file may pass half of it (RLIMIT_FSIZE)
    nproc: int  # RLIMIT_NPROC: processes and threads of the sandbox's uid
    gpu: int | None = None  # /dev/nvidia<gpu> is bound in, with the driver's shared nodes
    env: dict[str, str] = field(default_factory=dict)  # set inside, over the filtered one
    tools: list[str] = field(default_factory=list)  # folders bound read-only (Nsight Compute)
    kernel_cache: str = ""  # the batch's compiled kernels (grader.grading.kernel_cache), if any
    compiling: bool = False  # kernel_cache is bound writable as the Triton cache, to be filled

    @property
    def run(self) -> Path:
        return Path(self.folder) / "run"

    @property
    def lib(self) -> Path:
        return Path(self.folder) / "lib"

    @property
    def seed(self) -> Path:
        return Path(self.folder) / "seed"


def slot() -> AbstractContextManager[int]:
    """The lowest slot number (a uid per student graded at the same time on this host) that no
    grading on this host holds, of this batch or of another beside it, while the block runs."""
    return hostlock.numbered("uid-")


# -- the trusted side: prepare a student's folder --------------------------------------------


def readable(folder: Path) -> None:
    """Make `folder` and everything in it but links readable by everyone."""
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


@contextmanager
def prepared(
    kernel_argv: Sequence[str],
    *,
    uid: int,
    scratch_bytes: int,
    nproc: int,
    gpu: int | None = None,
    env: dict[str, str] | None = None,
    tools: Sequence[str] = (),
    kernel_cache: Path | None = None,
    compiling: bool = False,
) -> Iterator[tuple[Path, dict[str, str]]]:
    """A student's private folder with its spec and kernelspec, removed afterwards. Yields the
    spec's path and the variables nbgrader needs (its kernelspec and runtime folders)."""
    folder = Path(tempfile.mkdtemp(prefix="course-jail-"))
    try:
        if len(f"{folder}/run/kernel-65535") > 107:  # sun_path: 108 bytes with its NUL
            raise JailError(f"{folder}: too long for Unix sockets; set TMPDIR to a short path")
        spec = Spec(
            str(folder), list(kernel_argv), uid, scratch_bytes, nproc, gpu, env or {}, list(tools),
            kernel_cache=str(kernel_cache or ""), compiling=compiling,
        )  # fmt: skip
        folder.chmod(0o755)
        spec.run.mkdir()
        os.chown(spec.run, uid, uid)
        spec.run.chmod(0o700)
        package = Path(__file__).resolve().parents[1]  # grader/__init__.py and grader/runtime/
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(package / "runtime", spec.lib / "grader" / "runtime", ignore=ignore)
        shutil.copy2(package / "__init__.py", spec.lib / "grader")
        readable(spec.lib)
        path = folder / "spec.json"
        path.write_text(json.dumps(asdict(spec), indent=1))
        kernels = folder / "share" / "kernels" / KERNEL_NAME
        kernels.mkdir(parents=True)
        launcher = [sys.executable, "-m", "grader.grading.jail", str(path), "{connection_file}"]
        kernelspec = {
            "argv": launcher,
            "display_name": "Python (graded, sandboxed)",
            "language": "python",
            "interrupt_mode": "message",  # a cell's timeout: see this module's docstring
        }
        (kernels / "kernel.json").write_text(json.dumps(kernelspec))
        yield path, {"JUPYTER_PATH": str(folder / "share"), "JUPYTER_RUNTIME_DIR": str(spec.run)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def for_batch(
    kernel: str,
    *,
    memory_limit: int,
    gpu: int | None,
    env: dict[str, str],
    tools: Sequence[str] = (),
    kernel_cache: Path | None = None,
    compiling: bool = False,
) -> Iterator[tuple[Path, dict[str, str]]]:
    """`prepared` as a grading batch asks it: a slot of this host's for the uid, the kernelspec
    `kernel`'s argv, scratch folders of a quarter of `memory_limit`, and at most max(1024,
    8 x cores) processes."""
    with (
        slot() as n,
        prepared(
            kernel_argv(kernel),
            uid=UID_BASE + n,
            scratch_bytes=memory_limit // 4,
            nproc=max(1024, 8 * (os.cpu_count() or 1)),
            gpu=gpu,
            env=env,
            tools=tools,
            kernel_cache=kernel_cache,
            compiling=compiling,
        ) as found,
    ):
        yield found


def kernel_argv(name: str) -> list[str]:
    """The argv of the kernelspec `name`, its program made absolute as jupyter_client would
    (a bare `python` is the Python running this)."""
    from jupyter_client.kernelspec import KernelSpecManager

    argv = list(KernelSpecManager().get_kernel_spec(name).argv)
    major, minor = sys.version_info[:2]
    if argv[0] in {"python", f"python{major}", f"python{major}.{minor}"}:
        argv[0] = sys.executable
    argv[0] = shutil.which(argv[0]) or argv[0]
    return argv


def nbgrader_options(spec_path: Path) -> list[str]:
    """nbgrader's options for a jailed kernel: its kernelspec, and ZMQ over Unix sockets in
    the private run/ folder (the sandbox has no network)."""
    run = spec_path.parent / "run"
    return [
        f"--Execute.kernel_name={KERNEL_NAME}",
        "--KernelManager.transport=ipc",
        f"--KernelManager.ip={run / 'kernel'}",
        f"--KernelManager.connection_file={run / 'kernel.json'}",
    ]


def read(path: Path) -> Spec:
    return Spec(**json.loads(Path(path).read_text()))


class _Args(list):
    """bwrap's options, each mount's missing parents made first, traversable by the sandbox's
    uid (bwrap makes them 0700 as root)."""

    def __init__(self, *options: str):
        super().__init__(options)
        self.made = {"/"}

    def mount(self, option: str, *operands: str, perms: str | None = None) -> None:
        dest = Path(operands[-1])
        for parent in reversed(dest.parents):
            if str(parent) not in self.made:
                self += ["--perms", "0755", "--dir", str(parent)]
                self.made.add(str(parent))
        self += [*(["--perms", perms] if perms else []), option, *operands]
        self.made.add(str(dest))


def _prefixes(executable: str) -> list[str]:
    """The prefixes of the kernel's Python (a venv's and its base) outside /usr."""
    python = Path(executable)
    prefixes = {str(p.parent.parent) for p in (python.absolute(), python.resolve())}
    return sorted(p for p in prefixes if not p.startswith("/usr"))


def package_folders(executable: str) -> list[str]:
    """The folders outside the kernel's Python and /usr that hold what the kernel imports
    (KERNEL_MODULES), found on this process's path (a `pip install --target` folder on
    PYTHONPATH, as .ci/gpu installs the offline wheelhouse), to be bound read-only and put on the
    kernel's PYTHONPATH. One that holds the repository, or lies in it, is refused."""
    import importlib.util

    repository = Path(__file__).resolve().parents[2]
    own = [*_prefixes(executable), *_prefixes(sys.executable)]  # site-packages, not a --target
    found = []
    for name in KERNEL_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        folder = Path(next(iter(spec.submodule_search_locations))).resolve().parent
        if str(folder).startswith("/usr") or any(folder.is_relative_to(p) for p in own):
            continue
        if folder.is_relative_to(repository) or repository.is_relative_to(folder):
            raise JailError(
                f"{name} is installed in {folder}, which holds the course's repository or lies in "
                "it: the sandbox would show it to students. Install the packages elsewhere "
                "(pip install --target DIR, DIR outside the repository)."
            )
        found.append(str(folder))
    return list(dict.fromkeys(found))


def environment(spec: Spec, given: dict[str, str]) -> dict[str, str]:
    """The kernel's environment: the course's and the toolchain's variables from `given`, the
    sandbox's own paths; none of the instructor's other variables."""
    env = {k: v for k, v in given.items() if k in KEEP_ENV or k.startswith(KEEP_PREFIXES)}
    env.update(
        HOME=HOME,
        USER="student",
        LOGNAME="student",
        TMPDIR="/tmp",
        PYTHONPATH=os.pathsep.join([RUNTIME, *package_folders(spec.kernel_argv[0])]),
        PYTHONNOUSERSITE="1",
        COURSE_RESULTS=f"{HOME}/results.json",
        TRITON_CACHE_DIR=TRITON_CACHE,
        MPLCONFIGDIR=f"{HOME}/.config/matplotlib",
        JPY_PARENT_PID="1",  # its parent is the namespace's init, which ipykernel never polls
    )
    env.update(spec.env)
    env.setdefault("PATH", "/usr/bin:/bin")
    return env


def command(spec: Spec, cwd: str, connection_file: str, extra: Sequence[str] = ()) -> list[str]:
    """bwrap's argv for the kernel of `spec` with working directory `cwd`; `extra` are the
    kernel's arguments from nbclient (its history file)."""
    kernel = [a.replace("{connection_file}", connection_file) for a in spec.kernel_argv]
    return sandboxed(spec, cwd, [*kernel, *extra])


def sandboxed(
    spec: Spec,
    cwd: str,
    program: Sequence[str],
    *,
    before: Sequence[str] = (),
    binds: Sequence[str] = (),
) -> list[str]:
    """bwrap's argv that runs `program` in the sandbox of `spec` with working directory `cwd`, as
    the sandbox's uid. `before`, a trusted program (Nsight Compute's ncu, as the judge runs it),
    runs first as root within the sandbox and starts the dropping of rights that then runs
    `program`: it can watch `program`, and `program` cannot reach it. `binds` are host folders
    bound in read-write at their own paths (one only root may enter, for ncu's report)."""
    size = str(spec.scratch_bytes)
    python = spec.kernel_argv[0]
    args = _Args(
        *(BWRAP, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"),
        *("--unshare-cgroup-try", "--hostname", "grading", "--die-with-parent", "--new-session"),
        *("--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"),
        *("--cap-add", "CAP_SETPCAP"),
    )
    args.mount("--ro-bind", "/usr", "/usr")
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):  # links to /usr (merged), or binds
        if os.path.islink(top):
            args.mount("--symlink", os.readlink(top), top)
        elif os.path.isdir(top):
            args.mount("--ro-bind", top, top)
    for name in ETC.split():
        args.mount("--ro-bind-try", f"/etc/{name}", f"/etc/{name}")
    args.mount("--ro-bind", "/sys", "/sys")
    args.mount("--proc", "/proc")
    args.mount("--dev", "/dev")
    for scratch in ("/dev/shm", "/tmp", HOME):
        args.mount("--size", size, "--tmpfs", scratch, perms="1777")
    # the kernel's Python after the scratch folders: a virtual environment in /tmp stays visible
    for prefix in [*_prefixes(python), *package_folders(python)]:
        args.mount("--ro-bind", prefix, prefix)
    args.mount("--ro-bind", str(spec.lib), RUNTIME)
    args.mount("--ro-bind", str(spec.seed), SEED)
    args.mount("--bind", str(spec.run), str(spec.run))
    args.mount("--size", size, "--tmpfs", cwd, perms="1777")
    if spec.gpu is not None:
        for node in (*GPU_NODES, f"/dev/nvidia{spec.gpu}"):
            args.mount("--dev-bind-try", node, node)
    for tool in spec.tools:
        args.mount("--ro-bind", tool, tool)
    if spec.kernel_cache and spec.compiling:  # at the very path the kernels will be read from
        args.mount("--bind", spec.kernel_cache, TRITON_CACHE)
    elif spec.kernel_cache:
        args.mount("--ro-bind", spec.kernel_cache, KERNEL_CACHE)
    for folder in binds:
        args.mount("--bind", folder, folder)
    fsize = str(spec.scratch_bytes // 2)
    cache = KERNEL_CACHE if spec.kernel_cache and not spec.compiling else "-"
    drop = [python, "-I", "-c", DROP, str(spec.uid), str(spec.nproc), fsize, SEED, cache]
    return [*args, "--chdir", cwd, "--", *before, *drop, *program]


# -- the launcher: nbgrader's kernel manager runs this in place of the kernel -----------------


def launch(spec_path: Path, connection_file: str, extra: Sequence[str] = ()) -> None:
    """Seed the working directory, hand the connection file to the sandbox's uid, exec bwrap."""
    spec = read(spec_path)
    if Path(connection_file).parent != spec.run:
        raise JailError(f"{connection_file}: the connection file must be in {spec.run}")
    cwd = os.getcwd()  # nbgrader's folder, copied without notebooks as the sandbox's
    notebooks = shutil.ignore_patterns("*.ipynb", ".ipynb_checkpoints")
    shutil.copytree(cwd, spec.seed, symlinks=True, ignore=notebooks)
    readable(spec.seed)
    os.chown(connection_file, spec.uid, spec.uid)
    argv = command(spec, cwd, connection_file, extra)
    os.chdir("/")
    os.execvpe(argv[0], argv, environment(spec, dict(os.environ)))


def ncu_runner(spec_path: Path, cwd: str):
    """A runner for grader.runtime.profile.collect that starts Nsight Compute in the sandbox of
    the kernel whose spec is at `spec_path`: ncu as root, the profiled child dropped to the
    sandbox's user, with the kernel's environment; the profile's folder bound in (its spec the
    child reads; ncu's report in a subfolder only root enters)."""
    from grader.runtime import profile

    spec = read(spec_path)

    def run(argv: list[str], *, folder: str, env: dict, timeout: float):
        at = argv.index("--log-file") + 2  # ncu's options, then the child: python -m ...
        program = [spec.kernel_argv[0], *argv[at + 1 :]]
        bwrap = sandboxed(spec, cwd, program, before=argv[:at], binds=[folder])
        return profile.run_ncu(bwrap, cwd="/", env=environment(spec, env), timeout=timeout)

    return run


if __name__ == "__main__":
    launch(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
