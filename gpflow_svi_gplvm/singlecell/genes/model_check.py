r"""A posterior predictive check of a fitted single-cell model: counts generated for the cells
from the model set beside their observed counts, with the statistics of scvi-tools'
``scvi.criticism.PosteriorPredictiveCheck`` (scvi-hub runs them on every model it hosts), so that
a user can tell whether to trust what the model generates (``normalized_expression``, DE).

Each of S replicates draws, for every cell n (its counts of the fitted genes, its covariates and
size factor read as ``transform`` reads them), :math:`x_n \sim q(x_n)` (stored or inferred),
:math:`f_{nd} \sim q(f_d([x_n, r_n]))` (the GP's predictive at that input, each gene apart) and
:math:`\tilde y_{nd} \sim p(y \mid f_{nd})` (the likelihood: negative binomial as a gamma-Poisson
mixture, Poisson, Gaussian). From observed Y [N, G] and generated :math:`\tilde Y` [S, N, G]:

- gene-wise CV: for each gene, the coefficient of variation std / mean over cells (population
  std), observed and generated (averaged over replicates); their Pearson and Spearman
  correlations over genes (``cv_gene_pearson``, ``cv_gene_spearman``);
- cell-wise CV: the same over genes for each cell (``cv_cell_*``);
- zero fraction: each gene's share of zero counts, observed and generated; the mean absolute
  difference over genes (``zero_fraction_error``);
- calibration of predictive intervals: for central intervals of nominal mass w (0.95, 0.90 ..
  0.65, scvi-tools' quantiles), the share of observed counts inside the replicates' empirical
  interval (ends included, as scvi-tools does), and the calibration error
  :math:`\sum_w (\mathrm{coverage}_w - w)^2`. On sparse counts most intervals are [0, 0] and
  hold every observed 0, so coverage exceeds the nominal masses whatever the model (on Kang's
  PBMC, 0.97-0.98 for 0.65-0.95): read it beside the CV correlations.

A check whose gene-wise or cell-wise CV Pearson correlation is below
:data:`CV_CORRELATION_WARNING` draws a warning: the generated counts then vary across cells (or
across genes within a cell) unlike the observed ones, and generated data (and the expression
read from the model) should not be trusted for those cells. Both are needed: counts drawn with
no cell state at all (Poisson at each cell's library size) keep a gene-wise CV correlation near
that of a fitted model on real counts, their cell-wise one falls to about 0; on scVI's draws for
the same Kang cells these statistics agree with scvi-tools' own to the third decimal, and scVI's
check reads as the GPLVM's but for a higher cell-wise CV correlation after scvi-tools' default
400 epochs (0.878 against 0.846; benchmarks/results/labels.md). Cells of a batch that
``map_query`` learnt offsets for are refused, as the held-out likelihood refuses them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import pearsonr, spearmanr

from ...likelihoods import base_likelihood, likelihood_facts
from ...validation import check_integer, check_seed
from ..cells.reading import opened
from ..fitting.fitted import FittedCells
from .cell_states import latent_moments
from .held_out import scored_cells

__all__ = [
    "PredictiveCheck",
    "posterior_predictive_check",
    "predictive_statistics",
    "generated_counts",
    "CV_CORRELATION_WARNING",
    "INTERVAL_QUANTILES",
]

CV_CORRELATION_WARNING = 0.8
"""Below this gene-wise or cell-wise CV Pearson correlation between observed and generated
counts, the check warns not to trust generated data."""
INTERVAL_QUANTILES = tuple(p / 100 for p in (2.5, 5, 7.5, 10, 12.5, 15, 17.5))
"""The lower ends of the central predictive intervals checked (scvi-tools' quantiles): masses
0.95, 0.90, .. 0.65."""


@dataclass
class PredictiveCheck:
    """The statistics of a posterior predictive check (see the module): correlations of the CV
    of observed and generated counts, the zero fractions' mean absolute difference, the coverage
    of each central interval (``coverage``: nominal mass -> observed share) and its calibration
    error; ``genes``: a DataFrame [G] of the gene-wise CVs and zero fractions."""

    cv_gene_pearson: float
    cv_gene_spearman: float
    cv_cell_pearson: float
    cv_cell_spearman: float
    zero_fraction_error: float
    coverage: pd.Series
    calibration_error: float
    genes: pd.DataFrame

    def summary(self) -> pd.Series:
        """The scalar statistics, one row each."""
        names = ("cv_gene_pearson", "cv_gene_spearman", "cv_cell_pearson", "cv_cell_spearman")
        values = {name: getattr(self, name) for name in names}
        values["zero_fraction_error"] = self.zero_fraction_error
        values["calibration_error"] = self.calibration_error
        return pd.Series(values)


def _cv(counts: np.ndarray, axis: int) -> np.ndarray:
    """std / mean along ``axis`` (population std); NaN where the mean is 0."""
    mean = counts.mean(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return counts.std(axis=axis) / mean


def _correlations(observed: np.ndarray, generated: np.ndarray) -> tuple[float, float]:
    """Pearson and Spearman correlations over the entries finite in both."""
    both = np.isfinite(observed) & np.isfinite(generated)
    if both.sum() < 3:
        return np.nan, np.nan
    return (
        float(pearsonr(observed[both], generated[both])[0]),
        float(spearmanr(observed[both], generated[both])[0]),
    )


def predictive_statistics(
    observed: np.ndarray, generated: np.ndarray, genes: pd.Index | None = None
) -> PredictiveCheck:
    """The check's statistics of observed counts [N, G] and generated ones [S, N, G] (see the
    module). A CV is NaN where the mean is 0 (a gene or cell without counts): the observed one
    is then taken as 0, as scvi-tools does, and a generated one is left out of its average."""
    observed, generated = np.asarray(observed, float), np.asarray(generated, float)
    if observed.ndim != 2 or generated.ndim != 3 or generated.shape[1:] != observed.shape:
        raise ValueError(
            f"observed must be [N, G] and generated [S, N, G], got {observed.shape} and "
            f"{generated.shape}."
        )
    if len(generated) < 2:
        raise ValueError("The check needs at least 2 replicates of generated counts (n_samples).")
    statistics = {}
    for name, axis in (("gene", 0), ("cell", 1)):
        seen = np.nan_to_num(_cv(observed, axis))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: mean 0 always
            made = np.nanmean(_cv(generated, axis + 1), axis=0)
        statistics[name] = (seen, made, *_correlations(seen, made))
    zeros_seen = (observed == 0).mean(axis=0)
    zeros_made = (generated == 0).mean(axis=(0, 1))
    coverage = {}
    for low in INTERVAL_QUANTILES:
        ends = np.quantile(generated, [low, 1 - low], axis=0)  # [2, N, G]
        inside = (observed >= ends[0]) & (observed <= ends[1])
        coverage[round(1 - 2 * low, 3)] = float(inside.mean())
    coverage_table = pd.Series(coverage, name="coverage").rename_axis("nominal")
    genes_table = pd.DataFrame(
        {
            "cv_observed": statistics["gene"][0],
            "cv_generated": statistics["gene"][1],
            "zero_fraction_observed": zeros_seen,
            "zero_fraction_generated": zeros_made,
        },
        index=genes,
    )
    return PredictiveCheck(
        cv_gene_pearson=statistics["gene"][2],
        cv_gene_spearman=statistics["gene"][3],
        cv_cell_pearson=statistics["cell"][2],
        cv_cell_spearman=statistics["cell"][3],
        zero_fraction_error=float(np.abs(zeros_seen - zeros_made).mean()),
        coverage=coverage_table,
        calibration_error=float(sum((c - w) ** 2 for w, c in coverage.items())),
        genes=genes_table,
    )


def generated_counts(likelihood, F: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draws of y ~ p(y | f) for values of f ``F`` [..., G], by the likelihood's facts
    (:func:`~gpflow_svi_gplvm.likelihoods.likelihood_facts`): counts under a log link, negative
    binomial (mean b e^f, dispersion phi per gene) as Poisson(b e^f g), g ~ Gamma(1/phi, scale
    phi), and Poisson(b e^f) without a dispersion (b the exposure); a Gaussian f + noise. A
    ``ValueError`` for another likelihood."""
    facts = likelihood_facts(likelihood)
    if facts.support == "counts" and facts.inverse_link == "exp":
        rate = facts.exposure * np.exp(F)
        dispersion = getattr(base_likelihood(likelihood), "dispersion", None)
        if dispersion is not None:
            phi = np.asarray(dispersion.numpy(), float)
            rate = rate * rng.gamma(1.0 / phi, phi, F.shape)
        return rng.poisson(rate).astype(float)
    if facts.inverse_link == "identity" and facts.noise_variance is not None:
        noise = np.sqrt(float(facts.noise_variance.numpy()))
        return F + noise * rng.standard_normal(F.shape)
    raise ValueError(
        "The posterior predictive check draws counts under a log link (negative binomial, "
        f"Poisson) or a Gaussian's values, not {type(base_likelihood(likelihood)).__name__}'s."
    )


