"""Every parse of Python in the course's code goes through grader.runtime.syntax.parse, which
holds one lock: CPython's AST conversion keeps state that threads share, and grading runs
students on several threads."""

import re
from pathlib import Path

import grader
from grader.runtime import syntax

ROOT = Path(grader.__file__).parent
CALL = re.compile(r"\bast\.parse\(")


def test_no_module_but_syntax_calls_ast_parse():
    calls = [
        f"{path.relative_to(ROOT.parent)}:{number}"
        for path in sorted(ROOT.rglob("*.py"))
        if path != Path(syntax.__file__)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if CALL.search(line.split("#")[0])
    ]
    assert not calls, "parse through grader.runtime.syntax.parse: " + ", ".join(calls)


def test_parse_holds_the_lock_another_thread_waits_on():
    """While one thread holds the lock, another's parse waits for it."""
    import threading

    done = threading.Event()
    with syntax.LOCK:
        worker = threading.Thread(target=lambda: (syntax.parse("x = 1"), done.set()))
        worker.start()
        assert not done.wait(0.2), "a parse ran while another thread held the lock"
    assert done.wait(5), "the parse never ran once the lock was free"
    worker.join()
