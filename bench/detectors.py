"""How the static detectors fare on the course's attack corpus and on honest code: what the
answer cells reach (grader.grading.detectors.reaches), kernelguard as published, and kernelguard
as the findings run it (grader.grading.detectors.routes). Needs no GPU: nothing of the corpus
runs, every sample is read.

    python bench/detectors.py [--out build/report]

Each sample is a submitted notebook: the released notebook answered with the reference solution,
then the attack (or the honest variant) put where a student would write it. The hostile class
(tests/hostile/) as its attackers build their notebooks; the speed cheats of
tests/test_speed_cheats.py as wrappers around 02's fused launcher in its answer cell, and the same
five written into the launcher itself; the launchers of tests/integrity_kernels.py and
tests/launch_kernels.py, with their kernel, in 00's answer cell; tests/kernels.py in 00's answer
cell and tests/attention_kernels.py as 07's launcher; the known-wrong and slow variants of
tests/known_wrong/ in their exercise's cell; 08's drafts handed in as its fix; the reference
solutions; and honest idioms that look like caching (IDIOMS). Honest: the reference solutions,
the slow variants, the honest launchers and kernels, the idioms.

Columns: what `reaches` reports (its finding kinds); kernelguard's classification and rules with
its default settings (entry point `custom_kernel`), with its `strict` profile, and with every name
the cells bind as an entry point, over the answer cells; and the routes of the findings'
layer: its strong rules over the answer cells alone, with the names of theirs that the release's
other cells call as the entry points. Writes into --out detectors.json (every sample) and
detectors.md: per group, how many samples each flags; and every sample kernelguard flags.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib
import inspect
import json
import pkgutil
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout without an installed `grader`
    sys.path.insert(0, str(ROOT))

PRELUDE = "import math\n\nimport torch\nimport triton\nimport triton.language as tl\n\n"
SETTINGS = ("default", "strict", "every name an entry point")


def materials():
    """{assignment: tests.hostile.Materials} from course/ and solutions/."""
    import nbformat

    from grader.authoring import build
    from tests import hostile

    found = {}
    for folder in sorted(p for p in (ROOT / "course").iterdir() if p.is_dir()):
        (path,) = folder.glob("*.ipynb")
        release = nbformat.read(path, as_version=4)
        source = build.to_notebook(build.SOLUTIONS / folder.name / f"{path.stem}.py")
        found[folder.name] = hostile.Materials(folder.name, path.stem, release, source)
    return found


def bound_names(sources: list[str]) -> list[str]:
    """The names the sources bind at their top level, in order."""
    names = []
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names.append(node.name)
            elif isinstance(node, ast.Assign):
                names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return list(dict.fromkeys(names)) or ["custom_kernel"]


def kernelguard_says(sources: list[str], setting: str) -> dict:
    """kernelguard's classification and rules for the joined sources under `setting`."""
    import kernelguard

    if setting == "default":
        kernelguard.configure_runtime()
    elif setting == "strict":
        kernelguard.configure_runtime(profile="strict")
    else:
        names = bound_names(sources)
        kernelguard.configure_runtime(config_data={"entrypoints": {"names": names}})
    result = kernelguard.analyze_code("\n\n".join(sources), compute_structural_hash=False)
    kernelguard.configure_runtime()
    return {
        "class": result["classification"],
        "rules": sorted({m["pattern"] for m in result["matched_patterns"]}),
    }


def sample(group, name, honest, m, nb) -> dict:
    from grader.grading import detectors

    answers = detectors.answer_cells(nb, m.release)
    sources = [detectors.python(source) for _, source in answers]
    return {
        "group": group,
        "name": name,
        "notebook": m.assignment,
        "honest": honest,
        "reaches": sorted({r.kind for r in detectors.reaches(answers)}),
        "kernelguard": {s: kernelguard_says(sources, s) for s in SETTINGS},
        "layer": [str(r) for r in detectors.routes(answers, detectors.entry_points(m.release))],
    }


def _replaced(m, nb, grade_id, source):
    """`nb` with the cell `grade_id` replaced by `source` (a tests.known_wrong.WithGiven: and
    the given cells after it edited as it says)."""
    from tests.known_wrong import WithGiven

    source = source if isinstance(source, WithGiven) else WithGiven(source)
    nb = copy.deepcopy(nb)
    cell = m.cell(nb, grade_id)
    cell.source = source.exercise
    after = nb.cells[nb.cells.index(cell) + 1 :]
    for old, new in source.given.items():
        given = next(
            c for c in after if old in c.source and not c.metadata.get("nbgrader", {}).get("grade")
        )
        given.source = given.source.replace(old, new)
    return nb


