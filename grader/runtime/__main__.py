"""`python -m grader.runtime [--mode auto|gpu|interpreter] [--strict]`: the device and version
report, the one command a student without the course's repository has (`python -m grader doctor`
runs the same)."""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.runtime", description=__doc__)
    p.add_argument("--mode", choices=("auto", "gpu", "interpreter"), default=None)
    p.add_argument("--strict", action="store_true", help="exit 1 when a problem is found")
    args = p.parse_args(argv)
    from grader.runtime import device, doctor

    env = dict(os.environ)  # as the user set it, before setup() adjusts Triton's variables
    device.setup(args.mode)
    text, found = doctor.report(env)
    print(text)
    return 1 if (args.strict and any(f.level == "problem" for f in found)) else 0


if __name__ == "__main__":
    sys.exit(main())
