"""What a speed cell publishes besides its text, named where the grading side can read it without
importing torch."""

# The display-data type of a speed verdict (`perf.Verdict`, shown by `perf.publish`): the batch
# grader's report, its checks of the scores and bench/trust.py read verdicts only from it, never
# from printed text.
SPEED_MIMETYPE = "application/vnd.gpu-kernels-course.speed+json"