def _definitions(path: Path, names: list[str]) -> str:
    """The top-level definitions `names` of the module at `path` (decorators included)."""
    text = path.read_text()
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        else:
            name = getattr(node, "name", None)
        if name in names:
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            found[name] = "\n".join(text.splitlines()[first - 1 : node.end_lineno])
    assert set(found) == set(names), set(names) - set(found)
    return "\n\n\n".join(found[n] for n in names) + "\n\n\n"


def hostile_class(ms):
    from tests import hostile

    for a in hostile.everyone():
        if a.assignment not in ms:  # the light assignment's attack grading's pipeline, not cells
            continue
        m = ms[a.assignment]
        nb = a.files(m)[f"{m.notebook}.ipynb"]
        if not isinstance(nb, bytes):  # a notebook too deeply nested to read has no code
            yield sample("hostile class", a.student, False, m, nb)


def _fused(m, launcher: str) -> str:
    """02's answered fused-kernel cell with `launcher` in place of its launcher."""
    source = m.cell(m.answered(), "fused-kernel").source
    return source[: source.index("def bias_gelu_scale(")] + launcher


LAUNCH = """\
    M, N = x.shape
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    bias_gelu_scale_kernel[grid](
        x, bias, OUT, M, N, x.stride(0), out.stride(0), scale, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=num_warps,
    )
"""
SIGNATURE = "def bias_gelu_scale(x, bias, scale, out, block_m=1, block_n=8192, num_warps=16):\n"
LAUNCHED = LAUNCH.replace("OUT", "out")
INLINE = {  # the speed cheats written into 02's launcher
    "cached across calls": "_kept = {}\n\n\n"
    + SIGNATURE
    + "    key = (x.data_ptr(), bias.data_ptr(), out.data_ptr(), scale)\n"
    + "    if key in _kept:\n        return _kept[key]\n"
    + LAUNCHED
    + "    _kept[key] = out\n    return out\n",
    "skips after the third call": "_seen = {}\n\n\n"
    + SIGNATURE
    + "    key = (x.data_ptr(), bias.data_ptr(), out.data_ptr())\n"
    + "    _seen[key] = _seen.get(key, 0) + 1\n    if _seen[key] > 3:\n        return out\n"
    + LAUNCHED
    + "    return out\n",
    "side stream": "_side = torch.cuda.Stream()\n\n\n"
    + SIGNATURE
    + "    with torch.cuda.stream(_side):\n"
    + textwrap.indent(LAUNCHED, "    ")
    + "    return out\n",
    "patched timers": "_elapsed = torch.cuda.Event.elapsed_time\n"
    + "torch.cuda.Event.elapsed_time = lambda self, end: _elapsed(self, end) / 10\n\n\n"
    + SIGNATURE
    + LAUNCHED
    + "    return out\n",
    "torch computes it": SIGNATURE
    + LAUNCH.replace("OUT", "torch.empty_like(out)")
    + "    return out.copy_(torch.nn.functional.gelu(x + bias, approximate='tanh') * scale)\n",
}


def speed_cheats(ms):
    from tests import test_speed_cheats as cheats

    m = ms["02_first_kernels"]
    for name, wrapper in cheats.CHEATS.items():
        code = "import importlib\nimport sys\n\n\n" + inspect.getsource(wrapper)
        if name == "torch computes it":
            code = inspect.getsource(cheats.fused_reference) + "\n\n" + code
        code += f"\n\nbias_gelu_scale = {wrapper.__name__}(bias_gelu_scale)\n"
        yield sample(
            "speed cheat, wrapper", name, False, m, m.appended(m.answered(), "fused-kernel", code)
        )
    for name, launcher in INLINE.items():
        nb = _replaced(m, m.answered(), "fused-kernel", _fused(m, launcher))
        yield sample("speed cheat, in the launcher", name, False, m, nb)


