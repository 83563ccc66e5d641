"""Wrong (and slow) solutions for 09 · Hopper: the persistent tile loop, the descriptor blocks'
shared memory, the warp-specialization options and the float8 scales. Most follow the reference
as it changes (`swapped`); the stubs are the released cells' (`course/09_hopper`). Among them,
the answers a given cell makes at hand: `tile_coords` as the one `tl.swizzle2d` call that version
2's kernel makes, and the float8 kernel as version 2's plus a transpose and one scalar scale."""

import functools
import json
import re

from grader.authoring import build
from tests.known_wrong import Partial, _reference_cells, swapped

NOTEBOOK = "09_hopper"


@functools.cache
def _released() -> dict[str, str]:
    path = build.COURSE / NOTEBOOK / "hopper.ipynb"
    return {c["id"]: "".join(c["source"]) for c in json.loads(path.read_text())["cells"]}


def stub(grade_id: str) -> str:
    """The exercise cell as students receive it."""
    return _released()[grade_id]


def persistent(*pairs):
    return swapped(NOTEBOOK, "persistent-kernel", *pairs)


def smem(*pairs):
    return swapped(NOTEBOOK, "tma-smem", *pairs)


def fp8(*pairs):
    return swapped(NOTEBOOK, "fp8-kernel", *pairs)


def ws(options: str) -> str:
    return f"\ndef ws_options():\n    return {options}\n"


LOOP = "for tile in tl.range(start, num_tiles, NUM_SMS, flatten=True):"
RETURN = "return first_m + in_band % rows, pid_n"
SNAKE = "pid_n = tl.where(band % 2 == 0, col, num_pid_n - 1 - col)"
TILE_COORDS = (  # the body of the reference's tile_coords
    "    tiles_per_band = GROUP_M * num_pid_n\n"
    "    band = tile // tiles_per_band\n"
    "    first_m = band * GROUP_M\n"
    "    rows = tl.minimum(num_pid_m - first_m, GROUP_M)  # the last band may be shorter\n"
    "    in_band = tile % tiles_per_band\n"
    "    col = in_band // rows\n"
    f"    {SNAKE}  # odd bands: right to left\n"
    f"    {RETURN}\n"
)


def _given_swizzle() -> str:
    """The first tl.swizzle2d call of version 2's kernel, a given cell: the copy answer's."""
    (cell,) = [c for c in _reference_cells(NOTEBOOK).values() if "def matmul_tma_kernel(" in c]
    return " ".join(re.search(r"tl\.swizzle2d\(tile //[^)]*\)", cell).group().split())


SWIZZLE = _given_swizzle()
DOT8 = "acc = tl.dot(a, bt.T, acc)  # (BLOCK_M, BLOCK_N) float32"
EPILOGUE8 = "c = (acc * a_scale[:, None] * b_scale[None, :]).to(c_ptr.dtype.element_ty)"
ROW_SCALES = (  # the reference's loads of the tile's scales, before EPILOGUE8
    "        a_scale = tl.load(a_scale_ptr + offs_m, mask=offs_m < M, other=0.0)  # (BLOCK_M,)\n"
    "        b_scale = tl.load(b_scale_ptr + offs_n, mask=offs_n < N, other=0.0)  # (BLOCK_N,)\n"
)
AMAX = "amax = x.abs().amax(dim=1, keepdim=True)"
SCALE = "scale = amax / E4M3_MAX"

