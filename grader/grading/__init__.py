"""Batch grading with nbgrader, for instructors: `autograde` (a whole batch), `notebook_guards`
(nbgrader's Execute: each cell where `roles` says it runs, the test cells in the `judge`, the
student's own process serving its calls), `activity` (the GPU activity log the judge reads
speed from), `sandbox` (one submission's limits), `jail` (its kernel in bubblewrap),
`gradebook` (nbgrader's database), `findings` (what in a submission needs a human look),
`detectors` (answer cells that reach into their own process, and kernelguard's rules),
`verdicts` (speed verdicts read back as data), `classreport` (CSV, report and plots), and
nbgrader's configuration (`nbgrader_config.py`, `nbgrader_policy`). Everything here is the
trusted side: it decides scores and writes every output."""
