"""An adversarial probe of the single-cell model's surfaces, as users would get them wrong.

Usage::

    python benchmarks/probe.py [--only SURFACE ...] [--keep FOLDER]
    python benchmarks/probe.py --summarise LOG [LOG ...]

One tiny model (40 cells, 8 genes, a batch and a numeric covariate, 30 steps) is fitted, saved and
exported once; then several hundred cases call ``SingleCellGPLVM.save`` and ``load``,
``export_saved_model`` and the served model, ``transform``, ``map_query``,
``normalized_expression``, ``differential_expression`` and ``transfer_labels``, ``fit`` of an
``.h5ad`` path changed or truncated while it trains, the command line and its ``embed`` verb, with
inputs that are wrong, odd or merely unusual. Each case is classified (benchmarks/probe_kit.py):
correct result, refused clearly (a ``ValueError`` naming the problem; the command line's ``error:``
line; the served model's failed check), raw or misleading, silently wrong (a result that is wrong:
NaNs, numbers other than the same cells read correctly give), output lost (a file the user had
changed or removed) or hang. Prints a table of the classes by surface and every case that is not
clean (``--summarise``: the same of the printed logs of runs, e.g. of some surfaces each). The cases
live in probe_cells.py, probe_files.py, probe_runs.py, probe_embed.py and probe_rules.py (the DE
rule's options and groupings, ``de_rules``; label transfer's calibration inputs,
``label_calibration``; queries lacking genes, ``missing_genes``); ``save_kill`` and
``save_kill_points`` SIGKILL a saving process at shares of a save's time and at its steps.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import probe_cells  # noqa: E402
import probe_embed  # noqa: E402
import probe_files  # noqa: E402
import probe_rules  # noqa: E402
import probe_runs  # noqa: E402
from probe_kit import CLASSES, CORRECT, HANG, REFUSED, check_close, classify, counts_cells  # noqa: E402

from gpflow_svi_gplvm.singlecell import SingleCellGPLVM  # noqa: E402
from gpflow_svi_gplvm.singlecell.mapping.offsets import BatchOffsets  # noqa: E402

BUILDERS = (
    probe_cells.query_cases,
    probe_cells.argument_cases,
    probe_files.save_cases,
    probe_files.load_cases,
    probe_files.export_cases,
    probe_runs.serving_cases,
    probe_runs.disk_cases,
    probe_runs.cli_cases,
    probe_embed.embed_cases,
    probe_rules.rule_cases,
    probe_rules.label_cases,
    probe_rules.missing_gene_cases,
    probe_files.kill_cases,
    probe_files.point_kill_cases,
)


class Lab:
    """What the cases share: the fitted model, its training cells, a clean query of 10 cells and
    what the model makes of it, the model saved and exported once, a small ``.h5ad``, and a
    fresh folder for each case."""

    def __init__(self, root: Path):
        self.root = root
        self.cells = counts_cells(40, 8, seed=0)
        self.face = SingleCellGPLVM(
            2, layer="counts", batch_key="batch", covariate_keys=["depth"], num_inducing=8
        )
        self.face.fit(self.cells, iterations=30, batch_size=16, progress=False)
        self.query = counts_cells(10, 8, seed=1)
        self.baseline = np.array(self.face.transform(self.query.copy()))
        self.expression = self.face.normalized_expression(self.query.copy(), n_samples=3)
        self.expression = self.expression.to_numpy()
        at_prior = self.query.copy()  # what the gene-reading methods read for cells without counts
        at_prior.obsm["X_gplvm"], at_prior.obsm["X_gplvm_var"] = np.zeros((10, 2)), np.ones((10, 2))
        self.prior_expression = self.face.normalized_expression(at_prior, n_samples=3).to_numpy()
        self.saved = root / "saved"
        self.face.save(self.saved, adata=self.cells)
        self.atlas = root / "atlas.h5ad"
        atlas = counts_cells(200, 8, seed=5)
        atlas.var["gene_ids"] = [f"ENSG{j:05d}" for j in range(8)]  # a column that is not a mask
        atlas.write_h5ad(self.atlas)
        self._embed = None
        self._folders = 0

    @property
    def exported(self) -> Path:
        """The model exported once (on first use: only export and serving cases need it)."""
        folder = self.root / "exported" / "served"
        if not (folder / "1").exists():
            self.face.export_saved_model(folder)
        return folder / "1"

    def folder(self, name: str) -> Path:
        self._folders += 1
        folder = self.root / "cases" / f"{self._folders:04d}-{name}"
        folder.mkdir(parents=True)
        return folder

    def a_file(self) -> Path:
        path = self.folder("file") / "file.txt"
        path.write_text("a user's file")
        return path

    def served(self):
        """The exported model's ``embed`` signature, loaded once."""
        if self._embed is None:
            import tensorflow as tf

            self._embed = tf.saved_model.load(str(self.exported)).signatures["embed"]
        return self._embed

    def serve(self, folder: Path, rtol: float = 1e-6) -> None:
        """A :class:`~probe_kit.Wrong` unless the export at ``folder`` embeds the clean query as
        the fitted model does."""
        import tensorflow as tf

        embed = tf.saved_model.load(str(folder)).signatures["embed"]
        spec = embed.structured_input_signature[1]["counts"].dtype
        query = self.query
        result = embed(
            counts=tf.constant(query.layers["counts"].toarray(), spec),
            batch=tf.constant(query.obs["batch"].astype(str).to_numpy()),
            depth=tf.constant(query.obs["depth"].to_numpy(), spec),
        )
        check_close(result["mean"], self.baseline, f"served from {folder.name}", rtol, 1e-4)

    def new_batch(self):
        query = self.query.copy()
        query.obs["batch"] = "c"
        return query

    def map_query(self, adata, **options):
        """``map_query`` of ``adata``; the batches it learns forgotten afterwards, and the
        reference's embedding checked to be unchanged."""
        try:
            result = self.face.map_query(adata, progress=False, **options)
        finally:
            self.face.batch_offsets = BatchOffsets()
        check_close(self.face.transform(self.query.copy()), self.baseline, "after map_query")
        return result