WRONG = {
    "persistent-kernel": {
        "stub left in place": stub("persistent-kernel"),
        "one call of tl.swizzle2d, as version 2's kernel makes": persistent(
            (TILE_COORDS, f"    return {SWIZZLE}\n"),
        ),
        "odd bands not reversed": persistent((SNAKE, "pid_n = col + 0 * band")),
        "even bands reversed, not odd": persistent(("band % 2 == 0", "band % 2 == 1")),
        "row-major tiles, no bands": persistent(
            (RETURN, "return tile // num_pid_n, tile % num_pid_n"),
        ),
        "last band as tall as the others": persistent(
            ("rows = tl.minimum(num_pid_m - first_m, GROUP_M)", "rows = GROUP_M + 0 * first_m"),
        ),
        "across the rows inside a band": persistent(
            (RETURN, "return first_m + in_band // num_pid_n, in_band % num_pid_n"),
        ),
        "forgets the band's first row": persistent((RETURN, "return in_band % rows, pid_n")),
        "every program starts at tile 0": persistent(
            (LOOP, "for tile in tl.range(0, num_tiles, NUM_SMS, flatten=True):"),
        ),
        "one tile per program": persistent(
            (LOOP, "for tile in tl.range(start, start + 1, NUM_SMS, flatten=True):"),
        ),
        "accumulator not reset between tiles": persistent(
            (
                "    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=True):",
                "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
                "    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=True):",
            ),
            (
                "        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"
                "  # (BLOCK_M, BLOCK_N)\n",
                "",
            ),
        ),
        "no mask along K": persistent(
            (
                "mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)",
                "mask=offs_m[:, None] < M, other=0.0)",
            ),
            (
                "mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)",
                "mask=offs_n[None, :] < N, other=0.0)",
            ),
        ),
    },
    "tma-smem": {
        "stub left in place": stub("tma-smem"),
        "forgets the C tile": smem(
            ("return pipeline + block_m * block_n * out_bytes", "return pipeline"),
        ),
        "C tile in the inputs' dtype": smem(
            (
                "return pipeline + block_m * block_n * out_bytes",
                "return pipeline + block_m * block_n * in_bytes",
            ),
        ),
        "a C tile per stage": smem(
            (
                "return pipeline + block_m * block_n * out_bytes",
                "return pipeline + num_stages * block_m * block_n * out_bytes",
            ),
        ),
        "box limit ignored": smem(
            ("if max(bm, bn, bk) > gemm.TMA_MAX_BOX:", "if False:"),
        ),
        "a box of 256 refused": smem(
            ("if max(bm, bn, bk) > gemm.TMA_MAX_BOX:", "if max(bm, bn, bk) >= gemm.TMA_MAX_BOX:"),
        ),
        "a config that needs exactly the limit does not fit": smem(
            (
                "num_stages, in_bytes, out_bytes) <= limit",
                "num_stages, in_bytes, out_bytes) < limit",
            ),
        ),
        "stages ignored in tma_fits": smem(
            (
                "config.num_stages, in_bytes, out_bytes) <= limit",
                "1, in_bytes, out_bytes) <= limit",
            ),
        ),
    },
    "ws-options": {
        "stub left in place": stub("ws-options"),
        "8 warps": ws('{"num_warps": 8, "FLATTEN": False}'),
        "the loop nest flattened": ws('{"num_warps": 4, "FLATTEN": True}'),
        "FLATTEN missing": ws('{"num_warps": 4}'),
    },
    "fp8-kernel": {
        "stub left in place": stub("fp8-kernel"),
        # version 2's kernel with Bᵀ's descriptor, a transpose and one scale pair for all
        "version 2's kernel plus a multiply by one scale pair": fp8(
            (ROW_SCALES, ""),
            (
                EPILOGUE8,
                "c = (acc * tl.load(a_scale_ptr) * tl.load(b_scale_ptr))"
                ".to(c_ptr.dtype.element_ty)",
            ),
        ),
        "B's scales only": fp8(
            (EPILOGUE8, "c = (acc * b_scale[None, :]).to(c_ptr.dtype.element_ty)"),
        ),
        "A's scales only": fp8(
            (EPILOGUE8, "c = (acc * a_scale[:, None]).to(c_ptr.dtype.element_ty)"),
        ),
        "scales applied twice": fp8(
            (
                EPILOGUE8,
                "both = a_scale[:, None] * b_scale[None, :]\n"
                "        c = (acc * both * both).to(c_ptr.dtype.element_ty)",
            ),
        ),
        "divides by the scales": fp8(
            (
                EPILOGUE8,
                "c = (acc / (a_scale[:, None] * b_scale[None, :])).to(c_ptr.dtype.element_ty)",
            ),
        ),
        "no scales in the kernel": fp8(
            (ROW_SCALES, ""),
            (EPILOGUE8, "c = acc.to(c_ptr.dtype.element_ty)"),
        ),
        "scales multiplied in at every K step": fp8(
            (
                "        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                "        rows_s = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n"
                "        cols_s = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)\n"
                "        sa = tl.load(a_scale_ptr + rows_s, mask=rows_s < M, other=0.0)\n"
                "        sb = tl.load(b_scale_ptr + cols_s, mask=cols_s < N, other=0.0)\n"
                "        both = sa[:, None] * sb[None, :]\n"
                "        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
            ),
            (DOT8, "acc = tl.dot(a, bt.T, acc) * both"),
            (ROW_SCALES, ""),
            (EPILOGUE8, "c = acc.to(c_ptr.dtype.element_ty)"),
        ),
        "B's blocks not transposed": fp8(
            (DOT8, "acc = tl.dot(a, bt, acc)"),
        ),
        "scale inverted": fp8(
            (SCALE, "scale = E4M3_MAX / amax"),
        ),
        "amax without abs": fp8(
            (AMAX, "amax = x.amax(dim=1, keepdim=True)"),
        ),
        "e4m3's range taken as 240": fp8(
            (SCALE, "scale = amax / 240.0"),
        ),
        "one scale per tensor": fp8(
            (AMAX, "amax = x.abs().max()"),
        ),
        "one scale per column": fp8(
            (AMAX, "amax = x.abs().amax(dim=0, keepdim=True)"),
        ),
        "scales returned flat": fp8(
            ("return x8, scale", "return x8, scale.flatten()"),
        ),
        "values not divided by the scale": fp8(
            ("x8 = (x.float() / scale)", "x8 = (x.float() + 0 * scale)"),
        ),
    },
}