LAUNCHERS = {  # module: (dishonest launchers, honest ones, what they call)
    "integrity_kernels": (
        [
            "scale_with_torch",
            "scale_precomputed",
        ],
        ["scale", "scale_stub"],
        ["scale_kernel", "_RESULTS", "scale"],
    ),
    "launch_kernels": (
        ["torch_only", "dummy_launch", "torch_then_empty_launch", "kernel_then_torch"]
        + ["partly_torch", "on_a_torch_result", "on_a_copy", "returns_a_torch_result"],
        ["honest", "in_halves", "tuned", "returns_its_output"],
        ["double_kernel", "double_tuned_kernel", "launch", "dummy_launch"],
    ),
}


def launchers(ms):
    m = ms["00_setup"]
    for module, (dishonest, honest, needs) in LAUNCHERS.items():
        path = ROOT / "tests" / f"{module}.py"
        for names, is_honest in ((dishonest, False), (honest, True)):
            for name in names:
                code = PRELUDE + _definitions(path, list(dict.fromkeys([*needs, name])))
                nb = m.appended(m.answered(), "relu-kernel", code)
                yield sample(f"tests/{module}.py", name, is_honest, m, nb)


def test_kernels(ms):
    m = ms["00_setup"]
    path = ROOT / "tests" / "kernels.py"
    relu = PRELUDE + _definitions(path, ["relu_kernel", "launch"])
    wrong = ["relu_no_store", "relu_stub", "relu_no_mask", "relu_wrong_math", "relu_writes_zeros"]
    wrong += ["relu_in_place", "relu_fp16_math"]
    cases = [("relu_kernel", "launch(relu_kernel)", True)]
    cases += [(name, f"launch({name})", False) for name in wrong]
    cases += [("cached_by_address", "cached_by_address()", False)]
    cases += [("calls_reference_with_nan_tail", "calls_reference_with_nan_tail", False)]
    for name, launcher, honest in cases:
        more = "" if name == "relu_kernel" else _definitions(path, [name])
        code = relu + more + f"relu_launcher = {launcher}\n"
        nb = m.appended(m.answered(), "relu-kernel", code)
        yield sample("tests/kernels.py", name, honest, m, nb)
    m = ms["07_flash_attention"]
    path = ROOT / "tests" / "attention_kernels.py"
    head = "from grader.runtime import device\n\n" + PRELUDE
    head += _definitions(path, ["BUGS", "TILE", "attention_kernel", "_pad", "launcher"])
    for name, extra, honest in (
        ("launcher", [], True),
        ("torch_fallback", ["torch_fallback"], False),
        ("address_cache", ["address_cache"], False),
    ):
        code = head + (_definitions(path, extra) if extra else "") + f"flash_attention = {name}()\n"
        nb = _replaced(m, m.answered(), "flash-attention-kernel", code)
        yield sample("tests/attention_kernels.py", name, honest, m, nb)


def known_wrong(ms):
    import tests.known_wrong

    for info in pkgutil.iter_modules(tests.known_wrong.__path__):
        module = importlib.import_module(f"tests.known_wrong.{info.name}")
        m = ms[module.NOTEBOOK]
        for table, honest in (("WRONG", False), ("SLOW", True)):
            for grade_id, variants in getattr(module, table, {}).items():
                for name, source in variants.items():
                    nb = _replaced(m, m.answered(), grade_id, source)
                    group = "known wrong" if table == "WRONG" else "slow but right"
                    yield sample(group, f"{grade_id}: {name}", honest, m, nb)


def drafts(ms):
    m = ms["08_verify"]
    for path in sorted((ROOT / "course" / "08_verify" / "drafts").glob("*.py")):
        nb = _replaced(m, m.answered(), "attention-fixed", path.read_text())
        yield sample("08's drafts as the fix", path.stem, False, m, nb)


