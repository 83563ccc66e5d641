"""Class 9 of the attacks on grading: what a submission holds outside its answer cells. A given
cell edited in place (a reference function, a tolerance, a helper the tests call), a cell added
after the helpers that changes what they read (a tolerance, the speed cells' thresholds), files
beside the notebook named like a module it imports. Grading runs the release with the answer
cells alone (grader.grading.assemble), so each runs as its base, byte for byte: the same answers
without the rest. The wrong answers under the attacks would pass if the attacks ran."""

from tests.hostile import Attacker

# Wrong answers, each a one-line change of the authors' answer.
WRONG = {
    "00_setup": ("relu-kernel", "tl.where(x > 0, x, 0.0)", "x"),  # no ReLU at all
    "05_autotuning": ("config-space", "if full:", "if False:"),  # the full space is the default
    "07_flash_attention": ("flash-attention-kernel", "(acc / l_i[:, None])", "acc"),  # unscaled
    # float8's scales never applied
    "09_hopper": ("fp8-kernel", "(acc * a_scale[:, None] * b_scale[None, :])", "acc"),
}
SHADOW = b"raise SystemExit('a module beside the notebook ran')\n"


def _wrong(assignment):
    grade_id, old, new = WRONG[assignment]

    def make(m):
        nb = m.answered()
        cell = m.cell(nb, grade_id)
        assert cell.source.count(old) >= 1, f"{assignment}: {old!r} is gone from {grade_id}"
        cell.source = cell.source.replace(old, new, 1)
        return nb

    return make


def _answered(m):
    return m.answered()


def _outside(student, assignment, files, base, dropped):
    """An attacker that runs as its base; one with files beside its notebook is checked for
    what reached its sandbox, where its batch is graded."""
    return Attacker(
        student,
        assignment,
        files,
        base=base,
        dropped=dropped,
        runs_as_base=True,
        check=(lambda result: _nothing_beside(result, student)) if "shadows" in student else None,
    )


def _nothing_beside(result, student):
    """Only the release's files were beside the notebook when it ran."""
    (folder,) = (result.root / "autograded" / student).iterdir()
    ran = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    given = {
        p.relative_to(result.root / "source" / folder.name).as_posix()
        for p in (result.root / "source" / folder.name).rglob("*")
        if p.is_file() and p.suffix != ".ipynb"
    }
    assert ran - given <= {f"{result.materials.notebook}.ipynb", "timestamp.txt"}, ran - given


ATTACKERS = [
    # -- a given cell edited in place
    _outside(
        "edits-reference-00",
        "00_setup",
        lambda m: m.files(m.rewritten(_wrong("00_setup")(m), "return torch.relu(x)", "return x")),
        _wrong("00_setup"),
        "given cells edited: setup-",
    ),
    _outside(
        "edits-check-05",
        "05_autotuning",
        lambda m: m.files(
            m.rewritten(
                _wrong("05_autotuning")(m),
                "    assert isinstance(space, list) and 1 <= len(space) <= 8, (",
                "    return\n    assert isinstance(space, list) and 1 <= len(space) <= 8, (",
            )
        ),
        _wrong("05_autotuning"),
        "given cells edited: autotuning-",
    ),
    _outside(
        "edits-tolerance-07",
        "07_flash_attention",
        lambda m: m.files(
            m.rewritten(
                _wrong("07_flash_attention")(m),
                "ATTENTION_TOLERANCE = dict(rtol=1e-3, atol=1e-3)",
                "ATTENTION_TOLERANCE = dict(rtol=1e9, atol=1e9)",
            )
        ),
        _wrong("07_flash_attention"),
        "given cells edited: flash_attention-",
    ),
    _outside(
        "edits-check-09",
        "09_hopper",
        lambda m: m.files(
            m.rewritten(
                _wrong("09_hopper")(m),
                "    require_fp8()\n    seed = checks.new_seed()\n",
                "    return\n    require_fp8()\n    seed = checks.new_seed()\n",
            )
        ),
        _wrong("09_hopper"),
        "given cells edited: hopper-",
    ),
    # -- a cell added after the helpers, changing what they read
    _outside(
        "adds-reference-00",
        "00_setup",
        lambda m: m.files(
            m.added(_wrong("00_setup")(m), "def relu_reference(x)", "relu_reference = abs")
        ),
        _wrong("00_setup"),
        "1 code cell added",
    ),
    _outside(
        "adds-check-05",
        "05_autotuning",
        lambda m: m.files(
            m.added(
                _wrong("05_autotuning")(m),
                "def check_space(space, full_space):",
                "def check_space(space, full_space):\n    return None",
            )
        ),
        _wrong("05_autotuning"),
        "1 code cell added",
    ),
    _outside(
        "adds-thresholds-07",
        "07_flash_attention",
        lambda m: m.files(
            m.added(
                _wrong("07_flash_attention")(m),
                "SPEED_NEEDS = {",
                "ATTENTION_TOLERANCE.update(rtol=1e9, atol=1e9)\n"
                "SPEED_NEEDS.update({'SDPA flash': 0.01, 'naive eager': 0.01})",
            )
        ),
        _wrong("07_flash_attention"),
        "1 code cell added",
    ),
    _outside(
        "adds-tolerance-09",
        "09_hopper",
        lambda m: m.files(
            m.added(
                _wrong("09_hopper")(m),
                "def fp8_atol(",
                "def fp8_atol(a8, bt8, sa, sb):\n    return 1e9",
            )
        ),
        _wrong("09_hopper"),
        "1 code cell added",
    ),
    # -- files beside the notebook, named like what it imports: the first import would end it
    _outside(
        "shadows-grader-00",
        "00_setup",
        lambda m: m.files(m.answered(), **{"grader/__init__.py": SHADOW, "torch.py": SHADOW}),
        _answered,
        "files beside the notebook: grader, torch.py",
    ),
    _outside(
        "shadows-gemm-05",
        "05_autotuning",
        lambda m: m.files(m.answered(), **{"gemm.py": SHADOW, "numpy/__init__.py": SHADOW}),
        _answered,
        "files beside the notebook: gemm.py, numpy",
    ),
    _outside(
        "shadows-grader-07",
        "07_flash_attention",
        lambda m: m.files(m.answered(), **{"grader/__init__.py": SHADOW, "triton.py": SHADOW}),
        _answered,
        "files beside the notebook: grader, triton.py",
    ),
    # on the wrong float8 answer, whose float8 speed cell scores 0 on every run: the GPU compares
    # every cell with the base's, speed included, and this comparison then rests on no timing
    _outside(
        "shadows-gemm-09",
        "09_hopper",
        lambda m: m.files(
            _wrong("09_hopper")(m), **{"gemm.py": SHADOW, "triton/__init__.py": SHADOW}
        ),
        _wrong("09_hopper"),
        "files beside the notebook: gemm.py, triton",
    ),
]
