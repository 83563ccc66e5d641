"""Known-wrong solutions, one module per notebook: WRONG maps an exercise's grade_id to named
replacement sources for that exercise cell. tests/test_known_wrong.py swaps each one in and
requires the notebook's own graded tests to reject it."""
