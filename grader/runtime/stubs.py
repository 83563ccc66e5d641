"""Recognise nbgrader's unfinished-exercise stub wherever it fails, and say so in one sentence.

nbgrader replaces each solution region with `raise NotImplementedError()`. What the student then
sees depends on where the region was:
- plain Python: `NotImplementedError`;
- inside `@triton.jit`, interpreter mode: `triton.runtime.errors.InterpreterError:
  NotImplementedError()`, raised from the kernel's own line (wrapped once more for each
  `@triton.jit` function between the launch and the stub);
- inside `@triton.jit`, on a GPU: the compiler refuses the `raise` statement with
  `CompilationError ... unsupported AST node type: Raise`, pointing at the stub's line.
"""

from __future__ import annotations

import re
import traceback

STUB_LINE = "raise NotImplementedError()"


class StubNotFilled(AssertionError):
    """The graded code still holds the exercise stub."""


def explain(exc: BaseException, what: str = "your code") -> str | None:
    """A one-sentence explanation when `exc` comes from an unfilled stub, else None."""
    # Compiler path (GPU): the `raise` statement itself is rejected.
    if type(exc).__name__ in {"CompilationError", "UnsupportedLanguageConstruct"}:
        message = str(exc)
        if "Raise" in message and "NotImplementedError" in message:
            named = re.search(r"^\s*def\s+(\w+)\s*\(", message, re.MULTILINE)
            kernel = named.group(1) if named else "your kernel"
            return (
                f"`{kernel}` still holds the exercise stub (`{STUB_LINE}`): replace the "
                "`# YOUR CODE HERE` lines inside the kernel with your solution, "
                "then re-run its cell."
            )
        return None
    # Interpreter path: Triton wraps the Python exception raised inside the kernel, once more
    # for each @triton.jit function it went through (a stub in a helper the kernel calls).
    cause = exc
    while type(cause).__name__ == "InterpreterError" and cause.__cause__ is not None:
        cause = cause.__cause__
    if isinstance(cause, NotImplementedError) and not cause.args:  # not Triton's, which says why
        frames = traceback.extract_tb(cause.__traceback__)
        name = frames[-1].name if frames and frames[-1].name != "<module>" else None
        # `what` where it names the function that holds the stub ("Exercise 1's `fits`")
        where = what if name is None or f"`{name}`" in what else f"`{name}`"
        return (
            f"{where} still holds the exercise stub (`{STUB_LINE}`): replace the "
            "`# YOUR CODE HERE` lines with your solution, then re-run its cell."
        )
    return None


def untouched_output(name: str) -> str:
    """The sentence for an output that no element of which was written."""
    return (
        f"output untouched: your kernel never stored to `{name}` (every element still holds the "
        "NaN poison the grader filled it with). Add a `tl.store` to the output pointer."
    )
