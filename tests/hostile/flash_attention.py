"""Notebook 07's hostile class on its correctness tests, graded in one batch on one wrong base
(`_copy`): Exercise 1's cell replaced by `attn_fwd_kernel`, with the exercise's signature,
copying its Q into Out (attention computed nowhere), and a launcher of the student's own,
`flash_attention`, in that answer cell. The launcher launches the copy on q, k and v, as the
checks require, then again with what `_source` gives in place of Q: Q, unless an attack below
redefines it.

- torch's SDPA computing the output inside that launcher, the copy kernel writing it: through
  torch's Python API, or through aten's operator (`torch.ops.aten`), which the refusal of
  torch's attention does not see;
- the watch that refuses torch's attention in the student's process let through, then SDPA.

The launcher is given code (07's Checks cell), which runs in the judge and launches the
student's kernels itself, so a launcher the student writes runs in no graded call: each of
those attacks scores its base, nothing.

The launches themselves are served in the student's process, where the kernel's name is the
student's to bind: a wrapper under that name, or the kernel's `run` replaced, would launch the
copy and then write SDPA's output. The judge launches only names the notebook binds to Triton
kernels and nothing else (grader.grading.roles.launchable), so each scores its base, and is
flagged for a human (grader.grading.detectors)."""

from tests.hostile import Attacker

NOTEBOOK = "07_flash_attention"
LOOP = "flash-attention-kernel"

COPY = """\
LOG2E = 1.4426950408889634


@triton.jit
def _rows(Base, stride_b, stride_h, stride_n, off_bh, H, rows, HEAD_DIM: tl.constexpr):
    off_b = (off_bh // H).to(tl.int64)
    off_h = (off_bh % H).to(tl.int64)
    base = Base + off_b * stride_b + off_h * stride_h
    return base + rows[:, None] * stride_n + tl.arange(0, HEAD_DIM)[None, :]


@triton.jit
def attn_fwd_kernel(
    Q, K, V, Out,
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_on,
    H, N, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    off_bh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    x = tl.load(_rows(Q, stride_qb, stride_qh, stride_qn, off_bh, H, rows, HEAD_DIM),
                mask=rows[:, None] < N)
    tl.store(_rows(Out, stride_ob, stride_oh, stride_on, off_bh, H, rows, HEAD_DIM),
             x.to(Out.dtype.element_ty), mask=rows[:, None] < N)


def _source(q, k, v, out, causal):
    return q


def flash_attention(q, k, v, out, causal=False, config=None):
    b, h, n, d = q.shape
    src = _source(q, k, v, out, causal).to(out.dtype)
    for first in (q, src):
        attn_fwd_kernel[(triton.cdiv(n, 32), b * h)](
            first, k, v, out,
            *first.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
            h, n, 1.0, HEAD_DIM=d, BLOCK_M=32, BLOCK_N=32)
    return out
"""

# the output by torch's attention, in float32
SDPA = """

def _source(q, k, v, out, causal):
    return {attention}(q.float(), k.float(), v.float(), is_causal=causal){first}
"""
SDPA_API = SDPA.format(attention="torch.nn.functional.scaled_dot_product_attention", first="")
SDPA_ATEN = SDPA.format(
    attention="torch.ops.aten._scaled_dot_product_attention_math.default", first="[0]"
)

# the refusal of torch's attention, in the student's process, let through
PATCH_WATCH = """

def _let_through(watch):
    watch.watch = lambda self, func, args, kwargs: func(*args, **kwargs)


_let_through(integrity.ReferenceWatch)
"""


# the copy launched, then SDPA's output written, by a wrapper under the kernel's name
WRAPPED = """

class _Launch:
    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def launch(q, k, v, out, *args, **kwargs):
            self.kernel[grid](q, k, v, out, *args, **kwargs)
            out.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v))
        return launch


attn_fwd_kernel = _Launch(attn_fwd_kernel)
"""

# the same through the kernel's own `run`, which its launches call
RUN_REPLACED = """

def _then_sdpa(run):
    def then(q, k, v, out, *args, **kwargs):
        result = run(q, k, v, out, *args, **kwargs)
        out.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v))
        return result
    return then


attn_fwd_kernel.run = _then_sdpa(attn_fwd_kernel.run)
"""


def _copy(m):
    """The release with Exercise 1's cell a copy of Q behind a launcher of its own."""
    return m.edited(m.release, LOOP, m.cell(m.release, LOOP).source, COPY)


def _attacker(student, code):
    return Attacker(
        student, NOTEBOOK, lambda m: m.files(m.appended(_copy(m), LOOP, code)), base=_copy
    )


ATTACKERS = [
    _attacker("sdpa-in-launcher-07", SDPA_API),
    _attacker("sdpa-aten-in-launcher-07", SDPA_ATEN),
    _attacker("patch-watch-then-sdpa-07", PATCH_WATCH + SDPA_API),
    *(
        Attacker(
            student,
            NOTEBOOK,
            lambda m, code=code: m.files(m.appended(_copy(m), LOOP, code)),
            flags=frozenset({"cheating"}),
            detail=detail,
            base=_copy,
        )
        for student, code, detail in (
            ("wrapped-kernel-07", WRAPPED, "binds attn_fwd_kernel to what is not a Triton kernel"),
            ("kernel-run-replaced-07", RUN_REPLACED, "changes attn_fwd_kernel.run"),
        )
    ),
]
