"""Single-cell embeddings: the package against PCA and scVI on a simulated atlas and on PBMC.

    python benchmarks/single_cell.py atlas [--cells 10000 --genes 2000 --iterations 3000]
                                           [--de-scale 1.5 --batch-scale 0.5 --library-size 2000]
    python benchmarks/single_cell.py atlas --hard --de-scale 0.5 --batch-scale 1.0 [--scib]
                                           [--atlas-seed 0 --num-inducing 100 --latent-dim 10]
                                           [--distil-cells 10000]
    python benchmarks/single_cell.py pbmc  [--iterations 3000]
    python benchmarks/single_cell.py atlas --quick        # a smoke run: 600 cells, 100 genes
    python benchmarks/single_cell.py step --cells 100000  # seconds per step, peak memory
    python benchmarks/single_cell.py atlas --cells 100000 --no-figure \
        --contenders PCA "B-SVI NB + batch"

atlas: counts from :func:`gpflow_svi_gplvm.datasets.simulate_atlas` (gamma-Poisson, 7 cell
types, 2 batches with gene shifts and library sizes of their own; with --hard, HARD_ATLAS: 10
types of very unequal sizes, two of them rare (1.5% of the cells each), 4 batches whose type
shares differ (Dirichlet, concentration 50) and a continuous programme inside every type).
pbmc: the 700 PBMC cells that scanpy bundles (``scanpy.datasets.pbmc68k_reduced``: 765 genes,
``.raw`` holds log-normalised values, not counts, so the package fits them with a Gaussian
likelihood; cell types are ``bulk_labels``; there is no batch).
Contenders: PCA with scanpy's defaults (normalize_total, log1p, 50 components; on PBMC the
stored values, as scanpy's tutorial does), the package (``SingleCellGPLVM``, Q = 10 unless
--latent-dim, M its default unless --num-inducing: 100, and 50 in the results before the section
on inducing points; minibatch 256, shared q(u) covariance) without and with the batch as
covariates (B-SVI and AEB-SVI with a negative binomial likelihood, the latter's encoder
distilled from B-SVI on --distil-cells cells (its default, all of 10,000 or fewer; jointly
trained in the results before the section on distillation) and its q(x) refined cell by cell or
the encoder's alone, B-SVI with a Poisson one), and scVI (scvi-tools,
``n_latent=10``, batch_key, its default epochs unless --scvi-epochs), run from the Python in
$SCVI_PYTHON when set (a separate environment: scvi-tools is never a dependency).
Every contender runs in a process of its own, so its wall time and peak memory (ru_maxrss) are
its alone. Scores with scikit-learn: NMI and ARI of k-means
(k = the number of cell types, 10 starts) against the cell types; cell-type ASW, (s + 1) / 2;
batch ASW as scIB defines it, the mean over cell types of 1 - |s| with batch labels; graph
connectivity, the mean over cell types of the share of their cells in the largest connected
component of the 15-nearest-neighbour graph restricted to them; where types hold under 2% of
the cells, rare-type F1 (``metrics.rare_type_f1``: the worst rare type's F1 with its
best-matching cluster of k-means with k and 2k clusters, and of the Leiden clusterings). With
python-igraph installed (the ``bench`` extra), Leiden NMI and ARI as scIB takes them: at the
resolution (0.1 to 2) whose clusters of the 15-nearest-neighbour graph best match the types.
Silhouettes use at most 5000 cells (seeded). With --scib (the ``scib`` extra), the scIB
benchmark's own scores as well, from scib-metrics (``metrics.scib_scores``: its Benchmarker on
exact nearest neighbours, raw scores and scIB's Total, PCA of the log-normalised counts as the
unintegrated embedding; data with a batch only). UMAPs of every embedding go to benchmarks/figures/.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FIGURES = HERE / "figures"
CONTENDERS = {
    "B-SVI NB, no covariates": dict(model="bsvi", likelihood="negative_binomial", batch=False),
    "B-SVI NB + batch": dict(model="bsvi", likelihood="negative_binomial", batch=True),
    "B-SVI Poisson + batch": dict(model="bsvi", likelihood="poisson", batch=True),
    "AEB-SVI NB + batch": dict(model="aeb", likelihood="negative_binomial", batch=True),
    "AEB-SVI NB + batch, encoder only": dict(
        model="aeb", likelihood="negative_binomial", batch=True, refine_latents=False
    ),
}
HARD_ATLAS = dict(  # with --hard; the scales (--de-scale, --batch-scale) as given
    num_types=10,
    type_proportions=(0.25, 0.2, 0.15, 0.12, 0.09, 0.07, 0.05, 0.04, 0.015, 0.015),
    num_batches=4,
    composition=50.0,
    programme_scale=1.0,
)
GAUSSIAN = {  # PBMC's stored values are log-normalised, not counts; it has no batch
    "B-SVI Gaussian": dict(model="bsvi", likelihood="gaussian", batch=False),
    "AEB-SVI Gaussian": dict(model="aeb", likelihood="gaussian", batch=False),
}


def make_atlas(cells: int, genes: int, path: Path, options: dict) -> None:
    """Write the simulated atlas as an h5ad: counts in layers["counts"], labels in obs."""
    import anndata
    import pandas as pd

    from gpflow_svi_gplvm.datasets import simulate_atlas

    atlas = simulate_atlas(cells, genes, **options)
    density = atlas.counts.nnz / (cells * genes)
    print(f"atlas: {cells} cells x {genes} genes, {density:.1%} of the counts non-zero")
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical([f"type{t}" for t in atlas.cell_type]),
            "batch": pd.Categorical([f"batch{b}" for b in atlas.batch]),
        },
        index=[f"cell{i}" for i in range(cells)],
    )
    adata = anndata.AnnData(X=atlas.counts, obs=obs)
    adata.var_names = [f"gene{j}" for j in range(genes)]
    adata.layers["counts"] = atlas.counts
    adata.write_h5ad(path)


def add_atlas_arguments(parser: argparse.ArgumentParser) -> None:
    """The command line's options of the simulated atlas (:func:`atlas_options` reads them)."""
    parser.add_argument("--de-scale", type=float, default=1.5, help="simulate_atlas's de_scale")
    parser.add_argument("--library-size", type=float, default=2000.0, help="mean counts a cell")
    parser.add_argument(
        "--batch-scale", type=float, default=0.5, help="simulate_atlas's batch_scale"
    )
    parser.add_argument("--hard", action="store_true", help="the harder atlas, HARD_ATLAS")
    parser.add_argument("--atlas-seed", type=int, default=0, help="simulate_atlas's seed")


