"""Class 10 of the attacks on grading, on speed, from the answer cells: work skipped on a call
whose inputs look like the last one's (07, 09); a library (cuDNN's attention, cuBLAS's float8
matmul) computing the result while the exercise's own kernel is launched on the real inputs and
once more to copy that result into `out` (07, 09); a class of the notebook's side module rebound
so that large problems run on cuBLAS (05); cuBLAS, or 05's released Triton kernel, computing a
large product while the exercise's kernel, launched in every call, redoes one tile of it (09).
Every speed cell goes through one path (grader.runtime.perf.grade), which draws the inputs
afresh, checks the call's own work and takes a census of the GPU kernels of every timed call:
each attack is flagged and its speed cells score 0, while its correctness earns no more than its
honest base. Two more on 02: a slow kernel whose verdict publisher is replaced (class 4), and
one that breaks the program Nsight Compute profiles, so that its DRAM bytes cannot be counted
(the verdict fails closed). These need a GPU: tests/test_hostile_gpu.py grades them there.
07's and 09's launchers are given code, which the judge runs: a wrapper bound to a kernel's name
is refused there as not a Triton kernel (grader.grading.roles.launchable), and flagged, so the
census of the timed calls is shown by cuDNN working below the name instead, inside Triton's own
launch method (`cudnn-in-triton-run-07`)."""

from tests.hostile import Attacker

REMEMBERS = """


class _Remembers:
    \"\"\"The kernel, launched only when {first} is not what the last launch was given.\"\"\"

    def __init__(self, kernel):
        self.kernel, self.last = kernel, None

    def __getitem__(self, grid):
        def launch({args}, *args, **kwargs):
            key = ({key}, float({first}.flatten()[:64].float().sum()))
            if key != self.last:
                self.last = key
                self.kernel[grid]({args}, *args, **kwargs)

        return launch

    def __getattr__(self, name):
        return getattr(self.kernel, name)


{kernel} = _Remembers({kernel})
"""

CUDNN_THEN_COPY = """


class _CudnnThenCopy:
    \"\"\"cuDNN computes; the kernel runs on the real inputs, then copies cuDNN's result.\"\"\"

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def launch(q, k, v, out, *args, **kwargs):
            done = torch.ops.aten._scaled_dot_product_cudnn_attention(
                q, k, v, None, False, 0.0, False, False)[0].contiguous()
            self.kernel[grid](q, k, v, out, *args, **kwargs)
            self.kernel[grid](done, k, v, out, *args, COPY=True, **kwargs)

        return launch

    def __getattr__(self, name):
        return getattr(self.kernel, name)


attn_fwd_kernel = _CudnnThenCopy(attn_fwd_kernel)
"""

# The same work done below the kernel's name, which the judge then launches: Triton's own
# launch method replaced for every kernel (flagged as a write to triton, and launched all the same)
CUDNN_IN_TRITON_RUN = """
import triton.runtime.jit as _jit

_real_run = _jit.JITFunction.run


def _cudnn_then_copy_run(self, *args, grid, warmup=False, **kwargs):
    if warmup or self.__name__ != "attn_fwd_kernel":
        return _real_run(self, *args, grid=grid, warmup=warmup, **kwargs)
    q, k, v = args[:3]
    done = torch.ops.aten._scaled_dot_product_cudnn_attention(
        q, k, v, None, False, 0.0, False, False)[0].contiguous()
    _real_run(self, *args, grid=grid, warmup=False, **kwargs)
    return _real_run(self, done, *args[1:], grid=grid, warmup=False, COPY=True, **kwargs)


_jit.JITFunction.run = _cudnn_then_copy_run
"""

LARGE_ON_CUBLAS = """


_tuned_call = gemm.Tuned.__call__


def _large_on_cublas(self, a, b, out):
    if a.shape[0] * b.shape[1] >= 1 << 20:
        return torch.matmul(a, b, out=out)
    return _tuned_call(self, a, b, out)


gemm.Tuned.__call__ = _large_on_cublas
"""


def _remembers(m):
    skips = REMEMBERS.format(
        first="q", args="q, k, v, out", key="q.data_ptr()", kernel="attn_fwd_kernel"
    )
    return m.files(m.appended(m.answered(), "flash-attention-kernel", skips))


def _cudnn_then_copy(m, attack=None):
    """The kernel given a COPY mode (store Q as it is), and launched twice per call."""
    nb = m.answered()
    block_n = "    BLOCK_N: tl.constexpr,  # key rows per loop iteration; divides BLOCK_M\n"
    copy = "    COPY: tl.constexpr = False,  # store Q as it is\n"
    nb = m.edited(nb, "flash-attention-kernel", block_n, block_n + copy)
    store = "(acc / l_i[:, None]).to(Out.dtype.element_ty)"
    nb = m.edited(nb, "flash-attention-kernel", store, store.replace("(acc", "(q if COPY else acc"))
    return m.files(m.appended(nb, "flash-attention-kernel", attack or CUDNN_THEN_COPY))


