"""Reading genes: batch-corrected expression, change-mode DE and label transfer against scVI,
scANVI and a Wilcoxon test on simulated atlases that know their truth; the memory of
normalized_expression on 10^6 cells read from an .h5ad.

    python benchmarks/expression.py atlas [--cells 10000 --genes 2000 --iterations 3000]
                                          [--hard --de-scale 0.5 --batch-scale 1.0]
                                          [--scvi-epochs N] [--contenders gplvm scvi]
    python benchmarks/expression.py score --keep FOLDER [the atlas options]  # rescore a run
    python benchmarks/expression.py memory [--cells 1000000 --reference 10000 --genes 2000]
    python benchmarks/expression.py atlas --quick      # a smoke run: 600 cells, 100 genes

atlas: the atlas of ``single_cell.py`` (:func:`gpflow_svi_gplvm.datasets.simulate_atlas`; with
--hard its HARD_ATLAS), fitted by ``SingleCellGPLVM`` (B-SVI, negative binomial, Q = 10, its
default M, the batch in the kernel, shared q(u) covariance, minibatch 256) and by scVI
(``n_latent=10``, batch_key; its default epochs unless --scvi-epochs), each on all cells in a
process of its own (scVI's from $SCVI_PYTHON). Then, on the same cells:

- DE between pairs of cell types (:data:`PAIRS`; the types present): the package's
  ``differential_expression`` and scVI's ``differential_expression(mode="change")`` (both
  delta = 0.25, fdr_target = 0.05, batch_correction, 5,000 sampled pairs), and scanpy's
  ``rank_genes_groups(method="wilcoxon")`` on the log-normalised counts (scored by |z|, declared
  by Benjamini-Hochberg < 0.05). The truth: a gene is DE when the log2 ratio of the two types'
  mean batch-free shares (``SimulatedAtlas.batch_free_proportions``) exceeds delta in size.
  Scores: area under the precision-recall curve (average precision, scikit-learn) of each
  method's ranking; the realised FDR and the recall of the genes it declares.
- Batch-corrected expression, the batch averaged over every batch (``transform_batch`` = all,
  library size 1, 25 draws a cell, both): Pearson correlation with the batch-free shares, of
  the logarithms, per gene across cells (the mean over the genes whose truth varies, sd of its
  log above 0.1) and over all entries; batch ASW (``metrics.embedding_scores``) of a
  50-component PCA of log(1 + 10^4 x expression).
- Label transfer to the last batch, held out: the package's ``LabelTransfer`` on the q(x) of the
  other batches' cells (their batches held out in turn to choose its bandwidth and floor) and
  scANVI from the scVI model (the held-out batch's labels "Unknown", its default epochs),
  ``predict(soft=True)``: accuracy and expected calibration error (15 bins) on the held-out
  batch.

memory: ``--reference`` cells of the default atlas (``--genes``, 2,000) fitted briefly (the model's
parameters do not change the memory), their rows repeated to ``--cells`` cells in an .h5ad
(``atlas_scale.tile_atlas``) with the q(x) of the repeated cells in its obsm; then, each in a
fresh process, ``normalized_expression`` of every cell and gene read from the file with its
output written to a folder: peak resident memory (VmHWM) and seconds, at a tenth of the cells
and at all of them; and of 2,000 cells without obsm (q(x) inferred, as transform does).
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

HERE = Path(__file__).resolve().parent
PAIRS = ((0, 1), (2, 3), (4, 5))
"""The pairs of cell types compared (type i against type j)."""
DELTA, FDR, DE_SAMPLES, DRAWS = 0.25, 0.05, 5000, 25


def one_gplvm(args: argparse.Namespace, job: dict) -> dict:
    """Fit the package's model in this process and read genes from it."""
    import anndata

    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM
    from gpflow_svi_gplvm.singlecell.fitting.fitted import fitted_state
    from gpflow_svi_gplvm.singlecell.genes.differential import differential_expression
    from gpflow_svi_gplvm.singlecell.genes.expression import normalized_expression
    from gpflow_svi_gplvm.singlecell.genes.labels import LabelTransfer

    adata = anndata.read_h5ad(args.data)
    face = SingleCellGPLVM(10, layer="counts", batch_key="batch", shared_covariance=True)
    face.fit(adata, iterations=args.iterations, batch_size=256, progress=False)
    fitted, out = fitted_state(face.fitted), {}
    batches = list(adata.obs["batch"].cat.categories)
    start = time.process_time()
    corrected = normalized_expression(fitted, adata, batches, n_samples=DRAWS)
    out["corrected"] = corrected.to_numpy(np.float32)
    out["corrected_cpu_seconds"] = time.process_time() - start
    for i, (first, second) in enumerate(job["pairs"]):
        table = differential_expression(
            fitted, adata, "cell_type", first, second, delta=DELTA, fdr_target=FDR
        ).loc[adata.var_names]
        out[f"de{i}_proba"] = table["proba_de"].to_numpy()
        out[f"de{i}_declared"] = table[f"is_de_fdr_{FDR}"].to_numpy()
    held = (adata.obs["batch"] == job["held_out"]).to_numpy()
    mean, variance = adata.obsm["X_gplvm"], adata.obsm["X_gplvm_var"]
    transfer = LabelTransfer().fit(
        mean[~held], variance[~held], adata.obs["cell_type"][~held], adata.obs["batch"][~held]
    )
    out["label_proba"] = transfer.predict_proba(mean[held], variance[held])
    out["label_classes"] = np.asarray(transfer.classes_, dtype=str)
    return out


