"""The course build and the notebook runner, for authors and CI: `build` (solutions/ ->
build/source/ -> course/, and the drift check), `diagrams` (the committed figures of
solutions/NN_topic/figures/ and the code that draws them), `execute` (run notebooks with papermill
and check their graded cells), `run_summary` (the runner's table and JSON) and `kit` (the student
kit). Imports `grader.runtime`
only for the device; students never receive this package."""
