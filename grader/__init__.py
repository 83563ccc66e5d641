"""The course's grader, in three layers, each a sub-package named for who uses it:

- `grader.runtime`: what a released notebook imports (device, checks, timing, speed grading, the
  roofline, widgets). It is the only part students receive (`make student-kit`) and it imports
  nothing from the other two.
- `grader.authoring`: the course build and the notebook runner, for authors and CI.
- `grader.grading`: batch grading with nbgrader, for instructors (sandbox, gradebook, findings,
  the class report, nbgrader's configuration).

`python -m grader ...` is the command line over all three. Importing this package is light."""

__version__ = "0.1.0"