def one_scvi(args: argparse.Namespace, job: dict) -> dict:
    """Fit scVI (and scANVI from it) in this process and read genes from them."""
    import anndata
    import scvi
    import torch

    scvi.settings.seed = 0
    # One thread: torch's OpenMP threads spin while they wait, which on shared cores turns into
    # CPU seconds (and hours) that are not scVI's work.
    torch.set_num_threads(1)
    adata = anndata.read_h5ad(args.data)
    adata.X = adata.layers["counts"].copy()
    held = (adata.obs["batch"] == job["held_out"]).to_numpy()
    masked = adata.obs["cell_type"].astype(str).to_numpy()
    adata.obs["masked"] = np.where(held, "Unknown", masked)
    scvi.model.SCVI.setup_anndata(adata, batch_key="batch", labels_key="masked")
    model = scvi.model.SCVI(adata, n_latent=10)
    model.train(max_epochs=args.scvi_epochs, accelerator="cpu")
    out = {}
    batches = list(adata.obs["batch"].cat.categories)
    start = time.process_time()
    corrected = model.get_normalized_expression(
        transform_batch=batches, library_size=1.0, n_samples=DRAWS, return_mean=True
    )
    out["corrected"] = np.asarray(corrected, dtype=np.float32)
    out["corrected_cpu_seconds"] = time.process_time() - start
    for i, (first, second) in enumerate(job["pairs"]):
        table = model.differential_expression(
            groupby="cell_type",
            group1=first,
            group2=second,
            mode="change",
            delta=DELTA,
            fdr_target=FDR,
            batch_correction=True,
        ).loc[adata.var_names]
        out[f"de{i}_proba"] = table["proba_de"].to_numpy()
        out[f"de{i}_declared"] = table[f"is_de_fdr_{FDR}"].to_numpy()
    scanvi = scvi.model.SCANVI.from_scvi_model(model, unlabeled_category="Unknown")
    scanvi.train(accelerator="cpu")
    soft = scanvi.predict(adata[held], soft=True)
    classes = sorted(set(masked[~held]))
    out["label_proba"] = soft[classes].to_numpy()
    out["label_classes"] = np.asarray(classes, dtype=str)
    return out


def one(args: argparse.Namespace) -> None:
    """One contender in this process: its outputs, wall and CPU seconds and peak memory."""
    job = json.loads(Path(args.job).read_text())
    start, cpu = time.perf_counter(), time.process_time()
    out = (one_scvi if args.contender == "scvi" else one_gplvm)(args, job)
    out.update(
        seconds=time.perf_counter() - start, cpu_seconds=time.process_time() - cpu, peak=peak_gib()
    )
    np.savez(args.out, **out)


def wilcoxon(data: Path, pairs: list) -> dict:
    """scanpy's Wilcoxon test of each pair on the log-normalised counts: |z| and whether the
    Benjamini-Hochberg-adjusted p-value is below the FDR target, per gene (var order)."""
    import anndata
    import scanpy as sc

    adata = anndata.read_h5ad(data)
    adata.X = adata.layers["counts"].copy()
    sc.pp.normalize_total(adata)
    sc.pp.log1p(adata)
    out = {}
    for i, (first, second) in enumerate(pairs):
        sc.tl.rank_genes_groups(
            adata, "cell_type", groups=[first], reference=second, method="wilcoxon"
        )
        result = sc.get.rank_genes_groups_df(adata, group=first).set_index("names")
        result = result.loc[adata.var_names]
        out[f"de{i}_proba"] = np.abs(result["scores"].to_numpy())
        out[f"de{i}_declared"] = result["pvals_adj"].to_numpy() < FDR
    return out


