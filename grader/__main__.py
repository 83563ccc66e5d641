import sys

from grader.authoring import nbgrader_main

nbgrader_main.lean()  # before the command imports nbformat

from grader.cli import main  # noqa: E402

sys.exit(main())
