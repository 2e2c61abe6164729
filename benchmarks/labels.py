"""Label transfer measured on held-out real cells, and the posterior predictive check on them.

    python benchmarks/labels.py fit kang|atlas --folder F [--iterations 3000]
    python benchmarks/labels.py transfer kang|atlas --folder F [--unassigned-below 0.5]
    python benchmarks/labels.py check kang|atlas --folder F [--cells 3000] [--samples 10]

``fit``: the reference fitted and the query mapped onto it as ``benchmarks/mapping.py`` does
(B-SVI NB, the batch as covariate, the face's defaults, 3,000 steps; then ``map_query``): on Kang
et al.'s PBMC counts, the 6,548 control cells the reference and the 7,451 interferon-stimulated
cells the query (the 2,000 genes most variable in the reference, cell types by canonical markers,
:func:`~gpflow_svi_gplvm.datasets.marker_cell_types`, unclear cells left out of the reference and
of the scores); on the hard simulated atlas (10,000 cells of 10 types, two of them rare, 4
batches, 2,000 genes), batches 0-2 the reference and batch 3 the query. The model is saved to
``F/model`` and both embeddings' q(x) to ``F/embedding.npz`` (a folder that holds them is not
fitted again).

``transfer``: the reference's labels carried to the query by ``transfer_labels`` (the face's
defaults, the reference's batches as its held-out groups), and by the same function before its
calibration (the probabilities of the kernel density alone, ``calibration=None``): accuracy,
expected calibration error (15 bins), the reliability table, each type's recall and precision
and the cells left unassigned below a probability. On Kang the reference is one batch, so the
held-out groups are random folds of its cells (``transfer_labels`` warns and says so).

``check``: the posterior predictive check
(:func:`~gpflow_svi_gplvm.singlecell.genes.model_check.posterior_predictive_check`) of the
fitted reference on (at most ``--cells``) of its own cells, beside the same statistics of counts
drawn without any cell state (Poisson at each cell's library size times the gene's share).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from mapping import hard_atlas, kang, split

QUERY = {"kang": "stimulated", "atlas": "batch3"}
"""The batch that is the query of each data set."""
UNLABELLED = "unlabelled"


def cells_of(name: str, folder: Path):
    """The data set's cells (written to ``folder`` once), split into reference and query."""
    import anndata

    data = folder / "cells.h5ad"
    if not data.exists():
        (kang if name == "kang" else hard_atlas)(data)
    return split(anndata.read_h5ad(data), QUERY[name])


def fit(args: argparse.Namespace) -> None:
    """Fit the reference, map the query, save the model and both q(x)."""
    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "embedding.npz").exists():
        print(f"{folder} holds a fitted model: not fitted again")
        return
    reference, query = cells_of(args.data, folder)
    face = SingleCellGPLVM(batch_key="batch")
    start = time.process_time()
    face.fit(reference, iterations=args.iterations, progress=False)
    fitted = time.process_time() - start
    start = time.process_time()
    face.map_query(query, progress=False)
    mapped = time.process_time() - start
    face.save(folder / "model", overwrite=True)
    np.savez(
        folder / "embedding.npz",
        reference_mean=reference.obsm["X_gplvm"],
        reference_variance=reference.obsm["X_gplvm_var"],
        query_mean=query.obsm["X_gplvm"],
        query_variance=query.obsm["X_gplvm_var"],
    )
    (folder / "fit.json").write_text(json.dumps({"fit_cpu": fitted, "map_cpu": mapped}))
    print(f"fitted in {fitted:.0f} CPU s, query mapped in {mapped:.0f} CPU s")