def truth(atlas, obs, pairs: list) -> tuple[dict, np.ndarray]:
    """Each pair's true DE genes by two definitions, and the batch-free shares of every cell
    [N, D]: "changed" where |log2 ratio of the two types' mean batch-free shares| > delta;
    "designed" where the simulator gave the two types different effects (a gene it made DE for
    either type, whatever the programmes and the library's composition do)."""
    shares = atlas.batch_free_proportions()
    names = obs["cell_type"].to_numpy()
    effects = atlas.effects.type_effects
    genes: dict = {"changed": [], "designed": []}
    for first, second in pairs:
        ratio = shares[names == first].mean(axis=0) / shares[names == second].mean(axis=0)
        genes["changed"].append(np.abs(np.log2(ratio)) > DELTA)
        a, b = int(first.removeprefix("type")), int(second.removeprefix("type"))
        genes["designed"].append(effects[a] != effects[b])
    return genes, shares


def de_scores(result: dict, genes: list) -> dict:
    """PR AUC, realised FDR and recall of each pair, averaged over the pairs (and each)."""
    from sklearn.metrics import average_precision_score

    scores = {"PR AUC": [], "realised FDR": [], "recall": [], "declared": []}
    for i, true in enumerate(genes):
        declared = np.asarray(result[f"de{i}_declared"], bool)
        scores["PR AUC"].append(average_precision_score(true, result[f"de{i}_proba"]))
        scores["realised FDR"].append(float(np.mean(~true[declared])) if declared.any() else 0.0)
        scores["recall"].append(float(np.mean(declared[true])))
        scores["declared"].append(int(declared.sum()))
    return scores


def corrected_scores(corrected: np.ndarray, shares: np.ndarray, obs) -> dict:
    """Correlations of the logarithms with the batch-free shares (per gene across cells, over
    genes whose truth varies; all entries), and the batch ASW of a PCA of the expression."""
    from sklearn.decomposition import PCA

    from gpflow_svi_gplvm.metrics import embedding_scores

    estimate, true = np.log(np.maximum(corrected, 1e-12)), np.log(shares)
    varying = true.std(axis=0) > 0.1
    centred = [a[:, varying] - a[:, varying].mean(axis=0) for a in (estimate, true)]
    per_gene = (centred[0] * centred[1]).sum(0) / np.sqrt(
        (centred[0] ** 2).sum(0) * (centred[1] ** 2).sum(0)
    )
    pca = PCA(50, random_state=0).fit_transform(np.log1p(1e4 * corrected))
    types, batch = obs["cell_type"].to_numpy(), obs["batch"].to_numpy()
    return {
        "correlation per gene": float(np.mean(per_gene)),
        "correlation, all entries": float(np.corrcoef(estimate.ravel(), true.ravel())[0, 1]),
        "batch ASW of its PCA": embedding_scores(pca, types, batch)["batch ASW"],
    }


def label_scores(result: dict, obs, held_out: str) -> dict:
    from gpflow_svi_gplvm.metrics import expected_calibration_error

    classes = list(result["label_classes"])
    truth_names = obs["cell_type"][obs["batch"] == held_out].astype(str).to_numpy()
    known = np.isin(truth_names, classes)
    labels = np.array([classes.index(t) if t in classes else -1 for t in truth_names])
    proba = np.asarray(result["label_proba"])
    return {
        "accuracy": float(np.mean(proba.argmax(axis=1) == labels)),
        "ECE": expected_calibration_error(proba[known], labels[known]),
    }