def atlas_options(args: argparse.Namespace) -> dict:
    """simulate_atlas's options from the command line: --hard's atlas or the defaults, with the
    scales and seed given."""
    given = dict(
        de_scale=args.de_scale,
        batch_scale=args.batch_scale,
        library_size=args.library_size,
        seed=args.atlas_seed,
    )
    return {**(HARD_ATLAS if args.hard else {}), **given}


def make_pbmc(path: Path) -> None:
    """Write scanpy's 700 PBMC cells (log-normalised values of .raw) as an h5ad."""
    import anndata
    import scanpy as sc

    pbmc = sc.datasets.pbmc68k_reduced()
    obs = pbmc.obs[["bulk_labels"]].rename(columns={"bulk_labels": "cell_type"})
    adata = anndata.AnnData(X=pbmc.raw.X.copy(), obs=obs, var=pbmc.raw.var[[]].copy())
    adata.write_h5ad(path)


def run_pca(adata, counts: bool) -> np.ndarray:
    import scanpy as sc

    if counts:
        adata.X = adata.layers["counts"].copy()
        sc.pp.normalize_total(adata)
        sc.pp.log1p(adata)
    sc.pp.pca(adata, n_comps=min(50, adata.n_vars - 1))
    return adata.obsm["X_pca"]