Row = tuple[str, str, str, str]
"""A classified case: its surface, its name, its class and what was raised."""

LINE = re.compile(
    r"^\[\d+/\d+\] (?P<surface>[^:]+): (?P<name>.*): (?P<kind>"
    + "|".join(CLASSES)
    + r") \([\d.]+ s\) ?(?P<detail>.*)$"
)
"""A case's line as :func:`main` prints it while probing."""


def table(rows: list[Row]) -> str:
    """The classes' counts by surface, as a Markdown table."""
    surfaces = list(dict.fromkeys(surface for surface, *_ in rows))
    counts = Counter((surface, kind) for surface, _, kind, _ in rows)
    lines = [
        "| surface | cases | " + " | ".join(CLASSES) + " |",
        "|---|---:|" + "---:|" * len(CLASSES),
    ]
    for surface in surfaces:
        cells = [str(counts[surface, kind]) for kind in CLASSES]
        total = sum(counts[surface, kind] for kind in CLASSES)
        lines.append(f"| {surface} | {total} | " + " | ".join(cells) + " |")
    cells = [str(sum(counts[s, kind] for s in surfaces)) for kind in CLASSES]
    lines.append(f"| **all** | {len(rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(rows: list[Row]) -> str:
    """The table and every case that is neither correct nor refused clearly."""
    unclean = [row for row in rows if row[2] not in (CORRECT, REFUSED)]
    listed = [
        f"- {surface}: {name}: **{kind}**: {detail}" for surface, name, kind, detail in unclean
    ]
    return "\n".join([table(rows), "", f"Cases not clean ({len(unclean)}):", *listed])


def read_logs(paths: list[Path]) -> list[Row]:
    """The cases of the probe's printed logs (a case in several, the last log's), e.g. of runs
    of some surfaces each (``--only``)."""
    found: dict[tuple[str, str], Row] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            match = LINE.match(line)
            if match:
                surface, name = match["surface"], match["name"]
                found[surface, name] = (surface, name, match["kind"], match["detail"])
    return list(found.values())


def probe(lab: Lab, only: list[str] | None) -> list[Row]:
    """Run every case (of the surfaces ``only``), printing each as it is classified."""
    cases = [case for build in BUILDERS for case in build(lab)]
    cases = [case for case in cases if not only or case.surface in only]
    rows = []
    for number, case in enumerate(cases, 1):
        outcome = classify(case)
        rows.append((case.surface, case.name, outcome.kind, outcome.detail))
        print(
            f"[{number}/{len(cases)}] {case.surface}: {case.name}: {outcome.kind} "
            f"({outcome.seconds:.1f} s) {outcome.detail[:160]}",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", help="surfaces to probe (default: all)")
    parser.add_argument("--keep", type=Path, help="a folder to work in, kept afterwards")
    parser.add_argument(
        "--summarise", nargs="+", type=Path, metavar="LOG", help="summarise printed runs instead"
    )
    args = parser.parse_args(argv)
    if args.summarise:
        print(summary(read_logs(args.summarise)))
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        root.mkdir(parents=True, exist_ok=True)
        rows = probe(Lab(root), args.only)
        print("\n" + summary(rows))
    if any(kind == HANG for _, _, kind, _ in rows):
        sys.stdout.flush()
        os._exit(1)  # a hung case's thread would keep the process alive
    return 0


if __name__ == "__main__":
    sys.exit(main())
