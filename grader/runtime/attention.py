"""Attention for 08 · Trust, but verify: the float64 reference, the eager and SDPA baselines,
tolerances, work, the audit's sweep of cases, the hidden fuzz cases, and the problem its speed
cells time.

Shapes are (batch, heads, N, D): N queries and N keys per head, head dimension D. The kernels
under test are called as attention(q, k, v, causal=False, sm_scale=None) and return the output.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from grader.runtime import checks, device, verify

# Sizes at which a kernel's offsets need 64 bits: 64 * 64 * 8192 * 128 = 2^32 elements per tensor,
# 8 GiB in fp16. No laptop runs this; offset_review reasons about it instead.
LARGE_SHAPES = ((64, 64, 8192, 128),)
# Large, nearly flat values, where an fp16 accumulator loses the low digits.
FLAT = {"scales": (0.01, 1.0, 100.0), "v_offset": 1000.0}


def _scale(d: int, sm_scale: float | None) -> float:
    return 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)


def naive(q, k, v, causal=False, sm_scale=None):
    """Eager PyTorch in the inputs' dtype: the N x N scores are written to memory and read back.
    Traffic: writes and reads B*H*N*N scores several times (matmul, scale, softmax, matmul)."""
    scores = (q @ k.transpose(-2, -1)) * _scale(q.shape[-1], sm_scale)  # (B, H, N, N)
    if causal:  # query i sees keys j <= i
        n = q.shape[-2]
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def reference(q, k, v, causal=False, sm_scale=None):
    """softmax(Q Kᵀ · scale) V in float64; with `causal`, query i sees keys j <= i."""
    return naive(*(t.to(torch.float64) for t in (q, k, v)), causal, sm_scale)


def sdpa(backend: str):
    """PyTorch's scaled_dot_product_attention restricted to one backend, named as SDPBackend
    names it ("FLASH_ATTENTION", "CUDNN_ATTENTION"): a function (q, k, v, causal=False,
    sm_scale=None) returning a new output. Where the backend cannot run, calling it raises
    RuntimeError."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = getattr(SDPBackend, backend)

    def run(q, k, v, causal=False, sm_scale=None):
        with sdpa_kernel(chosen):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)

    return run


def flash(q, k, v, causal=False, sm_scale=None):
    """PyTorch's scaled_dot_product_attention, restricted to its FlashAttention backend."""
    return sdpa("FLASH_ATTENTION")(q, k, v, causal, sm_scale)


def flops(batch: int, heads: int, n: int, d: int, causal: bool = False) -> float:
    """Q Kᵀ and P V: 2 * N * N * D multiply-adds each per head, 4*B*H*N²*D FLOPs; half with a
    causal mask (the FlashAttention papers count it so)."""
    total = 4.0 * batch * heads * n * n * d
    return total / 2 if causal else total


def tolerance(dtype: torch.dtype, dev: device.Device | None = None) -> tuple[float, float]:
    """(rtol, atol) for an attention output of `dtype` against the float64 reference, for V of
    unit scale.

    A FlashAttention kernel rounds the probabilities P to the input dtype before P V (so that P V
    runs on tensor cores), and rounds the output: its error is a few units in the last place of
    that dtype (fp16: 2^-11 = 4.9e-4; bf16: 2^-8 = 3.9e-3), so the tolerance is about four of
    them. On a GPU, tl.dot rounds fp32 inputs to TF32 (10 mantissa bits, like fp16) by default.
    """
    found = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}.get(dtype)
    if dtype == torch.float32:
        found = (5e-3, 5e-3) if (dev or device.current()).is_gpu else (1e-4, 1e-4)
    return found or checks.tolerance(dtype)