# The hint each failure's message must carry (grader.runtime.hints), where it is one: none for
# the Python functions and options, whose checks say what is wrong in their own words.
HINTS = {
    # a read past K: the interpreter's bounds check names the mask; on a GPU the failure depends
    # on what memory the read finds, as 04's
    "persistent-kernel": {
        **dict.fromkeys(WRONG["persistent-kernel"]),
        "no mask along K": ("missing-mask", None),
        "accumulator not reset between tiles": "wrong-formula",
    },
    "tma-smem": dict.fromkeys(WRONG["tma-smem"]),
    "ws-options": dict.fromkeys(WRONG["ws-options"]),
    "fp8-kernel": {
        **dict.fromkeys(WRONG["fp8-kernel"]),
        **dict.fromkeys(
            [
                "version 2's kernel plus a multiply by one scale pair",
                "B's scales only",
                "A's scales only",
                "scales applied twice",
                "divides by the scales",
                "no scales in the kernel",
            ],
            "wrong-formula",
        ),
    },
}

# Correct but slow.
SLOW = {
    "persistent-kernel": {
        # every program walks from its own first tile to the last, one tile at a time: program 0
        # does every tile, and the others repeat most of its work
        "a step of one tile": persistent(
            (LOOP, "for tile in tl.range(start, num_tiles, 1, flatten=True):"),
            ("tile_c = start - NUM_SMS", "tile_c = start - 1"),
            ("tile_c += NUM_SMS", "tile_c += 1"),
        ),
    },
    "fp8-kernel": {
        # the tensor cores' sum promoted to float32 after every K step: 0.67x to 0.71x
        # torch._scaled_mm(use_fast_accum=False) on an H200 (the course's probe of 2026-11-27),
        # and use_fast_accum=True, which the speed cell grades against, ran faster still there
        "float32 promotion every K step": fp8(
            (DOT8, "acc = tl.dot(a, bt.T, acc, max_num_imprecise_acc=BLOCK_K)"),
        ),
    },
}

# Exercise 1 left blank, the others right: versions 2 and 3 take their tiles from tl.swizzle2d,
# so Exercises 2 and 3 keep their points; the float8 kernel, which calls tile_coords as the
# reference does, fails with a message that names the stub.
PARTIAL = {
    "Exercise 1 left blank, the rest right": Partial(
        {"persistent-kernel": stub("persistent-kernel")},
        earns=("tma-smem", "ws-options"),
        fails=("persistent-kernel", "fp8-kernel"),
        says={"fp8-kernel": "`tile_coords` still holds the exercise stub"},
    ),
}

# Right answers written otherwise: tl.swizzle2d may well give 04's order, as long as the answer
# turns the odd bands around itself.
OTHER_WAYS = {
    "persistent-kernel": {
        "tl.swizzle2d, then the odd bands turned around": persistent(
            (
                TILE_COORDS,
                f"    pid_m, pid_n = {SWIZZLE}\n"
                "    odd = (pid_m // GROUP_M) % 2 == 1\n"
                "    return pid_m, tl.where(odd, num_pid_n - 1 - pid_n, pid_n)\n",
            ),
        ),
    },
}
