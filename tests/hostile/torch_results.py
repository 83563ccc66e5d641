"""Class 3 of the attacks on grading: a launcher whose result does not come from the kernel it
launches. From the answer cell (the only code of the student's that grading runs), the kernel's
name is bound to an object whose launch computes the output with torch, or a wrong kernel is
launched once on a placeholder tensor, so that a launch is seen, and the output computed with
torch. Each honest base is the same notebook without the attack: the blank release, or the same
wrong kernel behind the launcher as given; the attack must earn nothing more, and is flagged for
a human look. A name bound to such an object is never launched by the judge
(grader.grading.roles.launchable): the answer cell is flagged as binding it to what is not a
Triton kernel."""

from tests.hostile import Attacker

# The kernel's name bound, in its own answer cell, to an object that launches nothing.
BY_TORCH = """

class _ByTorch:
    def __init__(self, compute):
        self.compute = compute

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.compute(*args)


{kernel} = _ByTorch(lambda {args}: {compute})
"""


def _by_torch(kernel, args, compute):
    return BY_TORCH.format(kernel=kernel, args=args, compute=compute)


# A fused kernel that copies x to out: it runs, and it is wrong.
COPYING_KERNEL = """\
    offs_m = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_n[None, :], mask=mask)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], x, mask=mask)"""
FUSED_GRID = "    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))\n"
DUMMY_LAUNCH = """\
    spare = torch.zeros(1, 1, device=x.device, dtype=x.dtype)
    bias_gelu_scale_kernel[(1, 1)](spare, spare[0], torch.empty_like(spare), 1, 1, 1, 1, scale,
                                   BLOCK_M=1, BLOCK_N=16)
    return out.copy_(bias_gelu_scale_reference(x.float(), bias.float(), scale))
"""


def _copying(m):
    """The release with the fused kernel written as a copy: a wrong kernel behind the launcher."""
    return m.edited(m.release, "fused-kernel", "    raise NotImplementedError()", COPYING_KERNEL)


ATTACKERS = [
    Attacker(
        "relu-by-torch",
        "00_setup",
        lambda m: m.files(
            m.appended(
                m.release,
                "relu-kernel",
                _by_torch("relu_kernel", "x, out, n", "out.copy_(x.relu())"),
            )
        ),
        flags=frozenset({"cheating"}),
        detail="binds relu_kernel to what is not a Triton kernel",
        base=lambda m: m.release,
    ),
    Attacker(
        "add-by-torch",
        "02_first_kernels",
        lambda m: m.files(
            m.appended(
                m.release,
                "add-kernel",
                _by_torch("add_kernel", "x, y, out, n", "torch.add(x, y, out=out)"),
            )
        ),
        flags=frozenset({"cheating"}),
        detail="binds add_kernel to what is not a Triton kernel",
        base=lambda m: m.release,
    ),
    Attacker(
        "fused-dummy-launch",
        "02_first_kernels",
        lambda m: m.files(m.edited(_copying(m), "fused-kernel", FUSED_GRID, DUMMY_LAUNCH)),
        flags=frozenset({"cheating"}),
        detail="that bias_gelu_scale_kernel did not write",
        base=_copying,
    ),
]