def inputs(
    batch: int,
    heads: int,
    n: int,
    d: int,
    dtype: torch.dtype = torch.float32,
    *,
    layouts: Sequence[str] = ("contiguous", "contiguous", "contiguous"),
    scales: Sequence[float] = (1.0, 1.0, 1.0),
    v_offset: float = 0.0,
    key_ramp: tuple[float, float] | None = None,
    top_key: bool = False,
    equal_values: bool = False,
):
    """A make_inputs(gen) -> (q, k, v) for the audit.

    layouts: per tensor, "contiguous"; "bnhd" (stored as (B, N, H, D) and transposed, as a model's
    projections usually are); or "sliced" (the first D of 2*D columns). scales multiply q, k, v;
    v_offset is added to v; key_ramp multiplies key j by a factor rising linearly along N, so later
    key blocks hold larger scores. top_key makes q and k non-negative and key 0 the elementwise
    largest key, so key 0 holds every query's largest score and a running max over key blocks
    never rises; both are scaled by 1.2 / D^(1/4), so the scores stay within a few units and the
    other keys keep weight. equal_values gives every key the same value vector, which any weights
    average to itself.
    """

    def place(x: torch.Tensor, layout: str) -> torch.Tensor:
        if layout == "contiguous":
            return x.to(dtype)
        if layout == "bnhd":
            return x.transpose(1, 2).contiguous().to(dtype).transpose(1, 2)
        if layout == "sliced":
            wide = torch.zeros((*x.shape[:-1], 2 * d), dtype=torch.float32, device=x.device)
            wide[..., :d] = x
            return wide.to(dtype)[..., :d]
        raise ValueError(f"unknown layout {layout!r}")

    def make(gen: torch.Generator):
        out = []
        for which, (layout, scale) in enumerate(zip(layouts, scales, strict=True)):
            x = checks.randn((batch, heads, n, d), gen=gen, scale=scale)
            if which == 1 and key_ramp is not None:
                ramp = torch.linspace(key_ramp[0], key_ramp[1], n, device=x.device)
                x = x * ramp[:, None]
            if which < 2 and top_key:
                x = x.abs() * (1.2 / d**0.25)
                if which == 1:
                    x[..., 0, :] = x.amax(dim=-2)
            if which == 2:
                x = x + v_offset
                if equal_values:
                    x = x[..., :1, :].expand_as(x).clone()
            out.append(place(x, layout))
        return tuple(out)

    return make


def _case(
    name, shape, dtype, dev, catches=(), causal=False, sm_scale=None, rules_out=(), **inputs_kw
):
    rtol, atol = tolerance(dtype, dev)
    kwargs = {"causal": causal} if sm_scale is None else {"causal": causal, "sm_scale": sm_scale}
    make = inputs(*shape, dtype, **inputs_kw)
    return verify.Case(name, make, kwargs, tuple(catches), rtol, atol, rules_out=rules_out)


def ruled_out(
    n: int,
    tile: int,
    dtype: torch.dtype,
    causal: bool = False,
    layouts: Sequence[str] = ("contiguous",),
    top_key: bool = False,
    equal_values: bool = False,
) -> tuple[str, ...]:
    """The defect ids that cannot fail a case of N=`n` with these inputs, in a kernel whose key
    blocks are `tile` long: no scale changes a softmax over one key, nor an average of equal
    values; whole tiles leave no key past N to mask, and without causal nothing is filled; one
    key block, or key 0 holding every row's largest score (top_key), leaves no max to rise; fp16
    in one key block rounds the accumulator once, as the output is rounded; contiguous inputs
    have the strides a shape implies."""
    out = ["wrong-scale"] if n == 1 or equal_values else []
    if n % tile == 0:
        out += ["missing-mask"] + ([] if causal else ["zero-fill"])
    out += [] if causal else ["causal-off-by-one"]
    if n <= tile or top_key:
        out.append("no-rescale")
    if n <= tile and dtype == torch.float16:
        out.append("fp16-accum")
    if set(layouts) == {"contiguous"}:
        out.append("assumes-contiguous")
    return tuple(out)


def cases(dev: device.Device | None = None, *, tile: int | None = None) -> list[verify.Case]:
    """The audit's sweep. Sizes are set relative to `tile`, the block size of the kernels under
    test (T in the names, which are the same on every device): one tile, whole tiles, several
    key blocks, and ragged tails; with controls (top key, equal values) built to rule defects
    out, each case's `rules_out` (ruled_out). Interpreter: T 32, D 16 and 32, fp32 cases and
    fp16 ones. GPU: T 128, D 64 and 128, fp16 cases (tl.dot rounds fp32 to TF32 there, and fp32
    tiles of 128 x 128 x D need twice the shared memory), one fp32 case at D=32 and one bf16
    case."""
    dev = dev or device.current()
    t = tile or dev.pick(gpu=128, interpreter=32)
    d = dev.pick(gpu=64, interpreter=16)
    f16 = torch.float16
    base = dev.pick(gpu=f16, interpreter=torch.float32)

    def case(name, n, catches="", heads=2, dim=d, dtype=base, **kw):
        """Batch 1; `catches`: the defect ids, separated by spaces."""
        known = {k: kw[k] for k in ("causal", "layouts", "top_key", "equal_values") if k in kw}
        ruled = ruled_out(n, t, dtype, **known)
        return _case(name, (1, heads, n, dim), dtype, dev, catches.split(), rules_out=ruled, **kw)

    out = [
        case("N=1", 1, "missing-mask uninit-read torch-fallback", heads=1),
        case("whole tiles N=2T", 2 * t, "address-cache"),
        case("ragged N=T+13", t + 13, "missing-mask uninit-read torch-fallback"),
        case("causal one tile N=T", t, "causal-off-by-one zero-fill", causal=True),
        case(
            "causal ragged N=T+7",
            t + 7,
            "causal-off-by-one zero-fill uninit-read torch-fallback",
            causal=True,
        ),
        case("rising scores N=3T", 3 * t, "no-rescale", heads=1, key_ramp=(0.5, 2.5)),
        case(
            "causal top key N=2T",
            2 * t,
            "causal-off-by-one zero-fill",
            causal=True,
            top_key=True,
        ),
        case("ragged top key N=T+13", t + 13, "missing-mask", top_key=True),
        case("sm_scale=0.3 N=2T", 2 * t, "wrong-scale", heads=1, sm_scale=0.3),
        case("equal values N=2T", 2 * t, "no-rescale", heads=1, equal_values=True),
        case("strided views N=2T", 2 * t, "assumes-contiguous", layouts=("bnhd", "sliced", "bnhd")),
        case("fp16 ragged wide N=T+5", t + 5, "missing-mask", dim=2 * d, dtype=f16),
        case("fp16 |V|~1000 flat N=3T", 3 * t, "fp16-accum", heads=1, dtype=f16, **FLAT),
        case("fp16 large scores N=2T", 2 * t, heads=1, dtype=f16, scales=(4.0, 4.0, 1.0)),
        case("fp16 one tile N=T", t, heads=1, dtype=f16),
    ]
    if dev.is_gpu:
        out.append(case("fp32 N=2T D=32", 2 * t, dim=32, dtype=torch.float32))
    if dev.supports("bf16"):
        out.append(case("bf16 causal N=2T", 2 * t, dtype=torch.bfloat16, causal=True))
    return out


