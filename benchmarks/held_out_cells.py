"""The held-out likelihood of cells: ``SingleCellGPLVM.marginal_log_likelihood`` beside scVI's
``get_marginal_ll``, both fitted to the same training cells and scoring the same held-out cells
and genes.

    python benchmarks/held_out_cells.py atlas [--cells 4000 --genes 1000 --held-out 500]
                                              [--hard --de-scale 0.5 --batch-scale 1.0]
    python benchmarks/held_out_cells.py kang [--cells 4000 --genes 1000 --held-out 500]
    python benchmarks/held_out_cells.py atlas --quick     # a smoke run: 600 cells, 100 genes

atlas: the simulated atlas of ``single_cell.py`` (with --hard its HARD_ATLAS); kang: Kang et al.'s
PBMC counts (control and stimulated, ``gpflow_svi_gplvm.datasets.load_kang_pbmc`` from
$GPFLOW_SVI_GPLVM_DATA), ``--cells`` cells drawn at random, the condition as the batch, the
``--genes`` most variable genes among them (scanpy's Seurat flavour on log-normalised counts,
chosen before the split), cells without a count in them dropped. ``--held-out`` cells drawn at
random are held out; the rest train, in a process per model (scVI's from $SCVI_PYTHON):

- the package: ``SingleCellGPLVM`` (B-SVI, negative binomial, Q = 10, its default M, the batch in
  the kernel, shared q(u) covariance, minibatch 256, ``--iterations`` steps), scored by
  ``marginal_log_likelihood`` (256 draws a cell of a proposal made of its q(x*) from new-row
  inference, half of them widened; its defaults);
- scVI (``n_latent=10``, the batch key, its default epochs unless --scvi-epochs, observed
  library size), scored by ``get_marginal_ll(return_mean=False)`` (1,000 draws a cell of its
  encoder's q(z | x), its default).

Both estimate log p(y_n | library) of a held-out cell's counts of all the genes given its batch
and its library size (scVI conditions on the observed library, the package on the size factor
made of it). The table gives the mean per cell with its standard error over the cells, the
paired difference from scVI, the share of cells the package scores higher, and the package's
Monte Carlo standard error per cell (scVI's estimator reports none).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from single_cell import add_atlas_arguments, atlas_options, make_atlas, peak_gib

PACKAGE_DRAWS, SCVI_DRAWS = 256, 1000


def split(args: argparse.Namespace, folder: Path) -> tuple[Path, Path]:
    """Write the training and the held-out cells (counts in ``layers["counts"]``, ``obs``'s
    "batch") to ``folder``; a line saying what they are."""
    import anndata

    whole = folder / "whole.h5ad"
    if args.data == "atlas":
        make_atlas(args.cells, args.genes, whole, atlas_options(args))
        adata = anndata.read_h5ad(whole)
    else:
        adata = _kang(args)
    held = np.zeros(adata.n_obs, bool)
    held[np.random.default_rng(1).permutation(adata.n_obs)[: args.held_out]] = True
    paths = folder / "train.h5ad", folder / "held_out.h5ad"
    adata[~held].copy().write_h5ad(paths[0])
    adata[held].copy().write_h5ad(paths[1])
    print(
        f"{args.data}: {int((~held).sum())} training cells, {int(held.sum())} held out, "
        f"{adata.n_vars} genes, batches {list(adata.obs['batch'].cat.categories)}"
    )
    return paths


def _kang(args: argparse.Namespace):
    """``--cells`` Kang cells at random, the most variable ``--genes`` among them."""
    import scanpy as sc

    from gpflow_svi_gplvm.datasets import load_kang_pbmc

    adata = load_kang_pbmc()
    cells = np.random.default_rng(0).permutation(adata.n_obs)[: args.cells]
    adata = adata[np.sort(cells)].copy()
    logged = adata.copy()
    sc.pp.normalize_total(logged)
    sc.pp.log1p(logged)
    sc.pp.highly_variable_genes(logged, n_top_genes=args.genes)
    adata = adata[:, logged.var["highly_variable"].to_numpy()].copy()
    counted = np.asarray(adata.X.sum(axis=1)).ravel() > 0
    print(f"kang: {int((~counted).sum())} cells without a count in the genes dropped")
    adata = adata[counted].copy()
    adata.layers["counts"] = adata.X.copy()
    adata.obs["batch"] = adata.obs["condition"]
    return adata


def one_package(args: argparse.Namespace) -> dict:
    import anndata

    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    train, held_out = anndata.read_h5ad(args.train), anndata.read_h5ad(args.test)
    face = SingleCellGPLVM(10, layer="counts", batch_key="batch", shared_covariance=True)
    start = time.perf_counter()
    face.fit(train, iterations=args.iterations, batch_size=256, progress=False)
    fitted = time.perf_counter()
    found = face.marginal_log_likelihood(held_out, n_samples=PACKAGE_DRAWS)
    return {
        "log_likelihood": found["log_likelihood"].to_numpy(),
        "standard_error": found["standard_error"].to_numpy(),
        "fit_seconds": fitted - start,
        "score_seconds": time.perf_counter() - fitted,
    }


def one_scvi(args: argparse.Namespace) -> dict:
    import anndata
    import scvi
    import torch

    scvi.settings.seed = 0
    # One thread: torch's OpenMP threads spin while they wait, which on shared cores turns into
    # CPU seconds (and hours) that are not scVI's work.
    torch.set_num_threads(1)
    train, held_out = anndata.read_h5ad(args.train), anndata.read_h5ad(args.test)
    for adata in (train, held_out):
        adata.X = adata.layers["counts"].copy()
    scvi.model.SCVI.setup_anndata(train, batch_key="batch")
    model = scvi.model.SCVI(train, n_latent=10)
    start = time.perf_counter()
    model.train(max_epochs=args.scvi_epochs, accelerator="cpu")
    fitted = time.perf_counter()
    found = model.get_marginal_ll(
        held_out, n_mc_samples=SCVI_DRAWS, return_mean=False, n_mc_samples_per_pass=100
    )
    return {
        "log_likelihood": np.asarray(found, dtype=np.float64),
        "fit_seconds": fitted - start,
        "score_seconds": time.perf_counter() - fitted,
    }


def one(args: argparse.Namespace) -> None:
    """One model in this process: its per-cell estimates, seconds and peak memory."""
    out = (one_scvi if args.contender == "scvi" else one_package)(args)
    np.savez(args.out, peak=peak_gib(), **out)


def compare(args: argparse.Namespace) -> None:
    """Split the cells, fit and score each model in a process of its own (unless --keep holds
    its results), print the table."""
    with contextlib.ExitStack() as stack:
        folder = Path(args.keep or stack.enter_context(tempfile.TemporaryDirectory()))
        folder.mkdir(parents=True, exist_ok=True)
        train, test = split(args, folder)
        results = {}
        for contender in ("package", "scvi"):
            python = os.environ.get("SCVI_PYTHON") if contender == "scvi" else sys.executable
            if python is None:
                print("scvi: $SCVI_PYTHON is not set, skipped")
                continue
            out = folder / f"{contender}.npz"
            if out.exists():  # kept from an earlier run in --keep
                results[contender] = dict(np.load(out))
                continue
            command = [python, __file__, "one", "--contender", contender, "--out", str(out)]
            command += ["--train", str(train), "--test", str(test)]
            command += ["--iterations", str(args.iterations)]
            command += ["--scvi-epochs", str(args.scvi_epochs)] * bool(args.scvi_epochs)
            run = subprocess.run(command, capture_output=True, text=True)
            if run.returncode:
                print(f"{contender}: failed\n{run.stderr[-3000:]}")
                continue
            results[contender] = dict(np.load(out))
            costs = {k: float(results[contender][k]) for k in ("fit_seconds", "score_seconds")}
            print(contender, json.dumps(costs), flush=True)
        table(results)


def table(results: dict) -> None:
    names = {"package": "SingleCellGPLVM (B-SVI NB + batch)", "scvi": "scVI"}
    print(
        "\n| model | log p(y_n) per cell | minus scVI's (paired) | cells scored higher than by "
        "scVI | Monte Carlo SE per cell, mean (max) | fit s | scoring s | peak GiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    reference = results.get("scvi", {}).get("log_likelihood")
    for contender, found in results.items():
        values = found["log_likelihood"]
        cells = [f"{values.mean():.2f} ± {values.std(ddof=1) / np.sqrt(len(values)):.2f}"]
        if reference is not None and contender != "scvi":
            difference = values - reference
            error = difference.std(ddof=1) / np.sqrt(len(values))
            cells += [f"{difference.mean():.2f} ± {error:.2f}", f"{np.mean(difference > 0):.1%}"]
        else:
            cells += ["", ""]
        errors = found.get("standard_error")
        cells.append("" if errors is None else f"{errors.mean():.3f} ({errors.max():.3f})")
        cells += [f"{float(found[k]):.0f}" for k in ("fit_seconds", "score_seconds")]
        cells.append(f"{float(found['peak']):.2f}")
        print(f"| {names[contender]} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data", choices=["atlas", "kang", "one"])
    parser.add_argument("--cells", type=int, default=4000)
    parser.add_argument("--genes", type=int, default=1000)
    parser.add_argument("--held-out", type=int, default=500)
    parser.add_argument("--iterations", type=int, default=3000)
    add_atlas_arguments(parser)
    parser.add_argument("--scvi-epochs", type=int, default=None)
    parser.add_argument("--keep", default=None, help="the folder of the run, kept")
    parser.add_argument("--quick", action="store_true")
    for name in ("--contender", "--train", "--test", "--out"):
        parser.add_argument(name)
    args = parser.parse_args()
    if args.quick:
        args.cells, args.genes, args.held_out, args.iterations = 600, 100, 50, 50
        args.scvi_epochs = args.scvi_epochs or 5
    if args.data == "one":
        one(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