def run_gplvm(adata, options: dict, args: argparse.Namespace) -> tuple[np.ndarray, dict]:
    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    counts = options["likelihood"] != "gaussian"
    given = {"num_inducing": args.num_inducing}
    if options["model"] == "aeb":
        given["distil_cells"] = args.distil_cells
    given = {k: v for k, v in given.items() if v is not None}
    model = SingleCellGPLVM(
        args.latent_dim,
        layer="counts" if counts else None,
        batch_key="batch" if options["batch"] else None,
        likelihood=options["likelihood"],
        size_factors="library" if counts else None,
        model=options["model"],
        shared_covariance=True,
        refine_latents=options.get("refine_latents", True),
        **given,
    )
    rate = {} if args.learning_rate is None else {"learning_rate": args.learning_rate}
    model.fit(adata, iterations=args.iterations, batch_size=256, progress=False, **rate)
    elbo = np.asarray(adata.uns["gplvm"]["elbo"])
    tenth = max(len(elbo) // 10, 1)
    extra = {
        "elbo last 10%": float(elbo[-tenth:].mean()),
        "elbo previous 10%": float(elbo[-2 * tenth : -tenth].mean()),
        "seconds per step (fit wall / steps, tracing included)": None,
    }
    return adata.obsm["X_gplvm"], extra


def run_scvi(adata, batch: bool, epochs: int | None) -> np.ndarray:
    import scvi

    scvi.settings.seed = 0
    adata.X = adata.layers["counts"].copy()
    scvi.model.SCVI.setup_anndata(adata, batch_key="batch" if batch else None)
    model = scvi.model.SCVI(adata, n_latent=10)
    model.train(max_epochs=epochs, accelerator="cpu")
    return model.get_latent_representation()


def one(args: argparse.Namespace) -> None:
    """Fit one contender in this process; write its embedding, wall time and peak memory."""
    import anndata

    adata = anndata.read_h5ad(args.data)
    counts = "counts" in adata.layers
    start, cpu = time.perf_counter(), time.process_time()
    extra: dict = {}
    if args.contender == "PCA":
        embedding = run_pca(adata, counts)
    elif args.contender.startswith("scVI"):
        embedding = run_scvi(adata, "batch" in adata.obs, args.scvi_epochs)
    else:
        options = {**CONTENDERS, **GAUSSIAN}[args.contender]
        embedding, extra = run_gplvm(adata, options, args)
    seconds = time.perf_counter() - start
    # All threads' CPU seconds: on shared cores the wall time also counts the others' work.
    extra["cpu_seconds"] = time.process_time() - cpu
    if "seconds per step (fit wall / steps, tracing included)" in extra:
        extra["seconds per step (fit wall / steps, tracing included)"] = seconds / args.iterations
    peak = peak_gib()
    np.save(args.out, embedding)
    Path(args.out).with_suffix(".json").write_text(
        json.dumps({"seconds": seconds, "peak_gib": peak, **extra})
    )


def step_time(args: argparse.Namespace) -> None:
    """Seconds per training step of B-SVI, negative binomial, batch covariates, shared q(u)
    covariance, on the simulated atlas: (train(long) - train(short)) / (long - short) steps of
    one Trainer, so tracing is not counted; and the process's peak memory."""
    import anndata
    import pandas as pd

    from gpflow_svi_gplvm import RowShard, Trainer
    from gpflow_svi_gplvm.datasets import simulate_atlas
    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    start = time.perf_counter()
    atlas = simulate_atlas(args.cells, args.genes, seed=0)
    obs = pd.DataFrame({"batch": pd.Categorical(atlas.batch.astype(str))})
    obs.index = obs.index.astype(str)
    adata = anndata.AnnData(X=atlas.counts, obs=obs)
    made = time.perf_counter() - start
    face = SingleCellGPLVM(10, batch_key="batch", num_inducing=50, shared_covariance=True)
    face.fit(adata, iterations=1, batch_size=256, progress=False)  # builds the model
    built = time.perf_counter() - start - made
    rows, _ = face.registration.read(adata)
    shard = RowShard(rows, np.arange(rows.shape[0]), rows.shape[0])  # CSR, batches densified
    trainer = Trainer(face.model, shard, batch_size=256)
    trainer.train(10, progress=False)  # traces
    times, cpu = [], []
    for steps in (100, 400):
        begin, begin_cpu = time.perf_counter(), time.process_time()
        trainer.train(steps, steps_per_call=100, progress=False)
        times.append(time.perf_counter() - begin)
        cpu.append(time.process_time() - begin_cpu)
    per_step, per_step_cpu = (times[1] - times[0]) / 300, (cpu[1] - cpu[0]) / 300
    peak = peak_gib()
    sparse = (atlas.counts.data.nbytes + atlas.counts.indices.nbytes) / 2**30
    print(
        f"N={args.cells} D={args.genes}: atlas made in {made:.0f} s, model built (PCA, checks) in "
        f"{built:.0f} s; {per_step:.4f} s per step (B=256, M=50, Q=10), {per_step_cpu:.4f} CPU s "
        f"per step (all threads); peak memory "
        f"{peak:.2f} GiB, of which the sparse counts {sparse:.2f} GiB (held twice: the atlas "
        "and the model's CSR copy)"
    )


def peak_gib() -> float:
    """This process's peak resident memory in GiB: VmHWM, which starts afresh at exec (ru_maxrss
    keeps the forking parent's peak, here the parent's copy of the data)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20  # kB -> GiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def umap_figure(embeddings: dict, obs, name: str) -> Path:
    """UMAPs of every embedding, coloured by cell type (top) and batch (bottom)."""
    import anndata
    import matplotlib.pyplot as plt
    import scanpy as sc

    rows = 2 if "batch" in obs else 1
    figure, axes = plt.subplots(rows, len(embeddings), figsize=(3.2 * len(embeddings), 3.2 * rows))
    axes = np.atleast_2d(axes).reshape(rows, -1)
    for column, (contender, embedding) in enumerate(embeddings.items()):
        view = anndata.AnnData(np.zeros((len(obs), 1)), obs=obs.copy())
        view.obsm["X_rep"] = embedding
        sc.pp.neighbors(view, use_rep="X_rep", random_state=0)
        sc.tl.umap(view, random_state=0)
        for row, key in enumerate(["cell_type", "batch"][:rows]):
            sc.pl.umap(
                view,
                color=key,
                ax=axes[row, column],
                show=False,
                legend_loc=None,
                title=f"{contender}\n{key}",
                frameon=False,
                size=4,
            )
    figure.tight_layout()
    FIGURES.mkdir(exist_ok=True)
    path = FIGURES / f"single_cell_{name}_umap.png"
    figure.savefig(path, dpi=80)
    return path


def compare(args: argparse.Namespace) -> None:
    """Make the data, run every contender in its own process, score and print a table."""
    import anndata

    from gpflow_svi_gplvm.metrics import embedding_scores

    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "data.h5ad"
        start = time.perf_counter()
        if args.command == "atlas":
            make_atlas(args.cells, args.genes, data, atlas_options(args))
        else:
            make_pbmc(data)
        print(f"data: {args.command}, made in {time.perf_counter() - start:.0f} s")
        obs = anndata.read_h5ad(data, backed="r").obs.copy()
        contenders = ["PCA", *CONTENDERS]
        if args.command == "pbmc":
            contenders = ["PCA", *GAUSSIAN]
        if os.environ.get("SCVI_PYTHON") and args.command == "atlas":
            contenders.append("scVI + batch")
        if args.contenders:
            contenders = [c for c in contenders if c in args.contenders]
        embeddings, rows = {}, []
        leiden = importlib.util.find_spec("igraph") is not None
        for contender in contenders:
            out = Path(folder) / f"{len(rows)}.npy"
            python = os.environ["SCVI_PYTHON"] if contender.startswith("scVI") else sys.executable
            command = [python, __file__, "one", "--contender", contender, "--data", str(data)]
            command += ["--out", str(out), "--iterations", str(args.iterations)]
            for option in ("learning_rate", "num_inducing", "distil_cells"):
                if getattr(args, option) is not None:
                    command += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
            command += ["--latent-dim", str(args.latent_dim)]
            if args.scvi_epochs:
                command += ["--scvi-epochs", str(args.scvi_epochs)]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode:
                print(f"{contender}: failed\n{result.stderr[-2000:]}")
                continue
            embeddings[contender] = np.load(out)
            record = json.loads(out.with_suffix(".json").read_text())
            batch = obs["batch"].to_numpy() if "batch" in obs else None
            types = obs["cell_type"].to_numpy()
            record.update(embedding_scores(embeddings[contender], types, batch, leiden=leiden))
            rows.append((contender, record))
            print(contender, json.dumps(record), flush=True)
        _table(rows)
        if args.scib and "batch" in obs:
            _scib_table(embeddings, obs, data)
        if not (args.quick or args.no_figure):
            print("figure:", umap_figure(embeddings, obs, args.command))


def _table(rows: list) -> None:
    columns = [
        "NMI",
        "ARI",
        "Leiden NMI",
        "Leiden ARI",
        "cell-type ASW",
        "batch ASW",
        "graph connectivity",
        "rare-type F1",
        "seconds",
        "cpu_seconds",
        "peak_gib",
    ]
    print("\n| contender | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for contender, record in rows:
        cells = [f"{record[c]:.3f}" if c in record else "-" for c in columns]
        print(f"| {contender} | " + " | ".join(cells) + " |")


def _scib_table(embeddings: dict, obs, data: Path) -> None:
    """scib-metrics' scores of every embedding (``metrics.scib_scores``), the unintegrated
    embedding PCA's of the log-normalised counts, as scIB takes it."""
    import anndata

    from gpflow_svi_gplvm.metrics import scib_scores

    unintegrated = run_pca(anndata.read_h5ad(data), counts=True)
    types, batch = obs["cell_type"].to_numpy(), obs["batch"].to_numpy()
    # scib-metrics' Benchmarker collects garbage after every metric: frozen, the objects alive
    # now (TensorFlow's, JAX's) are not walked each time (seconds a collection).
    gc.freeze()
    try:
        table = scib_scores(embeddings, types, batch, unintegrated)
    finally:
        gc.unfreeze()
    print("\nscib-metrics (raw scores, no min-max scaling across the contenders):\n")
    print("| contender | " + " | ".join(table.columns) + " |")
    print("|---" * (len(table.columns) + 1) + "|")
    for contender, scores in table.iterrows():
        print(f"| {contender} | " + " | ".join(f"{v:.3f}" for v in scores) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["atlas", "pbmc", "step", "one"])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--genes", type=int, default=2000)
    add_atlas_arguments(parser)
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument(
        "--learning-rate", type=float, default=None, help="fit's (default: SingleCellGPLVM's)"
    )
    parser.add_argument("--latent-dim", type=int, default=10, help="the package's Q")
    parser.add_argument(
        "--num-inducing", type=int, default=None, help="the package's M (default: its default)"
    )
    parser.add_argument(
        "--distil-cells", type=int, default=None, help="the amortised model's (default: its)"
    )
    parser.add_argument("--scvi-epochs", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-figure", action="store_true", help="skip the UMAPs")
    parser.add_argument(
        "--scib", action="store_true", help="also scib-metrics' scores (the scib extra)"
    )
    parser.add_argument("--contenders", nargs="*", help="run only these (names as printed)")
    parser.add_argument("--contender"), parser.add_argument("--data"), parser.add_argument("--out")
    args = parser.parse_args()
    if args.quick:
        args.cells, args.genes, args.iterations = 600, 100, 50
    if args.command == "one":
        one(args)
    elif args.command == "step":
        step_time(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