def reliability(probabilities: np.ndarray, right: np.ndarray, bins: int = 10) -> list[str]:
    """Rows of a reliability table: cells binned by their top probability, the bin's mean
    probability against the share of them right."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    top = probabilities.max(axis=1)
    rows = ["| top probability | cells | mean probability | share right |", "|---|---|---|---|"]
    for low, high in zip(edges[:-1], edges[1:]):
        inside = (top >= low) & ((top < high) | (high == 1.0))
        if inside.any():
            rows.append(
                f"| {low:.1f}-{high:.1f} | {inside.sum()} | {top[inside].mean():.3f} | "
                f"{right[inside].mean():.3f} |"
            )
    return rows


def transfer(args: argparse.Namespace) -> None:
    """The reference's labels carried to the query, calibrated and not: the scores printed."""
    from gpflow_svi_gplvm.metrics import expected_calibration_error
    from gpflow_svi_gplvm.singlecell.genes.labels import transfer_labels

    folder = Path(args.folder)
    reference, query = cells_of(args.data, folder)
    stored = np.load(folder / "embedding.npz")
    for cells, name in ((reference, "reference"), (query, "query")):
        cells.obsm["X_gplvm"] = stored[f"{name}_mean"]
        cells.obsm["X_gplvm_var"] = stored[f"{name}_variance"]
    truth = query.obs["cell_type"].astype(str).to_numpy()
    scored = truth != UNLABELLED
    print(
        f"{args.data}: {reference.n_obs} reference cells, {query.n_obs} query cells "
        f"({scored.sum()} with a marker label scored)"
    )
    for calibration in ("bias", None):
        start = time.process_time()
        table = transfer_labels(
            reference,
            query,
            "cell_type",
            groups_key="batch",
            unlabelled_category=UNLABELLED,
            calibration=calibration,
            unassigned_below=args.unassigned_below,
        )
        cpu = time.process_time() - start
        probabilities = table.to_numpy()[scored]
        columns = list(table.columns)
        codes = np.array([columns.index(t) if t in columns else -1 for t in truth[scored]])
        right = probabilities.argmax(axis=1) == codes
        error = expected_calibration_error(probabilities, codes)
        left = query.obs["cell_type_transferred"].astype(str).to_numpy()[scored] == "unassigned"
        print(f"\n### calibration={calibration!r} ({cpu:.0f} CPU s)\n")
        print(
            f"accuracy {right.mean():.3f}, expected calibration error (15 bins) {error:.3f}, "
            f"unassigned below {args.unassigned_below}: {left.mean():.3f} of cells "
            f"(accuracy of the rest {right[~left].mean():.3f})\n"
        )
        print("\n".join(reliability(probabilities, right)))
        print("\n| type | query cells | recall | precision |\n|---|---|---|---|")
        predicted = np.array(columns)[probabilities.argmax(axis=1)]
        for name in columns:
            mine, called = truth[scored] == name, predicted == name
            recall = (predicted[mine] == name).mean() if mine.any() else np.nan
            precision = (truth[scored][called] == name).mean() if called.any() else np.nan
            print(f"| {name} | {mine.sum()} | {recall:.3f} | {precision:.3f} |")


def check(args: argparse.Namespace) -> None:
    """The posterior predictive check of the fitted reference on its own cells, beside the
    same statistics of counts drawn without any cell state (Poisson at each cell's library
    size times the gene's share of all counts)."""
    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM
    from gpflow_svi_gplvm.singlecell.genes.model_check import predictive_statistics

    folder = Path(args.folder)
    reference, _ = cells_of(args.data, folder)
    stored = np.load(folder / "embedding.npz")
    reference.obsm["X_gplvm"] = stored["reference_mean"]
    reference.obsm["X_gplvm_var"] = stored["reference_variance"]
    rng = np.random.default_rng(0)
    chosen = np.sort(rng.permutation(reference.n_obs)[: args.cells])
    cells = reference[chosen].copy()
    face = SingleCellGPLVM.load(folder / "model")
    start = time.process_time()
    result = face.posterior_predictive_check(cells, n_samples=args.samples, warn=False)
    cpu = time.process_time() - start
    observed = np.asarray(cells.X.toarray() if hasattr(cells.X, "toarray") else cells.X, float)
    share = observed.sum(axis=0) / observed.sum()
    flat = rng.poisson(observed.sum(axis=1)[:, None] * share, (args.samples,) + observed.shape)
    baseline = predictive_statistics(observed, flat)
    print(
        f"{args.data}: {cells.n_obs} reference cells x {cells.n_vars} genes, "
        f"{args.samples} replicates ({cpu:.0f} CPU s)\n"
    )
    print("| statistic | GPLVM | no cell state (Poisson at the library size) |\n|---|---|---|")
    for name, value in result.summary().items():
        print(f"| {name} | {value:.3f} | {baseline.summary()[name]:.3f} |")
    genes = result.genes[result.genes["cv_observed"] > 0]
    logs = np.log(genes[["cv_observed", "cv_generated"]].to_numpy())
    print(
        f"\n{len(result.genes) - len(genes)} genes without a count in these cells; over the "
        f"{len(genes)} others, log CV correlation {np.corrcoef(logs.T)[0, 1]:.3f}, median "
        f"generated / observed CV {np.median(np.exp(logs[:, 1] - logs[:, 0])):.3f}"
    )
    print("\n| nominal interval | coverage, GPLVM | coverage, no cell state |\n|---|---|---|")
    for nominal, value in result.coverage.items():
        print(f"| {nominal:.2f} | {value:.3f} | {baseline.coverage[nominal]:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["fit", "transfer", "check"])
    parser.add_argument("data", nargs="?", choices=["kang", "atlas"], default="kang")
    parser.add_argument("--folder", required=True)
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument("--unassigned-below", type=float, default=0.5)
    parser.add_argument("--cells", type=int, default=3000)
    parser.add_argument("--samples", type=int, default=10)
    args = parser.parse_args()
    {"fit": fit, "transfer": transfer, "check": check}[args.command](args)


if __name__ == "__main__":
    main()
