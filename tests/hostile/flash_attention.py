"""Notebook 07's hostile class on its correctness tests, graded in one batch on one wrong base
(`copy_of_q`): Exercise 1's reference kernels, `attn_fwd_kernel` storing its Q where it stores
the output (the attention it computes is dropped), and a launcher of the student's own,
`flash_attention`, in that answer cell. The launcher launches the kernel on q, k and v, as the
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
student's to bind: a wrapper under that name, the kernel's `run` replaced, or a kernel class of
the student's own made by a `jit` of theirs, would launch the copy and then write SDPA's output.
The judge launches only names the notebook binds to Triton kernels, through Triton's own
decorators, and nothing else (grader.grading.roles.kernels), so each scores its base, and is
flagged for a human (grader.grading.detectors)."""

from tests.hostile import Attacker

NOTEBOOK = "07_flash_attention"
LOOP = "flash-attention-kernel"

# The reference kernel storing Q where it stores the output (attention computed, then dropped),
# behind a launcher of the student's own that launches it on q, k, v, then on what `_source` gives
STORE = "(acc / l_i[:, None]).to(Out.dtype.element_ty)"
LAUNCHER = """


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

# the same through a Triton kernel class of the student's own, whose `run` the launches call,
# made by a `jit` of the student's own: a kernel by its decorator's last name alone
OWN_JIT = """

class _ThenSdpa(type(attn_fwd_kernel)):
    def run(self, *args, **kwargs):
        result = super().run(*args, **kwargs)
        q, k, v, out = args[:4]
        out.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v))
        return result


def jit(fn):
    return _ThenSdpa(fn)


attn_fwd_kernel = jit(attn_fwd_kernel.fn)
"""


def copy_of_q(m):
    """The release with Exercise 1's cell the reference kernel storing Q as it is, behind a
    launcher of its own."""
    answer = m.cell(m.answered(), LOOP).source
    assert answer.count(STORE) == 1, "07's kernel stores its output once"
    copy = answer.replace(STORE, "q.to(Out.dtype.element_ty)") + LAUNCHER
    return m.edited(m.release, LOOP, m.cell(m.release, LOOP).source, copy)


def _attacker(student, code):
    return Attacker(
        student, NOTEBOOK, lambda m: m.files(m.appended(copy_of_q(m), LOOP, code)), base=copy_of_q
    )


ATTACKERS = [
    _attacker("sdpa-in-launcher-07", SDPA_API),
    _attacker("sdpa-aten-in-launcher-07", SDPA_ATEN),
    _attacker("patch-watch-then-sdpa-07", PATCH_WATCH + SDPA_API),
    *(
        Attacker(
            student,
            NOTEBOOK,
            lambda m, code=code: m.files(m.appended(copy_of_q(m), LOOP, code)),
            flags=frozenset({"cheating"}),
            detail=detail,
            base=copy_of_q,
        )
        for student, code, detail in (
            ("wrapped-kernel-07", WRAPPED, "binds attn_fwd_kernel to what is not a Triton kernel"),
            ("kernel-run-replaced-07", RUN_REPLACED, "changes attn_fwd_kernel.run"),
            ("own-jit-07", OWN_JIT, "binds jit, through which a kernel the grader launches"),
        )
    ),
]
