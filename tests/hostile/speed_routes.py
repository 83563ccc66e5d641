"""Class 10 of the attacks on grading, on speed, from the answer cells: work skipped on a call
whose inputs look like the last one's; a library (cuDNN's attention) computing the result while
the exercise's own kernel is launched on the real inputs and once more to copy that result into
`out`; a class of the notebook's side module rebound so that large problems run on cuBLAS. Every
speed cell goes through one path (grader.runtime.perf.grade), which draws the inputs afresh, checks
the call's own work and takes a census of the GPU kernels of every timed call: each attack is
flagged and its speed cells score 0, while its correctness earns no more than its honest base.
These need a GPU: tests/test_hostile_gpu.py grades them there."""

from tests.hostile import Attacker

REMEMBERS = """


class _Remembers:
    \"\"\"The kernel, launched only when q is not what the last launch was given.\"\"\"

    def __init__(self, kernel):
        self.kernel, self.last = kernel, None

    def __getitem__(self, grid):
        def launch(q, k, v, out, *args, **kwargs):
            key = (q.data_ptr(), float(q.flatten()[:64].float().sum()))
            if key != self.last:
                self.last = key
                self.kernel[grid](q, k, v, out, *args, **kwargs)

        return launch

    def __getattr__(self, name):
        return getattr(self.kernel, name)


attn_fwd_kernel = _Remembers(attn_fwd_kernel)
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

LARGE_ON_CUBLAS = """


_tuned_call = gemm.Tuned.__call__


def _large_on_cublas(self, a, b, out):
    if a.shape[0] * b.shape[1] >= 1 << 20:
        return torch.matmul(a, b, out=out)
    return _tuned_call(self, a, b, out)


gemm.Tuned.__call__ = _large_on_cublas
"""


def _remembers(m):
    return m.files(m.appended(m.answered(), "flash-attention-kernel", REMEMBERS))


def _cudnn_then_copy(m):
    """The kernel given a COPY mode (store Q as it is), and launched twice per call."""
    nb = m.answered()
    block_n = "    BLOCK_N: tl.constexpr,  # key rows per loop iteration; divides BLOCK_M\n"
    copy = "    COPY: tl.constexpr = False,  # store Q as it is\n"
    nb = m.edited(nb, "flash-attention-kernel", block_n, block_n + copy)
    store = "(acc / l_i[:, None]).to(Out.dtype.element_ty)"
    nb = m.edited(nb, "flash-attention-kernel", store, store.replace("(acc", "(q if COPY else acc"))
    return m.files(m.appended(nb, "flash-attention-kernel", CUDNN_THEN_COPY))


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


ATTACKERS = [
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
        "ran inside the timed calls",
        attacked={"speed-flash-attention"},
    ),
    _attacker(
        "cublas-large-05",
        "05_autotuning",
        lambda m: m.files(m.appended(m.answered(), "config-space", LARGE_ON_CUBLAS)),
        "launched none of matmul_kernel",
    ),
]
