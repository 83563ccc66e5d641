"""The course build and the notebook runner, for authors and CI: `build` (solutions/ ->
build/source/ -> course/, and the drift check), `execute` (run notebooks with papermill and check
their graded cells) and `run_summary` (the runner's table and JSON). Imports `grader.runtime`
only for the device; students never receive this package."""
