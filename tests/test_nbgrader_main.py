"""nbgrader started through grader.authoring.nbgrader_main: without the RFC 3987 grammar that
jsonschema would build at import, and with notebook validation unchanged."""

import subprocess
import sys

from grader.authoring import nbgrader_main

PROBE = """
import sys
from grader.authoring import nbgrader_main
nbgrader_main.lean()
import nbformat
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
nbformat.validate(nb)  # a valid notebook passes
nb.cells[0]["execution_count"] = "one"
try:
    nbformat.validate(nb)
except nbformat.ValidationError:
    print("rejected")
print(sorted(m for m in ("rfc3987_syntax", "lark") if sys.modules.get(m) is not None))
"""


def test_lean_start_keeps_the_grammar_out_and_validation_working():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split("\n")[:2] == ["rejected", "[]"], done.stdout + done.stderr


def test_the_command_is_nbgrader():
    done = subprocess.run(
        nbgrader_main.command("--version"), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    from importlib.metadata import version

    assert version("nbgrader") in done.stdout + done.stderr