# -- 09: the persistent kernel (speed-persistent) and the float8 kernel (speed-fp8)

REMEMBERS_PERSISTENT = REMEMBERS.format(
    first="a", args="a, b, c", key="a.data_ptr(), b.data_ptr()", kernel="matmul_persistent_kernel"
)

ONE_TILE = """


class _OtherThenOneTile:
    \"\"\"{who} computes large products; the kernel then redoes C's first tile alone, one
    program, so that every call launches it.\"\"\"

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def launch(a, b, c, M, N, K, *args, **kwargs):
            if M * N < 1 << 20:
                return self.kernel[grid](a, b, c, M, N, K, *args, **kwargs)
            {compute}
            tile = min(M, kwargs["BLOCK_M"]), min(N, kwargs["BLOCK_N"])
            return self.kernel[(1,)](a, b, c, *tile, K, *args, **{{**kwargs, "NUM_SMS": 1}})

        return launch

    def __getattr__(self, name):
        return getattr(self.kernel, name)


matmul_persistent_kernel = _OtherThenOneTile(matmul_persistent_kernel)
"""
CUBLAS_THEN_ONE_TILE = ONE_TILE.format(who="cuBLAS", compute="torch.matmul(a, b, out=c)")
# 05's released persistent kernel (gemm.py, beside the notebook), launched as a Triton kernel
# like the student's own
GEMM_THEN_ONE_TILE = ONE_TILE.format(
    who="05's released persistent kernel",
    compute="gemm.launch_persistent(gemm.matmul_kernel_persistent, a, b, c, BLOCK_M=128, "
    "BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)",
)

SCALED_MM_THEN_COPY = """


class _ScaledMmThenCopy:
    \"\"\"torch._scaled_mm (cuBLAS) computes large products; the kernel runs on the real
    inputs, then copies _scaled_mm's result, handed over as A's scale.\"\"\"

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def launch(a8, bt8, c, a_scale, b_scale, *args, **kwargs):
            if c.numel() < 1 << 20:
                return self.kernel[grid](a8, bt8, c, a_scale, b_scale, *args, **kwargs)
            done = torch._scaled_mm(a8, bt8.T, scale_a=a_scale, scale_b=b_scale.T,
                                    out_dtype=c.dtype)
            self.kernel[grid](a8, bt8, c, a_scale, b_scale, *args, **kwargs)
            return self.kernel[grid](a8, bt8, c, done, b_scale, *args, COPY=True, **kwargs)

        return launch

    def __getattr__(self, name):
        return getattr(self.kernel, name)


matmul_fp8_kernel = _ScaledMmThenCopy(matmul_fp8_kernel)
"""


def _scaled_mm_then_copy(m):
    """The float8 kernel given a COPY mode (store the tile of the C that `a_scale_ptr` points
    to, as it is), and launched twice per call on large problems."""
    nb = m.answered()
    num_sms = "    NUM_SMS: tl.constexpr,\n):"
    copy = "    COPY: tl.constexpr = False,  # a_scale_ptr points to C: store its tiles as is\n"
    nb = m.edited(nb, "fp8-kernel", num_sms, num_sms.replace("):", copy + "):"))
    store = "        c_desc.store([pid_m_c * BLOCK_M, pid_n_c * BLOCK_N], c)"
    copied = (
        "        if COPY:\n"
        "            rows = pid_m_c * BLOCK_M + tl.arange(0, BLOCK_M)\n"
        "            cols = pid_n_c * BLOCK_N + tl.arange(0, BLOCK_N)\n"
        "            c = tl.load(a_scale_ptr + rows[:, None] * stride_cm + cols[None, :],\n"
        "                        mask=(rows[:, None] < M) & (cols[None, :] < N))\n"
    )
    nb = m.edited(nb, "fp8-kernel", store, copied + store)
    return m.files(m.appended(nb, "fp8-kernel", SCALED_MM_THEN_COPY))


def _attacked_speed_is_zero_and_nothing_is_gained(student, attacked):
    """The speed cells in `attacked` (those whose kernel the attack wraps; None: all) score 0,
    and no cell scores more than the honest base's."""

    def check(result):
        mine, base = result.scores[student], result.scores[result.bases[student]]
        speed = [g for g in mine if g.startswith("speed-") and (attacked is None or g in attacked)]
        assert speed and all(mine[g] == 0 for g in speed), mine
        assert all((v or 0) <= (base[g] or 0) for g, v in mine.items()), (mine, base)

    return check