def fuzz_cases(
    dev: device.Device | None = None, *, count: int = 8, seed: int | None = None
) -> list[verify.Case]:
    """`count` random cases: ragged N, causal and not, head dims 16/32/64 (interpreter) or 64/128
    (GPU), batch and heads above 1, fp32 and fp16 (bf16 on a GPU), contiguous or transposed. The
    third case (count >= 3) is fp16 with large, nearly flat values (|V| ~ 1000 over several key
    blocks), as the sweep's "fp16 |V|~1000 flat" case: an fp16 accumulator loses the low digits
    there on every device, where elsewhere only the interpreter's exact fp32 would show it."""
    dev = dev or device.current()
    rng = random.Random(checks.new_seed() if seed is None else seed)
    dims = dev.pick(gpu=(64, 128), interpreter=(16, 32, 64))
    n_max = dev.pick(gpu=1100, interpreter=120)
    n_long = dev.pick(gpu=512, interpreter=96)  # several key blocks of any tile the course uses
    dtypes = [torch.float32, torch.float16] + ([torch.bfloat16] if dev.supports("bf16") else [])
    out = []
    for i in range(count):
        b, h = (2, 3) if i == 0 else (rng.choice((1, 2)), rng.choice((1, 2)))
        flat = i == 2  # the large, flat values
        n = rng.randint(n_long if flat else 1, n_max)
        d = dims[i % len(dims)]
        causal = i % 2 == 1
        dtype = torch.float16 if flat else rng.choice(dtypes)
        layout = rng.choice(("contiguous", "bnhd"))
        large = FLAT if flat else {}
        name = (
            f"fuzz B={b} H={h} N={n} D={d} {str(dtype)[6:]}{' causal' if causal else ''}"
            f"{' ' + layout if layout != 'contiguous' else ''}{' |V|~1000 flat' if large else ''}"
        )
        out.append(
            _case(name, (b, h, n, d), dtype, dev, causal=causal, layouts=(layout,) * 3, **large)
        )
    return out


@dataclass
class SpeedProblem:
    """Attention at one size, for 08's speed cells: inputs of `dtype`, and a float32 reference
    computed a few heads at a time."""

    batch: int
    heads: int
    n: int
    d: int
    dtype: torch.dtype = torch.float16

    def inputs(self, gen: torch.Generator):
        shape = (self.batch, self.heads, self.n, self.d)
        return tuple(checks.randn(shape, gen=gen, dtype=self.dtype) for _ in range(3))

    def reference(self, q, k, v, causal=False):
        out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        qf, kf, vf, of = (t.reshape(-1, self.n, self.d) for t in (q, k, v, out))
        chunk = max(1, (1 << 28) // (self.n * self.n))  # at most 1 GiB of fp32 scores at once
        for i in range(0, qf.shape[0], chunk):
            part = slice(i, i + chunk)
            of[part] = naive(qf[part].float(), kf[part].float(), vf[part].float(), causal)
        return out

    def compare(self, actual, expected):
        rtol, atol = tolerance(self.dtype)
        checks.compare(actual, expected, rtol=rtol, atol=atol)

    def flops(self, variant: str) -> float:
        return flops(self.batch, self.heads, self.n, self.d, causal=variant == "causal")