def posterior_predictive_check(
    fitted: FittedCells, adata, n_samples: int = 10, *, seed: int = 0, warn: bool = True
) -> PredictiveCheck:
    """The posterior predictive check of the cells of ``adata`` (an AnnData or an ``.h5ad``
    path; their counts of the fitted genes held in memory: [N, G] and ``n_samples`` replicates
    [S, N, G]); see the module. A warning where the gene-wise or cell-wise CV correlation is
    below :data:`CV_CORRELATION_WARNING` (unless ``warn`` is False)."""
    n_samples = check_integer(n_samples, "n_samples", minimum=2, hint="replicates, e.g. 10")
    rng = np.random.default_rng(check_seed(seed))
    adata = opened(adata)
    rows, library = fitted.registration.read_new(adata)
    scored, Y, inputs = scored_cells(fitted, adata.obs, rows[slice(None)], library)
    if not scored.all():
        raise ValueError(
            f"{int((~scored).sum())} cells have no counts in the fitted genes (size factor 0): "
            "leave them out of the check."
        )
    Y = np.asarray(Y.toarray() if hasattr(Y, "toarray") else Y, float)
    mean, variance = latent_moments(fitted, adata)
    model = fitted.model
    generated = np.empty((n_samples,) + Y.shape)
    for s in range(n_samples):
        x = mean + np.sqrt(variance) * rng.standard_normal(mean.shape)
        X = x if inputs is None else np.concatenate([x, inputs], axis=1)
        f_mean, f_var = (t.numpy() for t in model.predict_f(X))
        F = f_mean + np.sqrt(f_var) * rng.standard_normal(f_mean.shape)
        generated[s] = generated_counts(model.likelihood, F, rng)
    check = predictive_statistics(Y, generated, pd.Index(fitted.registration.gene_names))
    worst = min(("gene", check.cv_gene_pearson), ("cell", check.cv_cell_pearson), key=_rank)
    if warn and not worst[1] >= CV_CORRELATION_WARNING:
        warnings.warn(
            f"The counts the model generates vary unlike the observed ones: the {worst[0]}-wise "
            f"CV correlation is {worst[1]:.2f}, below {CV_CORRELATION_WARNING}. Do not trust "
            "data generated from the model (nor normalized_expression) for these cells; fit "
            "longer or with another likelihood.",
            UserWarning,
            stacklevel=2,
        )
    return check


def _rank(named: tuple[str, float]) -> float:
    """A correlation to rank by, NaN (nothing to correlate) first."""
    return -np.inf if np.isnan(named[1]) else named[1]
