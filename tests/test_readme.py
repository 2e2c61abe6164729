"""The README as a reader meets it: its Python blocks, pasted in order into a fresh interpreter,
run with nothing but what they load themselves; its links work on a package index's page.

The only help the blocks get is a cap on ``fit``'s iterations (their own counts are for a real
run), installed before the first block and invisible to them: no data, no imports, no names.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)
CAPPED_ITERATIONS = 3

# Run in a new process: caps fit, then runs each block in one namespace of its own (a later
# block uses an earlier block's model, as in a reader's session), then reports what it made.
RUNNER = """
import json, sys
import gpflow_svi_gplvm

real_fit = gpflow_svi_gplvm.fit

def capped_fit(model, data, iterations=1000, *args, **options):
    return real_fit(model, data, min(iterations, {cap}), *args, **options)

gpflow_svi_gplvm.fit = capped_fit
blocks = json.loads(sys.argv[1])
reader = {{"__name__": "__main__"}}
for number, block in enumerate(blocks, start=1):
    print(f"README block {{number}}", flush=True)
    exec(compile(block, f"README block {{number}}", "exec"), reader)
print(json.dumps({{"out": sorted(reader["out"]), "log_p": list(reader["log_p"].shape),
                  "Y_true": list(reader["Y_true"].shape)}}))
"""


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 5


def test_readme_blocks_run_pasted_in_order_into_a_fresh_interpreter(tmp_path):
    runner = RUNNER.format(cap=CAPPED_ITERATIONS)
    result = subprocess.run(
        [sys.executable, "-c", runner, json.dumps(BLOCKS)],
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
    assert made["out"] == ["mean", "variance"]
    assert made["log_p"] == made["Y_true"]


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
