"""Batch grading with nbgrader, for instructors: `autograde` (a whole batch), `sandbox` (one
submission's limits), `jail` (its kernel in bubblewrap), `gradebook` (nbgrader's database),
`findings` (what in a submission needs a human look), `scan` (what a student's code can do to
the cells after it, read from its source), `tells` (outputs a test cell cannot have produced),
`verdicts` (speed verdicts read back as data), `feedback` (feedback pages that carry no hidden
test), `hidden_tests` (hidden tests shown plainly, for a human look), `notebook_guards`
(malformed notebooks and floods of output), `classreport` (CSV, report and plots), and
nbgrader's configuration (`nbgrader_config.py`, `nbgrader_policy`). Everything here is the
trusted side: it decides scores and writes every output."""