def compare(args: argparse.Namespace) -> None:
    """Make the atlas, run each contender in its own process, score them against the truth;
    with --keep, in that folder (kept: a contender whose results it holds is not run again),
    and with ``score`` only rescore what it holds."""
    with contextlib.ExitStack() as stack:
        folder = Path(args.keep or stack.enter_context(tempfile.TemporaryDirectory()))
        folder.mkdir(parents=True, exist_ok=True)
        data, job_path = folder / "data.h5ad", folder / "job.json"
        if args.command == "atlas":
            make_atlas(args.cells, args.genes, data, atlas_options(args))
        atlas, obs, pairs, held_out = _job(args, data, job_path)
        genes, shares = truth(atlas, obs, pairs)
        counts = {k: [int(g.sum()) for g in v] for k, v in genes.items()}
        print(f"pairs {pairs}: true DE genes {counts}; held out {held_out}")
        results = {"Wilcoxon (scanpy)": wilcoxon(data, pairs)}
        for contender in args.contenders:
            out = folder / f"{contender}.npz"
            if args.command == "atlas" and not out.exists():  # a kept result is reused
                _run_contender(args, contender, data, job_path)
            if out.exists():
                results[contender] = dict(np.load(out))
                costs = {
                    k: float(results[contender][k]) for k in ("seconds", "cpu_seconds", "peak")
                }
                print(contender, json.dumps(costs), flush=True)
        _tables(results, genes, shares, obs, held_out, pairs)


def _job(args: argparse.Namespace, data: Path, job_path: Path) -> tuple:
    """The atlas (drawn again from its options), its obs, the pairs of types compared and the
    held-out batch, written to ``job_path`` for the contenders."""
    import anndata

    from gpflow_svi_gplvm.datasets import simulate_atlas

    atlas = simulate_atlas(args.cells, args.genes, **atlas_options(args))
    obs = anndata.read_h5ad(data, backed="r").obs.copy()
    present = set(obs["cell_type"].astype(str))
    pairs = [(f"type{a}", f"type{b}") for a, b in PAIRS if {f"type{a}", f"type{b}"} <= present]
    held_out = sorted(obs["batch"].astype(str).unique())[-1]
    job_path.write_text(json.dumps({"pairs": pairs, "held_out": held_out}))
    return atlas, obs, pairs, held_out


def _run_contender(args: argparse.Namespace, contender: str, data: Path, job_path: Path) -> None:
    """Run one contender in a process of its own (scVI's from $SCVI_PYTHON)."""
    python = os.environ.get("SCVI_PYTHON") if contender == "scvi" else sys.executable
    if python is None:
        print("scvi: $SCVI_PYTHON is not set, skipped")
        return
    out = data.with_name(f"{contender}.npz")
    command = [python, __file__, "one", "--contender", contender, "--data", str(data)]
    command += ["--job", str(job_path), "--out", str(out), "--iterations", str(args.iterations)]
    if args.scvi_epochs:
        command += ["--scvi-epochs", str(args.scvi_epochs)]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode:
        print(f"{contender}: failed\n{run.stderr[-3000:]}")


