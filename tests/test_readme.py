"""The README as a reader meets it: its Python blocks, pasted in order into the standard
interactive interpreter, run as written (but for the length of their long fits, cut as
GPFLOW_SVI_GPLVM_FAST cuts the notebooks') with nothing but what they load themselves; its links
work on a package index's page.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)
# A fit of LONG_FIT steps or more is for a reader's data: the test runs a tenth of it (the
# checkpoint block's 200 and 300 steps, which it checks, run as written).
LONG_FIT = 500


def shortened(block: str) -> str:
    """``block`` with each ``iterations=N`` of N >= LONG_FIT cut to N // 10."""

    def cut(match: re.Match) -> str:
        steps = int(match[1].replace("_", ""))
        return f"iterations={steps // 10 if steps >= LONG_FIT else match[1]}"

    return re.sub(r"iterations=(\d[\d_]*)", cut, block)


# Run in a new process: each block's lines go one by one to an interactive console, as the
# standard REPL reads a paste (a statement right after an indented block without a blank line
# is a SyntaxError there), in one namespace (a later block uses an earlier block's model, as in
# a reader's session); the first error stops the paste. Then it reports what the blocks made.
RUNNER = """
import code, json, sys, time

class Reader(code.InteractiveConsole):
    failed = False

    def showsyntaxerror(self, filename=None, **options):
        self.failed = True
        super().showsyntaxerror(filename, **options)

    def showtraceback(self):
        self.failed = True
        super().showtraceback()

reader = Reader({"__name__": "__main__"})
seconds = []
for number, block in enumerate(json.loads(sys.argv[1]), start=1):
    print(f"README block {number}", flush=True)
    start = time.perf_counter()
    for line in [*block.splitlines(), ""]:  # the paste, then the Enter that ends it
        reader.push(line)
        if reader.failed:
            sys.exit(1)
    seconds.append(round(time.perf_counter() - start, 1))
made = reader.locals
print(json.dumps({"out": sorted(made["out"]), "log_p": list(made["log_p"].shape),
                  "Y_true": list(made["Y_true"].shape), "steps": len(made["history"].elbo),
                  "seconds": seconds}))
"""


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 5


def test_only_long_fits_are_shortened():
    assert shortened("fit(m, Y, iterations=3000, b=1)") == "fit(m, Y, iterations=300, b=1)"
    assert shortened("fit(m, iterations=100_000)\nfit(m, iterations=300)") == (
        "fit(m, iterations=10000)\nfit(m, iterations=300)"
    )


@pytest.mark.processes
def test_readme_blocks_run_pasted_in_order_into_a_fresh_interpreter(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps([shortened(block) for block in BLOCKS])],
        cwd=tmp_path,  # blocks write "exported/" and "ckpt/" where they run
        capture_output=True,
        text=True,
        timeout=900,
    )
    reached = re.findall(r"^README block (\d+)$", result.stdout, flags=re.M)
    assert result.returncode == 0, (
        f"README block {reached[-1] if reached else '?'} failed:\n{result.stderr[-3000:]}"
    )
    made = json.loads(result.stdout.strip().splitlines()[-1])
    print("seconds per README block:", made["seconds"])
    assert made["out"] == ["mean", "variance"]
    assert made["log_p"] == made["Y_true"]
    assert made["steps"] == 300  # the resumed run's history: the whole run, as the block says
    assert re.search(r"^300$", result.stdout, flags=re.M)  # what the block prints


def test_readme_links_work_on_an_index_page():
    """A package index shows the README without the repository around it: a link to a file of
    the repository would be dead there, so files are named in code, and those named exist."""
    prose = re.sub(r"```.*?```|`[^`]*`", "", README, flags=re.DOTALL)
    relative = [
        target
        for image, target in re.findall(r"(!?)\[[^\]]*\]\(([^)\s]+)\)", prose)
        if not image and not re.match(r"https?://|#", target)
    ]
    assert not relative, relative
    named = re.findall(
        r"`((?:docs|tutorials|benchmarks|notebooks)/[\w./-]+\.\w+|[A-Z]+\.(?:md|cff)|LICENSE)`",
        README,
    )
    assert "docs/guide.md" in named and "CITATION.cff" in named
    missing = [n for n in named if "/_build/" not in n and not (ROOT / n).exists()]  # outputs
    assert not missing, missing
