"""Wrong (and slow) solutions for 05 · Autotuning: the shared-memory pruning functions and the
config space."""

from tests.known_wrong import Partial

NOTEBOOK = "05_autotuning"


def smem_cell(smem_body, fits_body=None, prune_body=None):
    """The exercise cell with one or more of its three functions replaced."""
    fits_body = (
        fits_body
        or """
    kw = config.kwargs
    need = smem_bytes(kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], config.num_stages, itemsize)
    return need <= limit
"""
    )
    prune_body = (
        prune_body
        or """
    itemsize = named_args["a_ptr"].element_size()
    kept = [c for c in configs if fits(c, itemsize, SMEM_LIMIT)]
    if kept:
        return kept

    def need(c):
        kw = c.kwargs
        return smem_bytes(kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], c.num_stages, itemsize)

    return [min(configs, key=need)]
"""
    )
    return f"""
def smem_bytes(block_m, block_n, block_k, num_stages, itemsize):
{smem_body}

def fits(config, itemsize, limit):
{fits_body}

def prune_configs(configs, named_args, **kwargs):
{prune_body}
"""


RIGHT = "    return num_stages * (block_m * block_k + block_k * block_n) * itemsize\n"
STUB = "    raise NotImplementedError()\n"


def space(configs, full=None):
    """A config_space returning `configs` (Python source of a list) by default, `full` if full."""
    full = (
        full
        or "[triton.Config({'BLOCK_M': bm, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8}, "
        "num_warps=4, num_stages=s) for bm in (64, 128) for s in (2, 3, 4, 5)]"
    )
    return f"""
def config_space(full=False):
    if full:
        return {full}
    return {configs}
"""


def config(bm, bn, bk, w, s, group="'GROUP_M': 8, "):
    return (
        f"triton.Config({{'BLOCK_M': {bm}, 'BLOCK_N': {bn}, 'BLOCK_K': {bk}, {group}}}, "
        f"num_warps={w}, num_stages={s})"
    )


GOOD = config(128, 128, 64, 4, 3)

WRONG = {
    "smem-prune": {
        "stub left in place": smem_cell(STUB, STUB, STUB),
        "forgets num_stages": smem_cell(
            "    return (block_m * block_k + block_k * block_n) * itemsize\n"
        ),
        "counts only A": smem_cell("    return num_stages * block_m * block_k * itemsize\n"),
        "assumes two bytes per element": smem_cell(
            "    return num_stages * (block_m * block_k + block_k * block_n) * 2\n"
        ),
        "bits instead of bytes": smem_cell(
            "    return num_stages * (block_m * block_k + block_k * block_n) * itemsize * 8\n"
        ),
        "a config that needs exactly the limit does not fit": smem_cell(
            RIGHT,
            fits_body="""
    kw = config.kwargs
    need = smem_bytes(kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], config.num_stages, itemsize)
    return need < limit
""",
        ),
        "prune assumes float16": smem_cell(
            RIGHT,
            prune_body="""
    kept = [c for c in configs if fits(c, 2, SMEM_LIMIT)]
    return kept or [configs[0]]
""",
        ),
        "prune returns nothing when nothing fits": smem_cell(
            RIGHT,
            prune_body="""
    itemsize = named_args["a_ptr"].element_size()
    return [c for c in configs if fits(c, itemsize, SMEM_LIMIT)]
""",
        ),
        "prune sorts the configs": smem_cell(
            RIGHT,
            prune_body="""
    itemsize = named_args["a_ptr"].element_size()

    def need(c):
        kw = c.kwargs
        return smem_bytes(kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], c.num_stages, itemsize)

    ranked = sorted(configs, key=need)
    return [c for c in ranked if fits(c, itemsize, SMEM_LIMIT)] or ranked[:1]
""",
        ),
        "prune ignores the limit": smem_cell(RIGHT, prune_body="    return list(configs)\n"),
    },
    "config-space": {
        "stub left in place": "\ndef config_space(full=False):\n    raise NotImplementedError()\n",
        "empty": space("[]"),
        "BLOCK_K of 8": space(f"[{config(128, 128, 8, 4, 3)}]"),
        "a block of 96": space(f"[{config(96, 128, 64, 4, 3)}]"),
        "GROUP_M missing": space(f"[{config(128, 128, 64, 4, 3, group='')}]"),
        "num_warps of 3": space(f"[{config(128, 128, 64, 3, 3)}]"),
        "dicts instead of triton.Config": space(
            "[{'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8}]"
        ),
        "too many configs by default": space(
            "[triton.Config({'BLOCK_M': bm, 'BLOCK_N': bn, 'BLOCK_K': 64, 'GROUP_M': 8}, "
            "num_warps=w, num_stages=3) for bm in (64, 128, 256) for bn in (64, 128) "
            "for w in (4, 8)]"
        ),
        "the full space is the default one": space(f"[{GOOD}]", full=f"[{GOOD}]"),
        "nothing fits an H100": space(f"[{config(256, 256, 128, 8, 4)}]"),
        "the same config twice": space(f"[{GOOD}, {GOOD}]"),
        # the reference answer when gemm.py shipped the course's config lists: it ships none now
        "the course's lists, from gemm.py": (
            "\ndef config_space(full=False):\n    return gemm.configs(full)\n"
        ),
        "an extra meta-parameter": space(
            "[triton.Config({'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64, 'GROUP_M': 8, "
            "'SPLIT_K': 2}, num_warps=4, num_stages=3)]"
        ),
    },
}

# The hint each failure's message must carry (grader.runtime.hints): none, since these are
# plain Python functions and config lists whose checks have messages of their own.
HINTS = {grade_id: dict.fromkeys(variants) for grade_id, variants in WRONG.items()}

# Correct but slow on the three graded float16 problems.
SLOW = {
    "config-space": {
        # tiny tiles: every element of A and B is requested many times over, one warp, no pipeline
        "16x16x16 tiles, one warp, one stage": space(f"[{config(16, 16, 16, 1, 1)}]"),
        # 64x64 tiles request 32 FLOP per byte, and a single stage leaves loads exposed
        "64x64x32 tiles, one stage": space(f"[{config(64, 64, 32, 4, 1)}]"),
    },
}

# Exercise 1 left blank, Exercise 2 right: the config space's visible test calls `fits`, and its
# message must say that Exercise 1's `fits` is still the stub.
PARTIAL = {
    "Exercise 1 left blank, the config space right": Partial(
        {"smem-prune": smem_cell(STUB, STUB, STUB)},
        earns=(),
        fails=("smem-prune", "config-space"),
        says={"config-space": "Exercise 1's `fits` still holds the exercise stub"},
    ),
}
