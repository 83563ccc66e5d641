"""The kernel `grader.runtime.profile.each` launches, in its child process, just before each call
it profiles, so that in Nsight Compute's list of launches each call's own begin after one of
these. Imported in that child only, on a GPU."""

import torch
import triton
import triton.language as tl


@triton.jit
def course_profile_marker(flag_ptr):
    # one load and one store of a float32: a launch with traffic, as every profiled one needs
    tl.store(flag_ptr, tl.load(flag_ptr) + 1.0)


class Marker:
    """Launches the marker on a flag made (and the kernel compiled) when it is created, so that
    a launch inside a profiled range makes no other launch there."""

    def __init__(self):
        self.flag = torch.zeros(1, device="cuda")
        self()
        torch.cuda.synchronize()

    def __call__(self) -> None:
        course_profile_marker[(1,)](self.flag)