IDIOMS = {  # honest code a student may write that looks like caching: (notebook, cell, code)
    "launch configs kept by row length": (
        "03_softmax",
        "softmax-kernel",
        """
_CONFIGS = {}


def softmax(x):
    n_rows, n_cols = x.shape
    if n_cols not in _CONFIGS:
        _CONFIGS[n_cols] = launch_config(n_cols)
    block, warps = _CONFIGS[n_cols]
    y = torch.empty_like(x)
    softmax_kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols, BLOCK=block, num_warps=warps)
    return y
""",
    ),
    "functools.lru_cache on the launch config": (
        "03_softmax",
        "softmax-kernel",
        """
import functools


@functools.lru_cache(maxsize=None)
def launch_config(n_cols):
    block = triton.next_power_of_2(n_cols)
    return block, 4 if block < 2048 else 8
""",
    ),
    "a scratch buffer kept by shape": (
        "07_flash_attention",
        "flash-attention-kernel",
        """
_SCRATCH = {}


def scratch(q):
    key = (q.shape, q.dtype, q.device)
    if key not in _SCRATCH:
        _SCRATCH[key] = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    return _SCRATCH[key]
""",
    ),
    "the output tensor kept by shape, written afresh each call": (
        "02_first_kernels",
        "fused-kernel",
        """
_OUT = {}


def gelu_into_kept(x, bias, scale):
    key = (x.shape, x.dtype)
    if key not in _OUT:
        _OUT[key] = torch.empty_like(x)
    return bias_gelu_scale(x, bias, scale, _OUT[key])
""",
    ),
    "a side stream joined before returning": (
        "02_first_kernels",
        "fused-kernel",
        """
_side = torch.cuda.Stream() if torch.cuda.is_available() else None


def on_side_stream(x, bias, scale, out):
    _side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side):
        bias_gelu_scale(x, bias, scale, out)
    torch.cuda.current_stream().wait_stream(_side)
    return out
""",
    ),
}


def idioms(ms):
    for name, (notebook, cell, code) in IDIOMS.items():
        m = ms[notebook]
        yield sample("honest idiom", name, True, m, m.appended(m.answered(), cell, code))


def solutions(ms):
    for m in ms.values():
        yield sample("reference solution", m.assignment, True, m, m.answered())


def corpus() -> list[dict]:
    ms = materials()
    found = []
    for part in (hostile_class, speed_cheats, launchers, test_kernels, known_wrong, drafts, idioms):
        found += part(ms)
    return found + list(solutions(ms))


def _said(entry: dict) -> str:
    rules = ", ".join(entry["rules"])
    return f"{entry['class']}: {rules}" if rules else entry["class"]


def _flagged(r: dict, setting: str) -> bool:
    return bool(r["kernelguard"][setting]["rules"])


def summary(rows: list[dict]) -> str:
    """A Markdown table: per group, how many samples each detector flags (for kernelguard: with
    any rule, and how many of those it classifies "hacked", its strongest verdict)."""
    head = ["group", "samples", "reaches", *(f"kernelguard, {s}" for s in SETTINGS), "layer"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for group in dict.fromkeys(r["group"] for r in rows):
        mine = [r for r in rows if r["group"] == group]
        counts = [len(mine), sum(bool(r["reaches"]) for r in mine)]
        for setting in SETTINGS:
            hacked = sum(r["kernelguard"][setting]["class"] == "hacked" for r in mine)
            counts.append(f"{sum(_flagged(r, setting) for r in mine)} ({hacked} hacked)")
        counts += [sum(bool(r["layer"]) for r in mine)]
        lines.append(f"| {group} | " + " | ".join(map(str, counts)) + " |")
    return "\n".join(lines) + "\n"


def _said(entry: dict) -> str:
    rules = ", ".join(entry["rules"])
    return f"{entry['class']}: {rules}" if rules else entry["class"]


def table(rows: list[dict]) -> str:
    """A Markdown table of every sample that kernelguard, in any setting, or the layer flags."""
    head = [
        "group",
        "sample",
        "honest",
        "reaches",
        *(f"kernelguard, {s}" for s in SETTINGS),
        "layer",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if not (r["layer"] or any(_flagged(r, s) for s in SETTINGS)):
            continue
        cells = [r["group"], r["name"], "yes" if r["honest"] else "no", ", ".join(r["reaches"])]
        cells += [_said(r["kernelguard"][s]) for s in SETTINGS] + ["; ".join(r["layer"])]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from importlib import metadata

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "report")
    args = parser.parse_args(argv)
    rows = corpus()
    args.out.mkdir(parents=True, exist_ok=True)
    version = metadata.version("kernelguard")
    (args.out / "detectors.json").write_text(
        json.dumps({"kernelguard": version, "samples": rows}, indent=1)
    )
    text = f"kernelguard {version}, {len(rows)} samples.\n\n" + summary(rows) + "\n" + table(rows)
    (args.out / "detectors.md").write_text(text)
    print(f"wrote {args.out / 'detectors.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
