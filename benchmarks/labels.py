"""Label transfer measured on held-out real cells, and the posterior predictive check on them.

    python benchmarks/labels.py fit kang|atlas --folder F [--iterations 3000]
    python benchmarks/labels.py transfer kang|atlas --folder F [--unassigned-below 0.5]
    python benchmarks/labels.py check kang|atlas --folder F [--cells 3000] [--samples 10]
                                                [--scvi-epochs 100]

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
fitted reference on (at most ``--cells``) of its own cells, beside the same statistics (the
package's ``predictive_statistics``) of counts drawn without any cell state (Poisson at each
cell's library size times the gene's share) and, where ``$SCVI_PYTHON`` names a Python with
scvi-tools, of scVI's draws for the same cells: scVI (``n_latent=10``, the batch as covariate, a
negative binomial likelihood, ``--scvi-epochs`` over every reference cell, torch on one thread)
fitted to the same reference in a process of its own, its ``posterior_predictive_sample`` drawn
by scvi-tools' ``scvi.criticism.PosteriorPredictiveCheck`` (``--samples`` draws), whose own
statistics of the same draws are printed beside the package's as a cross-check. scVI's draws
are kept in ``F`` (``scvi_check_<cells>_<samples>_<epochs>.npz``) and read from there again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
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
    """The posterior predictive check of the fitted reference on its own cells, beside the same
    statistics (the package's ``predictive_statistics``) of scVI's draws for the same cells
    (where ``$SCVI_PYTHON`` is set) and of counts drawn without any cell state (Poisson at each
    cell's library size times the gene's share of all counts)."""
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
    results = {"GPLVM": face.posterior_predictive_check(cells, n_samples=args.samples, warn=False)}
    cpu = {"GPLVM": f"{time.process_time() - start:.0f} CPU s, sampling and statistics"}
    observed = np.asarray(cells.X.toarray() if hasattr(cells.X, "toarray") else cells.X, float)
    share = observed.sum(axis=0) / observed.sum()
    flat = rng.poisson(observed.sum(axis=1)[:, None] * share, (args.samples,) + observed.shape)
    scvi = scvi_draws(args, folder, chosen)
    if scvi is not None:
        if not np.array_equal(scvi["cells"], cells.obs_names.to_numpy(str)):
            raise RuntimeError("scVI's draws are not of the cells checked here.")
        start = time.process_time()
        results["scVI"] = predictive_statistics(observed, scvi["generated"], cells.var_names)
        cpu["scVI"] = (
            f"fitted in {float(scvi['fit_cpu']):.0f} CPU s ({int(scvi['epochs'])} epochs), "
            f"drawn in {float(scvi['draw_cpu']):.0f}, statistics "
            f"{time.process_time() - start:.0f}"
        )
    results["no cell state"] = predictive_statistics(observed, flat, cells.var_names)
    print(
        f"{args.data}: {cells.n_obs} reference cells x {cells.n_vars} genes, "
        f"{args.samples} replicates; " + "; ".join(f"{k}: {v}" for k, v in cpu.items()) + "\n"
    )
    summaries = {name: result.summary() for name, result in results.items()}
    print("| statistic | " + " | ".join(results) + " |\n|---|" + "---:|" * len(results))
    for name in summaries["GPLVM"].index:
        print(f"| {name} | " + " | ".join(f"{s[name]:.3f}" for s in summaries.values()) + " |")
    for name, result in results.items():
        seen, made = result.genes["cv_observed"] > 0, result.genes["cv_generated"] > 0
        logs = np.log(result.genes.loc[seen & made, ["cv_observed", "cv_generated"]].to_numpy())
        print(
            f"\n{name}: {(~seen).sum()} genes without a count in these cells, "
            f"{(seen & ~made).sum()} others without one in the draws; over the {len(logs)} "
            f"others, log CV correlation {np.corrcoef(logs.T)[0, 1]:.3f}, median generated / "
            f"observed CV {np.median(np.exp(logs[:, 1] - logs[:, 0])):.3f}"
        )
    print(
        "\n| nominal interval | "
        + " | ".join(f"coverage, {name}" for name in results)
        + " |\n|---|"
        + "---:|" * len(results)
    )
    for nominal in results["GPLVM"].coverage.index:
        values = " | ".join(f"{r.coverage[nominal]:.3f}" for r in results.values())
        print(f"| {nominal:.2f} | {values} |")
    if scvi is not None:
        print(
            "\nscVI's draws, the package's statistics beside scvi-tools' own "
            "(scvi.criticism.PosteriorPredictiveCheck, the same draws):\n"
        )
        print("| statistic | package | scvi-tools |\n|---|---:|---:|")
        for name in summaries["scVI"].index:  # scvi_one writes each of them
            print(f"| {name} | {summaries['scVI'][name]:.3f} | {float(scvi[name]):.3f} |")


def scvi_draws(args: argparse.Namespace, folder: Path, chosen: np.ndarray) -> dict | None:
    """scVI's draws for the chosen reference cells, run in ``$SCVI_PYTHON`` (:func:`scvi_one`)
    and kept in ``folder``; None where ``$SCVI_PYTHON`` is not set or the run failed."""
    out = folder / f"scvi_check_{args.cells}_{args.samples}_{args.scvi_epochs}.npz"
    python = os.environ.get("SCVI_PYTHON")
    if python is None:
        print("scVI: $SCVI_PYTHON is not set, its column is left out")
    elif out.exists():
        print(f"scVI: its draws are read from {out.name} (delete it to run scVI again)")
    else:
        np.save(folder / "check_cells.npy", chosen)
        command = [python, __file__, "scvi-one", args.data, "--folder", str(folder)]
        command += ["--samples", str(args.samples), "--scvi-epochs", str(args.scvi_epochs)]
        run = subprocess.run(command + ["--out", str(out)], capture_output=True, text=True)
        if run.returncode:
            print(f"scVI failed:\n{run.stderr[-3000:]}")
    return dict(np.load(out)) if python and out.exists() else None


def scvi_one(args: argparse.Namespace) -> None:
    """In scVI's environment: scVI fitted to the reference (``n_latent=10``, the batch as
    covariate, a negative binomial likelihood, ``--scvi-epochs`` on every cell, torch on one
    thread), then scvi-tools' ``PosteriorPredictiveCheck`` of the cells the check chose (its
    ``posterior_predictive_sample``, ``--samples`` draws): the draws [S, N, G] and scvi-tools'
    own statistics of them written to ``--out``."""
    import scvi
    import torch
    from scipy.stats import pearsonr, spearmanr
    from scvi.criticism import PosteriorPredictiveCheck

    scvi.settings.seed = 0
    torch.set_num_threads(1)
    folder = Path(args.folder)
    reference, _ = cells_of(args.data, folder)
    # dense counts: scvi-tools 1.4.2's check fails on a sparse X ("setting an array element
    # with a sequence", its test of integer counts)
    reference.X = reference.X.toarray()
    scvi.model.SCVI.setup_anndata(reference, batch_key="batch")
    model = scvi.model.SCVI(reference, n_latent=10, gene_likelihood="nb")
    start = time.process_time()
    model.train(max_epochs=args.scvi_epochs, train_size=1.0, accelerator="cpu")
    fit_cpu = time.process_time() - start
    chosen = np.load(folder / "check_cells.npy")
    start = time.process_time()
    # scvi-tools' calibration reads the model named "model1"
    ppc = PosteriorPredictiveCheck(
        reference, {"model1": model}, n_samples=args.samples, indices=chosen
    )
    draw_cpu = time.process_time() - start
    generated = np.moveaxis(ppc.samples_dataset["model1"].data.todense(), 2, 0)
    found = {}
    for dim, name in (("cells", "gene"), ("features", "cell")):
        ppc.coefficient_of_variation(dim)
        cv = ppc.metrics[f"cv_{name}"]
        made, seen = cv["model1"].to_numpy(), cv["Raw"].to_numpy()
        both = np.isfinite(made) & np.isfinite(seen)
        found[f"cv_{name}_pearson"] = pearsonr(made[both], seen[both])[0]
        found[f"cv_{name}_spearman"] = spearmanr(made[both], seen[both])[0]
    ppc.zero_fraction()
    nonzero = ppc.metrics["zero_fraction"]  # scvi-tools' "zero fraction" is the non-zero share
    found["zero_fraction_error"] = np.abs(nonzero["model1"] - nonzero["Raw"]).mean()
    ppc.calibration_error()
    found["calibration_error"] = ppc.metrics["calibration"].loc["features", "model1"]
    np.savez_compressed(
        args.out,
        generated=generated.astype(np.float32),
        cells=np.asarray(ppc.adata.obs_names, str),
        fit_cpu=fit_cpu,
        draw_cpu=draw_cpu,
        epochs=args.scvi_epochs,
        **found,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["fit", "transfer", "check", "scvi-one"])
    parser.add_argument("data", nargs="?", choices=["kang", "atlas"], default="kang")
    parser.add_argument("--folder", required=True)
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument("--unassigned-below", type=float, default=0.5)
    parser.add_argument("--cells", type=int, default=3000)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--scvi-epochs", type=int, default=100)
    parser.add_argument("--out", help="scvi-one: where scVI's draws go")
    args = parser.parse_args()
    commands = {"fit": fit, "transfer": transfer, "check": check, "scvi-one": scvi_one}
    commands[args.command](args)


if __name__ == "__main__":
    main()
