"""`python -m grader.authoring.nbgrader_main ARGS` is `nbgrader ARGS`, started about a second
sooner: the course's builds and every grading step run nbgrader this way.

jsonschema, which nbformat validates notebooks with, imports `rfc3987_syntax` wherever it is
installed (jupyter-events asks for it, so every Jupyter installation has it), and that module
builds an Earley parser of RFC 3987 when it is imported: about 0.9 s of CPU in each process that
reads a notebook, more than the rest of nbgrader's start. It serves only the "iri" and
"iri-reference" string formats, which neither the notebook format's schema nor nbgrader's use;
`lean` keeps it out of the process, and jsonschema then goes without those two formats.

The kernels it starts listen on Unix sockets of a private folder
(grader.authoring.kernel_connection) unless the command line says otherwise, as the sandbox's
options do."""

from __future__ import annotations

import sys

from grader.authoring import kernel_connection

UNUSED = ("rfc3987_syntax",)  # imported by jsonschema if present, never needed here


def lean() -> None:
    """Keep UNUSED out of this process (its import then fails, which jsonschema allows for).
    Call it before anything imports jsonschema."""
    for name in UNUSED:
        sys.modules.setdefault(name, None)


def command(*args: str) -> list[str]:
    """The command line of `nbgrader ARGS` with this Python, started leanly."""
    return [sys.executable, "-m", __name__, *args]


if __name__ == "__main__":
    lean()
    sys.argv = kernel_connection.command_line(sys.argv)
    from nbgrader.apps.nbgraderapp import main

    main()
