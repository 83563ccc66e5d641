"""The course's grader: device selection, correctness checks, timing, speed grading, the roofline,
the notebook build and the command line (`python -m grader doctor`). Importing it is light: torch
and triton are imported by the modules that need them, and triton only after device.setup()."""

__version__ = "0.1.0"