def _attacker(student, assignment, files, detail, attacked=None):
    return Attacker(
        student,
        assignment,
        files,
        flags=frozenset({"cheating"}),
        detail=detail,
        total=None,
        base=lambda m: m.answered(),
        check=_attacked_speed_is_zero_and_nothing_is_gained(student, attacked),
        gpu_only=True,
    )


# 02's fused kernel with 1 x 16 tiles: right, and short of both speed thresholds
def _slow_02(m):
    from tests.known_wrong import nb02_first_kernels as nb02

    return m.edited(m.answered(), "fused-kernel", m.cell(m.answered(), "fused-kernel").source,
                    nb02.SLOW["fused-kernel"]["tiles of 1 x 16"])  # fmt: skip


PUBLISHER = """

import grader.runtime.perf as _perf

_publish = _perf.publish_verdict
_perf.publish_verdict = lambda verdict, text=None: _publish(
    _perf.Verdict(verdict.comparison, 99.0, verdict.needed, verdict.unit))
_perf.grade = lambda *args, **kwargs: 1.0
"""

# Anywhere but the notebook's own kernel (the program Nsight Compute profiles), the process ends.
BREAKS_PROFILED = """

import os
import sys

if "ipykernel" not in sys.modules:
    os._exit(3)
"""


def _no_more_than_base_and_zero_on(student, cells):
    """The speed cells `cells` score 0, and no cell scores more than the honest base's."""

    def check(result):
        mine, base = result.scores[student], result.scores[result.bases[student]]
        assert all(mine[g] == 0 for g in cells), mine
        assert all((v or 0) <= (base[g] or 0) for g, v in mine.items()), (mine, base)

    return check


ATTACKERS = [
    Attacker(
        "slow-publisher-02",
        "02_first_kernels",
        lambda m: m.files(m.appended(_slow_02(m), "fused-kernel", PUBLISHER)),
        flags=frozenset({"cheating"}),
        detail="replaces grader.runtime.perf.grade",
        base=_slow_02,
        gpu_only=True,
    ),
    Attacker(
        "breaks-profiled-program-02",
        "02_first_kernels",
        lambda m: m.files(m.appended(m.answered(), "fused-kernel", BREAKS_PROFILED)),
        total=None,
        base=lambda m: m.answered(),
        check=_no_more_than_base_and_zero_on(
            "breaks-profiled-program-02", ["speed-fused-bandwidth"]
        ),
        gpu_only=True,
    ),
    _attacker(
        "skips-repeats-07",
        "07_flash_attention",
        _remembers,
        "attn_fwd_kernel",
        attacked={"speed-flash-attention"},  # the causal kernel is honest, and earns its point
    ),
    _attacker(
        "cudnn-copies-07",
        "07_flash_attention",
        _cudnn_then_copy,
        "binds attn_fwd_kernel to what is not a Triton kernel",  # so the judge launches nothing
        attacked={"speed-flash-attention"},
    ),
    _attacker(
        "cudnn-in-triton-run-07",
        "07_flash_attention",
        lambda m: _cudnn_then_copy(m, CUDNN_IN_TRITON_RUN),
        "ran inside a checked call",  # the judge's own call on its inputs says it first
        attacked={"speed-flash-attention"},
    ),
    _attacker(
        "cublas-large-05",
        "05_autotuning",
        lambda m: m.files(m.appended(m.answered(), "config-space", LARGE_ON_CUBLAS)),
        "launched none of matmul_kernel",
    ),
    _attacker(
        "skips-repeats-09",
        "09_hopper",
        lambda m: m.files(m.appended(m.answered(), "persistent-kernel", REMEMBERS_PERSISTENT)),
        "binds matmul_persistent_kernel to what is not a Triton kernel",
        attacked={"speed-persistent"},  # the float8 kernel is honest, and earns its point
    ),
    _attacker(
        "cublas-one-tile-09",
        "09_hopper",
        lambda m: m.files(m.appended(m.answered(), "persistent-kernel", CUBLAS_THEN_ONE_TILE)),
        "binds matmul_persistent_kernel to what is not a Triton kernel",
        attacked={"speed-persistent"},
    ),
    _attacker(
        "gemm-one-tile-09",
        "09_hopper",
        lambda m: m.files(m.appended(m.answered(), "persistent-kernel", GEMM_THEN_ONE_TILE)),
        "binds matmul_persistent_kernel to what is not a Triton kernel",
        attacked={"speed-persistent"},
    ),
    _attacker(
        "scaled-mm-copies-09",
        "09_hopper",
        _scaled_mm_then_copy,
        "binds matmul_fp8_kernel to what is not a Triton kernel",
        attacked={"speed-fp8"},  # the persistent kernel is honest, and earns its point
    ),
]
