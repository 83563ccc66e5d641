"""python -m grader.authoring.diagrams: redraw every figure and list the files written."""

from grader.authoring.diagrams import write

for written in write():
    print(written)
