"""Notebook 10's hostile class, graded in one batch: each kind of attack on its answer cells, on
one wrong base (`_wrong`): δ computed as a row's largest product instead of its sum, and dQ a
copy of Q written by a Triton copy kernel named as the exercise's kernel, launched by a launcher
of the student's own in the answer cell.

- an oracle: that launcher looks for the expected dQ in its callers' frames and among every live
  object, and has the copy kernel write it into `out`;
- torch changed so that the float64 reference of δ computes what the wrong kernel does (a row's
  largest term): a TorchFunctionMode left entered, or aten::sum re-registered;
- torch's SDPA and autograd computing dQ inside that launcher, the copy kernel writing it:
  through torch's Python API, or through aten's operators (`torch.ops.aten`), which the refusal
  of torch's attention does not see;
- the checker module patched through a function's parameter, and with it the watch that refuses
  torch's attention in the student's process;
- the speed verdict's publisher replaced (on the CPU, where speed is not graded; on a GPU,
  `slow-publisher-10` in tests/test_hostile_gpu.py, on a right kernel made slow).

Checks and references run in the judge, and so do the launchers, which are given code: the
judge's `attention_dq` launches the student's kernel itself, so a launcher the student writes
runs in no graded call. Each attack scores no more than its base, or is flagged."""

from tests.hostile import Attacker
from tests.hostile.fake_verdicts import PUBLISHER, _speed_not_reported
from tests.known_wrong import nb10_flash_backward as nb10

NOTEBOOK = "10_flash_backward"
DELTA, DQ = "bwd-delta", "bwd-dq"

# δ as the row's largest product: wrong on every row of more than one term
SUM = "    delta = tl.sum(o * do, axis=1)  # (BLOCK_M,)"
LARGEST = "    delta = tl.max(o * do, axis=1)  # the row's largest term, not its sum"

# Exercise 4's cell replaced: `attn_bwd_dq_kernel`, with the exercise's signature, copies its Q
# into DQ, and a launcher of the student's own hands it what `_source` gives in place of Q: Q,
# unless an attack below redefines it. Grading runs the given launcher, which passes Q itself.
COPY_DQ = """\
@triton.jit
def attn_bwd_dq_kernel(
    Q, K, V, DO, Lse, Delta, DQ,
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_don,
    stride_dqb, stride_dqh, stride_dqn,
    H, N, sm_scale, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    off_bh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    x = tl.load(_rows(Q, stride_qb, stride_qh, stride_qn, off_bh, H, rows, HEAD_DIM),
                mask=rows[:, None] < N)
    tl.store(_rows(DQ, stride_dqb, stride_dqh, stride_dqn, off_bh, H, rows, HEAD_DIM), x,
             mask=rows[:, None] < N)


def _source(q, k, v, do, out, causal):
    return q


def attention_dq(q, k, v, do, lse, delta, out, causal=False, config=None):
    b, h, n, d = q.shape
    src = _source(q, k, v, do, out, causal).to(out.dtype)
    attn_bwd_dq_kernel[(triton.cdiv(n, 32), b * h)](
        src, k, v, do, lse, delta, out,
        *src.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3], *out.stride()[:3],
        h, n, 1.0, 1.0, HEAD_DIM=d, BLOCK_M=32, BLOCK_N=32, CAUSAL=causal)
    return out
"""

ORACLE = """

import gc
import sys


def _source(q, k, v, do, out, causal):
    frame, seen = sys._getframe(1), []
    while frame is not None:
        seen += list(frame.f_locals.values())
        frame = frame.f_back
    mine = {t.data_ptr() for t in (q, k, v, do, out)}
    for value in seen + gc.get_objects():
        if (isinstance(value, torch.Tensor) and value.shape == out.shape
                and value.data_ptr() not in mine):
            return value
    return q
"""

# the reference's row sums, (o * do).sum(-1), made a row's largest term
MODE = """

from torch.overrides import TorchFunctionMode


class _Largest(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.sum, torch.Tensor.sum) and args[1:] == (-1,):
            return torch.amax(args[0], -1)
        return func(*args, **kwargs)


_Largest().__enter__()
"""

LIBRARY = """

_lib = torch.library.Library("aten", "IMPL")
_lib.impl("sum.dim_IntList",
          lambda x, dim, keepdim=False, dtype=None: torch.amax(x, dim, keepdim), "CPU")
"""

# dQ by autograd of torch's attention, in float32
SDPA = """

def _source(q, k, v, do, out, causal):
    with torch.enable_grad():
        leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
        o = {attention}(*leaves, is_causal=causal){first}
        return torch.autograd.grad(o, leaves[0], do.float())[0]
"""
SDPA_API = SDPA.format(attention="F.scaled_dot_product_attention", first="")
SDPA_ATEN = SDPA.format(
    attention="torch.ops.aten._scaled_dot_product_attention_math.default", first="[0]"
)

QUIET = "lambda *args, **kwargs: None"
PATCH_CHECKER = f"""

def _quiet(module):
    module.check = {QUIET}
    module.compare = {QUIET}


_quiet(checks)
"""

# the refusal of torch's attention, in the student's process, let through
PATCH_WATCH = """

def _let_through(watch):
    watch.watch = lambda self, func, args, kwargs: func(*args, **kwargs)


_let_through(integrity.ReferenceWatch)
"""


def _wrong(m):
    """The release with δ the row's largest product, dQ a copy of Q; the rest blank."""
    nb = m.edited(
        m.release, DELTA, m.cell(m.release, DELTA).source, m.cell(m.answered(), DELTA).source
    )
    nb = m.edited(nb, DELTA, SUM, LARGEST)
    return m.edited(nb, DQ, m.cell(nb, DQ).source, COPY_DQ)


def _attacker(student, cell, code, flags=frozenset(), detail=None, check=None):
    return Attacker(
        student,
        NOTEBOOK,
        lambda m: m.files(m.appended(_wrong(m), cell, code)),
        flags=frozenset(flags),
        detail=detail,
        base=_wrong,
        check=check,
    )


def _slow(m):
    """The answered notebook with dQ's product in float32, off the tensor cores: right, and slow."""
    return m.edited(m.answered(), DQ, m.cell(m.answered(), DQ).source,
                    nb10.SLOW[DQ]["dQ's product in float32"])  # fmt: skip


ATTACKERS = [
    _attacker("oracle-frames-10", DQ, ORACLE, {"dynamic-code"}, "caller's frames"),
    _attacker("torch-function-mode-10", DELTA, MODE),
    _attacker("torch-library-sum-10", DELTA, LIBRARY),
    _attacker("sdpa-in-launcher-10", DQ, SDPA_API),
    _attacker("sdpa-aten-in-launcher-10", DQ, SDPA_ATEN),
    _attacker("patch-checker-by-parameter-10", DELTA, PATCH_CHECKER),
    _attacker("patch-watch-then-sdpa-10", DQ, PATCH_WATCH + SDPA_API),
    _attacker(
        "verdict-publisher-replaced-10",
        DQ,
        PUBLISHER,
        {"cheating"},
        f"cell {DQ} replaces grader.runtime.perf.grade",
        _speed_not_reported,
    ),
    # on a GPU, where speed is graded: a right but slow backward whose verdicts would all pass
    Attacker(
        "slow-publisher-10",
        NOTEBOOK,
        lambda m: m.files(m.appended(_slow(m), DQ, PUBLISHER)),
        flags=frozenset({"cheating"}),
        detail="replaces grader.runtime.perf.grade",
        base=_slow,
        gpu_only=True,
    ),
]
