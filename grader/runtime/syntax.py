"""`parse`: ast.parse, one thread at a time, the only way the course's code parses Python.

CPython 3.11 and 3.12 keep the depth of their AST conversion in state that threads share
(python/cpython#106905). Two threads parsing at once can fail with "SystemError: AST constructor
recursion depth mismatch": a batch graded on several threads lost a student to it, under load.
`LOCK` is reentrant, so code that holds it around a library that parses inside (kernelguard's
analysis) may parse too. tests/test_syntax.py checks that no other module calls ast.parse."""

from __future__ import annotations

import ast
import threading

LOCK = threading.RLock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """ast.parse(source, filename), holding LOCK."""
    with LOCK:
        return ast.parse(source, filename)
