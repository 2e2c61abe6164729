"""Reference mapping: new cells, of new batches, embedded onto a trained reference, against
scVI's query mapping (scArches: ``SCVI.load_query_data`` and training of the new batch's
weights alone).

    python benchmarks/mapping.py atlas [--iterations 3000] [--scvi-epochs N] [--query-epochs 200]
    python benchmarks/mapping.py kang  [--iterations 3000] [--scvi-epochs N] [--folder F]
    python benchmarks/mapping.py speed [--cells 20000] [--compare 1000]
    python benchmarks/mapping.py versus [--cells 10000] [--before COMMIT] [--folder F]
    python benchmarks/mapping.py versus --new-batch [--cells 40000] [--before COMMIT] [--folder F]
    python benchmarks/mapping.py missing [atlas] [kang] [--fractions 0 0.1 0.3 0.5] [--folder F]
    python benchmarks/mapping.py novelty [atlas] [kang] [--folder F]

``atlas``: the hard simulated atlas of benchmarks/single_cell.py (``--hard --de-scale 0.5
--batch-scale 1.0``, 10,000 cells of 10 types, 4 batches, 2,000 genes); batches 0-2 are the
reference, batch 3 the query. ``kang``: the Kang et al. PBMC counts (``GPFLOW_SVI_GPLVM_DATA``
or the cache, ``kang_pbmc/``): control cells the reference, interferon-stimulated cells the
query, the 2,000 genes most variable in the reference (scanpy's ``highly_variable_genes`` on its
log-normalised counts), cell types by canonical markers
(:func:`~gpflow_svi_gplvm.datasets.marker_cell_types`, unclear cells left out of the scores).

Each contender fits the reference, then maps the query: B-SVI NB with the batch as covariate
(``SingleCellGPLVM.fit``, ``map_query``), and, where ``$SCVI_PYTHON`` names a Python with
scvi-tools, scVI with scvi-tools' recommended scArches architecture (``encode_covariates=True``,
``deeply_inject_covariates=False``, layer norm) then ``load_query_data`` and 200 epochs of the query
(``weight_decay=0``; ``--query-epochs``), torch on one thread. Scores on the joint embedding of
reference and query: the query's cell types predicted by the 15 nearest reference cells (accuracy),
batch ASW (within types) and iLISI (scib-metrics, scaled to [0, 1]) of the reference and query
batches, the CPU seconds of the mapping per 10^4 query cells, and the largest change of a reference
cell's embedding.

``speed``: cells embedded a second by ``transform`` (Laplace steps, a block of cells per
compiled call) at 2,000 genes on the default simulated atlas, and, on ``--compare`` of them,
the q(x*) of the package's general new-row inference (``infer_latents``: 300 Adam steps of the
bound, as ``transform`` did before) beside it: k-means ARI and batch ASW of both.
``versus``: ``transform``'s speed on the same kind of model and cells, the package as checked
out beside the package at ``--before`` (``git archive``), the same saved model and cells, each
run a process of its own, alternating for ``--rounds``; k-means ARI and batch ASW of both, and
how far each cell's q(x*) moved (the model and cells are kept in ``--folder`` and reused).
With ``--new-batch``, the same for ``map_query`` of a batch the model never saw: a hard atlas
(as ``atlas``) of ``--cells`` cells, batches 0-2 the reference, batch 3 the query, whose
offsets each contender learns and whose cells it embeds (after a first call on 100 of them as a
batch of another name, for the traces); label transfer accuracy and batch ASW of the joint
embedding beside the query's own scores.
``missing``: the query of ``atlas`` or ``kang`` (as above) lacking each share ``--fractions`` of
the reference's genes (drawn at random), mapped with ``missing_genes="marginalise"`` and with
those genes filled with zeros (as scArches' ``prepare_query_anndata`` does): accuracy of label
transfer, batch ASW, ARI.
``novelty``: a cell type held out of the reference (``HELD_OUT``: the atlas's type3, Kang's
dendritic cells), the reference fitted to the other batches' other cells, the query (the query
batch, every type) mapped with ``map_query``: the AUROC of the novelty it writes
(``obs["gplvm_novelty"]``) for the held-out type's cells against the rest, and the shares of
each above 0.99 and 0.9; beside it, the same of the label mixing ``transfer_labels`` writes
(``obs["cell_type_transferred_mixing"]``, from the reference's labels, Kang's "unlabelled" cells
taken as without a label), with the shares above 0.5 and 0.2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from single_cell import HARD_ATLAS

HERE = Path(__file__).resolve().parent

NEIGHBOURS = 15
GENES = 2000


def hard_atlas(path: Path, cells: int = 10_000) -> None:
    """The hard atlas as an h5ad (counts in X, obs cell_type and batch)."""
    import anndata
    import pandas as pd

    from gpflow_svi_gplvm.datasets import simulate_atlas

    atlas = simulate_atlas(cells, GENES, de_scale=0.5, batch_scale=1.0, seed=0, **HARD_ATLAS)
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical([f"type{t}" for t in atlas.cell_type]),
            "batch": pd.Categorical([f"batch{b}" for b in atlas.batch]),
        },
        index=[f"cell{i}" for i in range(cells)],
    )
    adata = anndata.AnnData(X=atlas.counts, obs=obs)
    adata.var_names = [f"gene{j}" for j in range(GENES)]
    adata.write_h5ad(path)


def kang(path: Path) -> None:
    """Kang et al.'s PBMC: the reference's 2,000 most variable genes, marker cell types."""
    import scanpy as sc

    from gpflow_svi_gplvm.datasets import load_kang_pbmc, marker_cell_types

    adata = load_kang_pbmc()
    adata.obs["cell_type"] = marker_cell_types(adata)
    adata.obs["batch"] = adata.obs["condition"].astype(str)
    reference = adata[adata.obs["batch"] == "control"].copy()
    sc.pp.normalize_total(reference, target_sum=1e4)
    sc.pp.log1p(reference)
    sc.pp.highly_variable_genes(reference, n_top_genes=GENES)
    adata = adata[:, reference.var["highly_variable"].to_numpy()].copy()
    keep = np.asarray(adata.X.sum(axis=1)).ravel() > 0  # a size factor needs a count
    adata[keep].copy().write_h5ad(path)


def split(adata, query_batch: str):
    query = adata.obs["batch"] == query_batch
    return adata[~query].copy(), adata[query].copy()


def run_gplvm(data: Path, query_batch: str, iterations: int, out: Path) -> None:
    """Fit B-SVI NB to the reference, map the query; write the embeddings and timings."""
    import anndata

    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    reference, query = split(anndata.read_h5ad(data), query_batch)
    face = SingleCellGPLVM(batch_key="batch")
    start = time.process_time()
    face.fit(reference, iterations=iterations, progress=False)
    fitted = time.process_time() - start
    before = reference.obsm["X_gplvm"].copy()
    variables = [v.numpy().copy() for v in face.model.variables]
    start, wall = time.process_time(), time.perf_counter()
    face.map_query(query, progress=False)
    mapped, mapped_wall = time.process_time() - start, time.perf_counter() - wall
    again = face.model.latent_mean().numpy()
    moved = max(
        float(np.max(np.abs(again - before))),
        max(float(np.max(np.abs(a - v.numpy()))) for a, v in zip(variables, face.model.variables)),
    )
    np.savez(out, reference=before, query=query.obsm["X_gplvm"])
    out.with_suffix(".json").write_text(
        json.dumps({"fit_cpu": fitted, "map_cpu": mapped, "map_wall": mapped_wall, "moved": moved})
    )


def run_scarches(
    data: Path, query_batch: str, epochs: int | None, query_epochs: int, out: Path
) -> None:
    """scVI on the reference (scvi-tools' scArches architecture), then its query mapping."""
    import anndata
    import scvi
    import torch

    scvi.settings.seed = 0
    # One thread: torch's OpenMP threads spin while they wait, which on shared cores turns into
    # CPU seconds (and hours) that are not scVI's work.
    torch.set_num_threads(1)
    reference, query = split(anndata.read_h5ad(data), query_batch)
    scvi.model.SCVI.setup_anndata(reference, batch_key="batch")
    architecture = dict(
        n_latent=10,
        n_layers=2,
        encode_covariates=True,
        deeply_inject_covariates=False,
        use_layer_norm="both",
        use_batch_norm="none",
    )
    model = scvi.model.SCVI(reference, **architecture)
    start = time.process_time()
    model.train(max_epochs=epochs, accelerator="cpu")
    fitted = time.process_time() - start
    before = model.get_latent_representation()
    start, wall = time.process_time(), time.perf_counter()
    mapped_model = scvi.model.SCVI.load_query_data(query, model)
    mapped_model.train(
        max_epochs=query_epochs, plan_kwargs=dict(weight_decay=0.0), accelerator="cpu"
    )
    embedding = mapped_model.get_latent_representation()
    mapped, mapped_wall = time.process_time() - start, time.perf_counter() - wall
    after = mapped_model.get_latent_representation(reference)
    np.savez(out, reference=before, query=embedding)
    out.with_suffix(".json").write_text(
        json.dumps(
            {
                "fit_cpu": fitted,
                "map_cpu": mapped,
                "map_wall": mapped_wall,
                "moved": float(np.max(np.abs(after - before))),
                "threads": torch.get_num_threads(),
            }
        )
    )


def scores(reference: np.ndarray, query: np.ndarray, obs_ref, obs_query) -> dict:
    """Label transfer accuracy, batch ASW and iLISI of the joint embedding."""
    from scib_metrics import ilisi_knn
    from scib_metrics.nearest_neighbors import NeighborsResults
    from sklearn.neighbors import KNeighborsClassifier, NearestNeighbors

    from gpflow_svi_gplvm.metrics import embedding_scores

    types_ref = obs_ref["cell_type"].astype(str).to_numpy()
    types_query = obs_query["cell_type"].astype(str).to_numpy()
    known = types_ref != "unlabelled"
    classifier = KNeighborsClassifier(NEIGHBOURS).fit(reference[known], types_ref[known])
    scored = types_query != "unlabelled"
    accuracy = np.mean(classifier.predict(query[scored]) == types_query[scored])
    joint = np.concatenate([reference, query])
    types = np.concatenate([types_ref, types_query])
    batch = np.concatenate([obs_ref["batch"].astype(str), obs_query["batch"].astype(str)])
    labelled = types != "unlabelled"
    mixing = embedding_scores(joint[labelled], types[labelled], batch[labelled])
    distances, indices = NearestNeighbors(n_neighbors=90).fit(joint).kneighbors(joint)
    ilisi = ilisi_knn(NeighborsResults(indices=indices, distances=distances), batch, scale=True)
    return {
        "accuracy": float(accuracy),
        "batch ASW": mixing["batch ASW"],
        "ARI": mixing["ARI"],
        "iLISI": float(ilisi),
    }


def compare(args: argparse.Namespace) -> None:
    import anndata

    # A contender whose results the folder already holds is not run again: a rerun with the same
    # --folder finishes what an interrupted one left.
    folder = Path(args.folder) if args.folder else Path(tempfile.mkdtemp(prefix="mapping-"))
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "cells.h5ad"
    query_batch = "batch3" if args.command == "atlas" else "stimulated"
    if not data.exists():
        (hard_atlas if args.command == "atlas" else kang)(data)
    reference, query = split(anndata.read_h5ad(data), query_batch)
    print(
        f"{args.command}: reference {reference.n_obs} cells ({sorted(set(reference.obs['batch']))})"
        f", query {query.n_obs} cells ({query_batch}), {reference.n_vars} genes"
    )
    contenders = {"B-SVI NB + batch, map_query": sys.executable}
    if os.environ.get("SCVI_PYTHON"):
        contenders["scVI + batch, scArches"] = os.environ["SCVI_PYTHON"]
    rows = []
    for name, python in contenders.items():
        out = folder / f"{len(rows)}.npz"
        command = [python, __file__, "one", name, str(data), query_batch, str(out)]
        command += ["--iterations", str(args.iterations), "--query-epochs", str(args.query_epochs)]
        if args.scvi_epochs:
            command += ["--scvi-epochs", str(args.scvi_epochs)]
        if not out.with_suffix(".json").exists():
            subprocess.run(command, check=True)
        found = np.load(out)
        record = json.loads(out.with_suffix(".json").read_text())
        record.update(scores(found["reference"], found["query"], reference.obs, query.obs))
        record["map_cpu per 1e4"] = record["map_cpu"] * 1e4 / query.n_obs
        rows.append((name, record))
    columns = ["accuracy", "batch ASW", "iLISI", "ARI", "map_cpu per 1e4", "fit_cpu", "moved"]
    print("| contender | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for name, record in rows:
        print(f"| {name} | " + " | ".join(f"{record[c]:.3g}" for c in columns) + " |")


def versus_data(folder: Path, reference: int, cells: int, iterations: int) -> tuple[Path, Path]:
    """The ``versus`` run's model (B-SVI NB, batch as covariate, fitted to ``reference`` cells of
    the default simulated atlas at 2,000 genes, 3 batches) and ``cells`` new cells of the same
    batches, made once in ``folder`` and reused."""
    model, query = folder / "speed", folder / "speed_query.h5ad"
    if model.exists() and query.exists():
        return model, query
    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    adata = default_atlas(reference + cells)
    fitted, new = adata[:reference].copy(), adata[reference:].copy()
    face = SingleCellGPLVM(batch_key="batch").fit(fitted, iterations, progress=False)
    face.save(model, adata=fitted)
    new.write_h5ad(query)
    return model, query


def embed_timing(mode: str, model: str, query: str, cells: str, out: str) -> None:
    """One contender's run (a process of its own): ``transform`` (``mode``) or ``map_query`` of
    the first ``cells`` cells of ``query`` by the saved ``model``, after a first call on 100 of
    them (the traces; for ``map_query`` as a batch of another name, so that the batch timed is
    still new); its CPU and wall seconds, the first call's CPU seconds and q(x*) written to
    ``out`` (.npz)."""
    import anndata

    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    face = SingleCellGPLVM.load(model)
    adata = anndata.read_h5ad(query)[: int(cells)].copy()
    first = adata[:100].copy()
    embed = face.map_query if mode == "map_query" else face.transform
    if mode == "map_query":
        first.obs["batch"] = "warm-up"
    start = time.process_time()
    embed(first, progress=False)
    traces = time.process_time() - start
    start, wall = time.process_time(), time.perf_counter()
    embed(adata, progress=False)
    cpu, wall = time.process_time() - start, time.perf_counter() - wall
    np.savez(
        out,
        mean=adata.obsm["X_gplvm"],
        variance=adata.obsm["X_gplvm_var"],
        cpu=cpu,
        wall=wall,
        traces=traces,
    )


def default_atlas(total: int):
    """``total`` cells of the default simulated atlas (3 batches, 2,000 genes) as an AnnData
    (counts in X, obs batch and cell_type)."""
    import anndata
    import pandas as pd

    from gpflow_svi_gplvm.datasets import simulate_atlas

    atlas = simulate_atlas(total, GENES, num_batches=3, seed=0)
    obs = pd.DataFrame(
        {"batch": pd.Categorical([f"b{b}" for b in atlas.batch]), "cell_type": atlas.cell_type},
        index=[f"cell{i}" for i in range(total)],
    )
    adata = anndata.AnnData(X=atlas.counts, obs=obs)
    adata.var_names = [f"gene{j}" for j in range(GENES)]
    return adata


def speed(args: argparse.Namespace) -> None:
    """Cells a second of transform, and its embedding beside infer_latents' on a subset."""

    from gpflow_svi_gplvm.metrics import embedding_scores
    from gpflow_svi_gplvm.prediction.functions import infer_latents
    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    adata = default_atlas(args.reference + args.cells)
    reference, query = adata[: args.reference].copy(), adata[args.reference :].copy()
    face = SingleCellGPLVM(batch_key="batch").fit(reference, args.iterations, progress=False)
    face.transform(query[:100].copy())  # traces
    start, wall = time.process_time(), time.perf_counter()
    face.transform(query)
    cpu, wall = time.process_time() - start, time.perf_counter() - wall
    print(
        f"transform: {query.n_obs} cells of {GENES} genes in {wall:.1f} s wall, {cpu:.1f} s CPU: "
        f"{query.n_obs / wall:.0f} cells/s, {1e3 * cpu / query.n_obs:.2f} ms CPU a cell"
    )
    subset = query[: args.compare].copy()
    laplace = subset.obsm["X_gplvm"] = query.obsm["X_gplvm"][: args.compare]
    rows, _ = face.registration.read_new(subset)
    covariates = face.encoding.transform(subset.obs)
    start = time.perf_counter()
    adam, _ = infer_latents(face.model, rows[: args.compare], covariates=covariates)
    rate = args.compare / (time.perf_counter() - start)
    print(f"infer_latents (300 Adam steps): {rate:.1f} cells/s")
    types, batches = subset.obs["cell_type"].to_numpy(), subset.obs["batch"].astype(str).to_numpy()
    for name, embedding in (("transform", laplace), ("infer_latents", adam.numpy())):
        found = embedding_scores(embedding, types, batches)
        print(f"{name}: ARI {found['ARI']:.3f}, batch ASW {found['batch ASW']:.3f}")


def versus(args: argparse.Namespace) -> None:
    """Cells a second of ``transform`` (or, with ``--new-batch``, of ``map_query`` of a batch the
    model never saw) at the commit ``--before`` and as checked out, on the same saved model and
    cells, alternating processes; how far apart their q(x*) are."""
    import anndata

    from gpflow_svi_gplvm.metrics import embedding_scores

    folder = Path(args.folder or tempfile.mkdtemp())
    folder.mkdir(parents=True, exist_ok=True)
    if args.new_batch:
        model, reference, query = reference_data(folder, "atlas", args.iterations, cells=args.cells)
        mode = "map_query"  # of every cell of the query
    else:
        model, query = versus_data(folder, args.reference, args.cells, args.iterations)
        mode = "transform"  # of the first --cells cells
    obs = anndata.read_h5ad(query, backed="r").obs
    obs = obs if args.new_batch else obs.iloc[: args.cells]
    cells = len(obs)
    before = folder / f"package_{args.before}"
    if not before.exists():
        before.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.before, "gpflow_svi_gplvm"],
            cwd=HERE.parent,
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
    contenders = {f"before ({args.before})": str(before), "now": str(HERE.parent)}
    found: dict[str, list] = {name: [] for name in contenders}
    for round_ in range(args.rounds):
        for name, package in contenders.items():
            out = folder / f"timing_{mode}_{round_}_{name.split()[0]}.npz"
            env = dict(os.environ, PYTHONPATH=package)
            command = [sys.executable, __file__, "timing", mode, str(model), str(query)]
            subprocess.run(command + [str(cells), str(out)], env=env, check=True)
            run = dict(np.load(out))
            found[name].append(run)
            ms = 1e3 * float(run["cpu"]) / cells
            print(
                f"round {round_} {name}: {ms:.3f} ms CPU a cell ({float(run['cpu']):.1f} CPU s), "
                f"{cells / float(run['wall']):.0f} cells/s wall; first call on 100 cells "
                f"{float(run['traces']):.1f} CPU s"
            )
    types, batches = obs["cell_type"].to_numpy(), obs["batch"].astype(str).to_numpy()
    # A new batch's own batch ASW is not defined: its place among the reference cells is.
    columns = "label transfer | joint batch ASW" if args.new_batch else "k-means ARI | batch ASW"
    fitted = anndata.read_h5ad(reference) if args.new_batch else None
    print(f"| {mode} | CPU a cell | CPU s | cells/s (CPU) | cells/s (wall) | {columns} |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, runs in found.items():
        cpu = np.median([float(r["cpu"]) for r in runs])
        wall = np.median([float(r["wall"]) for r in runs])
        if fitted is None:
            own = embedding_scores(runs[0]["mean"], types, batches)
            quality = (own["ARI"], own["batch ASW"])
        else:
            joint = scores(fitted.obsm["X_gplvm"], runs[0]["mean"], fitted.obs, obs)
            quality = (joint["accuracy"], joint["batch ASW"])
        print(
            f"| {name} | {1e3 * cpu / cells:.3f} ms | {cpu:.1f} | {cells / cpu:.0f} | "
            f"{cells / wall:.0f} | {quality[0]:.3f} | {quality[1]:.3f} |"
        )
    old, now = (runs[0] for runs in found.values())
    moved = np.abs(now["mean"] - old["mean"]) / np.sqrt(old["variance"])
    ratio = np.abs(now["variance"] / old["variance"] - 1.0)
    print(
        "|mean now - mean before| / sd before: median "
        f"{np.median(moved):.2g}, 99th percentile {np.quantile(moved, 0.99):.2g}, "
        f"max {moved.max():.2g}; |variance ratio - 1|: median {np.median(ratio):.2g}, "
        f"99th percentile {np.quantile(ratio, 0.99):.2g}"
    )


QUERY_BATCH = {"atlas": "batch3", "kang": "stimulated"}


def reference_data(
    folder: Path, name: str, iterations: int, held_out: str | None = None, cells: int | None = None
) -> tuple[Path, Path, Path]:
    """The reference model of data set ``name`` (fitted to all batches but the query's, without
    the cells of type ``held_out`` if given), its cells with their embedding, and the query's
    cells (every type), made once in ``folder`` and reused (by ``missing``, ``novelty`` and
    ``versus --new-batch``); ``cells``: the atlas's size, if not the default."""
    label = name if cells is None else f"{name}_{cells}"  # the files' names
    stem = label if held_out is None else f"{label}_without_{held_out}"
    model, reference = folder / stem, folder / f"{stem}_ref.h5ad"
    query = folder / f"{label}_query.h5ad"
    if model.exists() and reference.exists() and query.exists():
        return model, reference, query
    import anndata

    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    data = folder / f"{label}.h5ad"
    if not data.exists():
        if name != "atlas":
            kang(data)
        elif cells is None:
            hard_atlas(data)
        else:
            hard_atlas(data, cells)
    fitted, new = split(anndata.read_h5ad(data), QUERY_BATCH[name])
    if held_out is not None:
        fitted = fitted[(fitted.obs["cell_type"].astype(str) != held_out).to_numpy()].copy()
    face = SingleCellGPLVM(batch_key="batch").fit(fitted, iterations, progress=False)
    face.save(model, adata=fitted, overwrite=True)
    fitted.write_h5ad(reference)
    new.write_h5ad(query)
    return model, reference, query


def missing(args: argparse.Namespace) -> None:
    """Label transfer of a query lacking a share of the reference's genes: ``map_query`` with
    ``missing_genes="marginalise"`` beside the query's lacking genes filled with zeros."""
    import anndata
    import scipy.sparse as sp

    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    folder = Path(args.folder or tempfile.mkdtemp(prefix="mapping-"))
    folder.mkdir(parents=True, exist_ok=True)
    for name in args.rest or ["atlas"]:
        model, reference_path, query_path = reference_data(folder, name, args.iterations)
        reference, query = anndata.read_h5ad(reference_path), anndata.read_h5ad(query_path)
        print(f"## {name}: {query.n_obs} query cells, {query.n_vars} genes")
        print("| genes removed | query | accuracy | batch ASW | ARI | CPU s |")
        print("|---:|---|---:|---:|---:|---:|")
        for fraction in args.fractions:
            rng = np.random.default_rng(int(round(100 * fraction)))
            lacking = rng.random(query.n_vars) < fraction
            kept = query[:, ~lacking].copy()
            zeroed = query.copy()
            mask = (~lacking).astype(zeroed.X.dtype)
            if sp.issparse(zeroed.X):
                zeroed.X = sp.csr_matrix(zeroed.X.multiply(mask[None]))
            else:
                zeroed.X = zeroed.X * mask
            ways = {"marginalised": (kept, "marginalise"), "zeros": (zeroed, None)}
            for way, (cells, option) in ways.items():
                if not lacking.any() and way == "zeros":
                    continue  # the full query: one run
                face = SingleCellGPLVM.load(model)
                start = time.process_time()
                face.map_query(cells, progress=False, missing_genes=option)
                cpu = time.process_time() - start
                found = scores(
                    reference.obsm["X_gplvm"], cells.obsm["X_gplvm"], reference.obs, cells.obs
                )
                print(
                    f"| {lacking.mean():.0%} | {way if lacking.any() else 'full'} | "
                    f"{found['accuracy']:.3f} | {found['batch ASW']:.3f} | {found['ARI']:.3f} | "
                    f"{cpu:.0f} |",
                    flush=True,
                )


HELD_OUT = {"atlas": "type3", "kang": "dendritic"}


def novelty(args: argparse.Namespace) -> None:
    """The novelty ``map_query`` writes and the label mixing ``transfer_labels`` writes, for the
    query's cells of a type held out of the reference against the rest: AUROC of each, and the
    share of each group above 0.99 and 0.9 (novelty) and above 0.5 and 0.2 (mixing)."""
    import anndata
    from sklearn.metrics import roc_auc_score

    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM
    from gpflow_svi_gplvm.singlecell.genes.labels import transfer_labels

    folder = Path(args.folder or tempfile.mkdtemp(prefix="mapping-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(
        "| data | held out | query cells (held out) | novelty AUROC | > 0.99: held out, rest | "
        "> 0.9: held out, rest | mixing AUROC | > 0.5: held out, rest | > 0.2: held out, rest |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.rest or ["atlas"]:
        held_out = HELD_OUT[name]
        model, reference_path, query_path = reference_data(folder, name, args.iterations, held_out)
        query = anndata.read_h5ad(query_path)
        SingleCellGPLVM.load(model).map_query(query, progress=False)
        transfer_labels(
            anndata.read_h5ad(reference_path),
            query,
            "cell_type",
            groups_key="batch",
            unlabelled_category="unlabelled",  # Kang's cells no marker names
        )
        held = (query.obs["cell_type"].astype(str) == held_out).to_numpy()
        columns = []
        for column, thresholds in (
            ("gplvm_novelty", (0.99, 0.9)),
            ("cell_type_transferred_mixing", (0.5, 0.2)),
        ):
            score = query.obs[column].to_numpy()
            columns.append(f"{roc_auc_score(held, score):.3f}")
            columns += [
                f"{np.mean(score[held] > t):.2f}, {np.mean(score[~held] > t):.2f}"
                for t in thresholds
            ]
        print(
            f"| {name} | {held_out} | {len(held)} ({held.sum()}) | " + " | ".join(columns) + " |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "command",
        choices=["atlas", "kang", "speed", "versus", "missing", "novelty", "one", "timing"],
    )
    parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument("--scvi-epochs", type=int, default=None)
    parser.add_argument("--query-epochs", type=int, default=200)
    parser.add_argument("--folder", help="where the data and each contender's results are kept")
    parser.add_argument("--cells", type=int, default=20_000)
    parser.add_argument("--reference", type=int, default=5000)
    parser.add_argument("--compare", type=int, default=1000)
    parser.add_argument("--before", default="dd3f107", help="the commit to compare speed with")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.0, 0.1, 0.3, 0.5])
    parser.add_argument(
        "--new-batch",
        action="store_true",
        help="versus: map_query of the held-out batch of a hard atlas of --cells cells",
    )
    args = parser.parse_args()
    if args.command == "one":
        name, data, query_batch, out = args.rest
        if name.startswith("scVI"):
            run_scarches(Path(data), query_batch, args.scvi_epochs, args.query_epochs, Path(out))
        else:
            run_gplvm(Path(data), query_batch, args.iterations, Path(out))
    elif args.command == "timing":
        embed_timing(*args.rest)
    elif args.command == "speed":
        speed(args)
    elif args.command == "versus":
        versus(args)
    elif args.command == "missing":
        missing(args)
    elif args.command == "novelty":
        novelty(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