def _tables(results: dict, genes: dict, shares, obs, held_out: str, pairs: list) -> None:
    for kind, true in genes.items():
        print(f"\nDE, {len(pairs)} pairs of types, truth {kind!r} (mean over the pairs; each "
              "pair's in brackets):\n")  # fmt: skip
        print("| method | PR AUC | realised FDR | recall | genes declared |")
        print("|---|---:|---:|---:|---:|")
        for name, result in results.items():
            scores = de_scores(result, true)
            cells = [
                f"{np.mean(v):.3f} ({', '.join(f'{x:.3f}' for x in v)})"
                if k != "declared"
                else ", ".join(map(str, v))
                for k, v in scores.items()
            ]
            print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nBatch-corrected expression (all batches averaged, library size 1):\n")
    print("| method | correlation per gene | correlation, all entries | batch ASW of its PCA |")
    print("|---|---:|---:|---:|")
    for name, result in results.items():
        if "corrected" in result:
            scores = corrected_scores(result["corrected"], shares, obs)
            print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in scores.values()) + " |")
    print(f"\nLabel transfer to batch {held_out} (held out):\n")
    print("| method | accuracy | ECE |")
    print("|---|---:|---:|")
    for name, result in results.items():
        if "label_proba" in result:
            scores = label_scores(result, obs, held_out)
            print(f"| {name} | {scores['accuracy']:.3f} | {scores['ECE']:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["atlas", "score", "memory", "one", "memory-one"])
    parser.add_argument("--cells", type=int, default=None)
    parser.add_argument("--genes", type=int, default=2000)
    parser.add_argument("--iterations", type=int, default=3000)
    add_atlas_arguments(parser)
    parser.add_argument("--scvi-epochs", type=int, default=None)
    parser.add_argument("--contenders", nargs="*", default=["gplvm", "scvi"])
    parser.add_argument("--reference", type=int, default=10_000, help="memory: cells fitted")
    parser.add_argument("--folder", default=None, help="memory: where the files are kept")
    parser.add_argument("--keep", default=None, help="atlas, score: the folder of the runs")
    parser.add_argument("--quick", action="store_true")
    for name in ("--contender", "--data", "--job", "--out", "--inferred", "--fit-data"):
        parser.add_argument(name)
    args = parser.parse_args()
    if args.quick:  # the memory run: 600 cells of 100 genes repeated to 6,000
        args.cells = 6000 if args.command == "memory" else 600
        args.genes, args.iterations, args.reference = 100, 50, 600
        args.scvi_epochs = args.scvi_epochs or 5
    if args.command == "one":
        one(args)
    elif args.command in ("atlas", "score"):
        args.cells = args.cells or 10_000
        compare(args)
    elif args.command == "memory-one":
        memory_one(args)
    else:
        args.cells = args.cells or 1_000_000
        memory(args)


def memory_one(args: argparse.Namespace) -> None:
    """Fit ``--reference`` cells briefly, store the q(x) of their repeats in ``--data``'s obsm
    (unless ``--inferred``), then normalized_expression of every cell of ``--data`` read from
    the file, 200 genes, written to a folder: resident memory before the call, the call's peak
    (VmHWM reset before it) and seconds."""
    import anndata
    import h5py

    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM
    from gpflow_svi_gplvm.singlecell.fitting.fitted import fitted_state
    from gpflow_svi_gplvm.singlecell.genes.expression import normalized_expression

    reference = anndata.read_h5ad(args.fit_data)
    face = SingleCellGPLVM(10, batch_key="batch", shared_covariance=True)
    face.fit(reference, iterations=args.iterations, batch_size=256, progress=False)
    if not args.inferred:
        with h5py.File(args.data, "a") as file:
            cells = file["X"].attrs["shape"][0]
            for name in ("X_gplvm", "X_gplvm_var"):
                if f"obsm/{name}" in file:
                    del file[f"obsm/{name}"]
                table = file.create_dataset(f"obsm/{name}", (cells, 10), np.float64)
                table.attrs.update({"encoding-type": "array", "encoding-version": "0.2.0"})
                for start in range(0, cells, len(reference)):  # the repeats' rows, a block each
                    table[start : start + len(reference)] = reference.obsm[name]
    del reference
    before = _resident_gib()
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts afresh
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        genes = face.gene_names[:200]
        written = normalized_expression(
            fitted_state(face.fitted), args.data, "a", genes, n_samples=1, output=folder
        )
        shape = list(written.shape)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "resident": before, "peak": peak_gib(), "shape": shape}))


def _resident_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def memory(args: argparse.Namespace) -> None:
    """The memory of normalized_expression from an .h5ad at a tenth of ``--cells`` and at all
    of them (q(x) in the file's obsm), and with q(x) inferred (2,000 cells; --quick: 100)."""
    from atlas_scale import GENES, tile_atlas, write_atlas

    folder = Path(args.folder or tempfile.mkdtemp())
    folder.mkdir(parents=True, exist_ok=True)
    genes = "" if args.genes == GENES else f"_{args.genes}_genes"  # files kept in --folder
    reference = write_atlas(
        folder / f"atlas_{args.reference}{genes}.h5ad", args.reference, genes=args.genes
    )
    runs = [(cells, False) for cells in (args.cells // 10, args.cells)]
    runs.append((100 if args.quick else 2000, True))
    print("| cells | q(x) | resident before, GiB | peak during, GiB | seconds | output |")
    print("|---:|---|---:|---:|---:|---|")
    for cells, inferred in runs:
        if inferred:
            data = write_atlas(folder / f"atlas_{cells}{genes}.h5ad", cells, genes=args.genes)
        else:
            times = cells // args.reference
            data = tile_atlas(reference, folder / f"tiled_{cells}{genes}.h5ad", times)
        command = [sys.executable, __file__, "memory-one", "--data", str(data)]
        command += ["--fit-data", str(reference), "--iterations", str(args.iterations)]
        command += ["--inferred", "1"] * inferred
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode:
            print(f"{cells} cells: failed\n{run.stderr[-3000:]}")
            continue
        found = json.loads(run.stdout.strip().splitlines()[-1])
        source = "inferred" if inferred else "obsm of the file"
        print(
            f"| {cells:,} | {source} | {found['resident']:.2f} | {found['peak']:.2f} | "
            f"{found['seconds']:.0f} | {found['shape']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
