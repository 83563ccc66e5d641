"""A submission's record (grader.grading.autograde.Record): what its grading found, saved as JSON
once it ran, read back by the class report and by the next batch; a record saved while the
student is graded (or after Ctrl-C) holds nothing a later step could take for a grading."""

import json

import pytest

from grader.grading import assemble, autograde, detectors, findings


def test_a_record_reads_back_as_it_was_saved_and_an_interrupted_one_does_not(tmp_path):
    batch = autograde.Batch("00_setup", "interpreter", root=tmp_path)
    dropped = assemble.Dropped(["setup-launcher"], 1, files=["notes.txt"])
    route = detectors.Route("cheating", "relu-kernel", "replaces grader.runtime.checks.check")
    seen = findings.Submitted({"extra": "a PDF file with an .ipynb name"}, ["other"], dropped)
    seen.patches.append(route)
    record = autograde.Record(findings.Run("timeout", 3.5, "", "300 s"), "interpreter 0a1b", seen)
    assert record.save(batch, "ann") == record.run
    saved = json.loads((batch.out / "runs" / "ann.json").read_text())
    assert saved["status"] == "timeout" and saved["fingerprint"] == "interpreter 0a1b"
    assert autograde.Record.load(batch, "ann") == record
    autograde._interrupted(batch, "ann")
    assert json.loads((batch.out / "runs" / "ann.json").read_text())["status"] == "interrupted"
    with pytest.raises(TypeError):
        autograde.Record.load(batch, "ann")
