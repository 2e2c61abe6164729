r"""Export a trained model as a TensorFlow SavedModel that serves with TensorFlow alone.

Signatures (inputs by name; every output a dict of ``mean`` and ``variance``):

- ``decode``: ``X`` [None, Q] -> the likelihood's predictive of Y [None, D] at X;
- ``encode``: ``Y`` [None, D] (NaN = missing) -> q(x*) [None, Q], fitted inside the graph as
  :class:`~gpflow_svi_gplvm.LatentInference` fits it (Newton steps per row where the bound has
  no sampling, from the encoder's q(x*) for amortised models; else Adam steps, or the encoder
  alone), globals frozen;
- ``reconstruct``: ``Y`` [None, D] (NaN = missing) -> the predictive of every entry [None, D];
- ``serving_default``: ``reconstruct``.

Inputs and outputs are float64 unless the export was made with ``dtype=tf.float32``, which casts
at the boundary (the computation stays in float64). ``encode`` and ``reconstruct`` take a request
in chunks of ``chunk_size`` rows, one after another inside the graph, so that a request's peak
memory does not grow with its number of rows (default: rows such that the GP's intermediates stay
near 5e7 numbers, as in :class:`~gpflow_svi_gplvm.LatentInference`). An infinite entry is an
error (NaN marks a missing one), and so is a request of another width: the error states the shape
and dtype the signature expects. A request of another dtype is refused by TensorFlow before the
signature runs ("expected to be a double tensor but is a float tensor").

Units: by default the signatures take and return the units the model was trained in. A model
trained on standardised columns, :math:`\tilde y_{nd} = (y_{nd} - m_d) / s_d`, can be exported
with its ``location`` m [D] and ``scale`` s [D] (the command line does so): the export then takes
Y and returns every mean in the data's own units, applying the affine map inside the graph,

.. math::

    \tilde y = (y - m) / s, \qquad \mathbb{E}[y] = m + s\,\mathbb{E}[\tilde y], \qquad
    \mathbb{V}[y] = s^2\,\mathbb{V}[\tilde y],

and q(x*) of ``encode`` is that of the standardised row. The units an export takes are recorded
in its ``gpflow_svi_gplvm_export.json`` (``units``, with ``location`` and ``scale``). Rows in other
units than those cannot be detected: the export would serve them without complaint.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf
from gpflow.config import default_float

from ..compiled import GraphFunction
from ..prediction.latent_inference import LatentInference
from ..prediction.new_row_model import NewRowModel
from ..prediction.predictive import chunk_rows, in_row_chunks
from ..validation import check_bool, check_finite_array, check_path, check_writable_folder
from .folder import check_destination, write_staged

__all__ = ["ServingModule", "export_saved_model", "SIGNATURES"]

SIGNATURES = ("decode", "encode", "reconstruct", "serving_default")

MODEL_UNITS = "the model's: Y as the model was trained on it"
DATA_UNITS = "the data's own: Y = location + scale * (the model's Y), column by column"


def check_serving_dtype(dtype: object) -> tf.DType:
    """``dtype`` (a ``tf.DType``, a NumPy dtype or a name such as "float32") as tf.float32 or
    tf.float64, or a ``ValueError`` naming the choices."""
    try:
        found = tf.as_dtype(dtype)
    except TypeError:
        found = None
    if found not in (tf.float64, tf.float32):
        raise ValueError(
            f"dtype must be float64 or float32 (tf.float64, np.float32, 'float32', ...), got "
            f"{dtype!r}."
        )
    return found


class ServingModule(tf.Module):
    """The served functions of a trained model; holds the model's variables, nothing else."""

    def __init__(
        self,
        model: NewRowModel,
        encode_iterations: int = 300,
        learning_rate: float = 0.05,
        num_samples: int = 64,
        seed: int = 0,
        dtype: tf.DType = tf.float64,
        chunk_size: int | None = None,
        location: np.ndarray | None = None,
        scale: np.ndarray | None = None,
    ):
        super().__init__()
        dtype = check_serving_dtype(dtype)
        if getattr(model, "row_inputs", None) is not None:
            raise ValueError(
                "This model was fitted with covariates or size factors, which its served rows "
                "would have to bring: exporting it is not supported yet. Infer new rows in Python "
                "(model.infer_latents(Y, covariates=..., size_factors=...))."
            )
        self.model = model
        self.inference = LatentInference(model, encode_iterations, learning_rate, num_samples, seed)
        # Rows per graph call of encode / reconstruct, so a request's peak memory does not grow
        # with its number of rows (the default keeps the GP's intermediates near 5e7 numbers).
        self.encode_rows = chunk_rows(model, chunk_size, model.num_samples)
        self.reconstruct_rows = chunk_rows(model, chunk_size, num_samples)
        self.dtype = dtype
        self.units = _Units.of(location, scale, model.data_dim)
        latent_spec = tf.TensorSpec([None, model.latent_dim], dtype, name="X")
        data_spec = tf.TensorSpec([None, model.data_dim], dtype, name="Y")
        self.decode = tf.function(self._decode, input_signature=[latent_spec])
        self.encode = tf.function(self._encode, input_signature=[data_spec])
        self.reconstruct = tf.function(self._reconstruct, input_signature=[data_spec])

    def _moments(self, mean: tf.Tensor, variance: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"mean": tf.cast(mean, self.dtype), "variance": tf.cast(variance, self.dtype)}

    def _decode(self, X: tf.Tensor) -> dict[str, tf.Tensor]:
        X = self._checked_width(X, self.model.latent_dim, "decode", "X")
        X = tf.debugging.assert_all_finite(
            X, "decode: X [None, Q] must be finite", name="infinite_or_missing_entries_in_X"
        )
        mean, variance = self.model.predict_y(tf.cast(X, default_float()))
        return self._moments(*self.units.outgoing(mean, variance))

    def _encode(self, Y: tf.Tensor) -> dict[str, tf.Tensor]:
        Y = self._checked_width(Y, self.model.data_dim, "encode", "Y")
        return self._moments(*self._in_chunks(self.inference.latents, Y, self.encode_rows))

    def _reconstruct(self, Y: tf.Tensor) -> dict[str, tf.Tensor]:
        Y = self._checked_width(Y, self.model.data_dim, "reconstruct", "Y")
        moments = self._in_chunks(self.inference.predict, Y, self.reconstruct_rows)
        return self._moments(*self.units.outgoing(*moments))

    def _checked_width(self, values: tf.Tensor, width: int, signature: str, name: str) -> tf.Tensor:
        """``values`` after a run-time check that it has ``width`` columns. A signature called by
        name binds a tensor of any shape, and its static width would let TensorFlow drop a check
        of ``tf.shape(values)[1]``; the element count cannot be known before the call."""
        expected = f"[rows, {width}] {self.dtype.name}"
        if name == "Y":
            expected += " (NaN marks a missing entry)"
        message = f"{signature}: {name} must have shape {expected}; got shape"
        fits = tf.equal(tf.size(values), tf.shape(values)[0] * width)
        # Named for the problem: TensorFlow's error text names the node before the message.
        shown = [message, tf.shape(values)]
        check = tf.debugging.Assert(fits, shown, name=f"wrong_width_of_{name}")
        with tf.control_dependencies([check]):
            return tf.identity(values)

    def _in_chunks(
        self, function: GraphFunction, Y: tf.Tensor, rows: int
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """The moments ``function`` gives for Y [None, D] (the data's units), computed in the
        model's units in consecutive chunks of ``rows`` rows inside the graph
        (:func:`~gpflow_svi_gplvm.prediction.predictive.in_row_chunks`)."""
        return in_row_chunks(function, rows, self._observations(Y))

    def _observations(self, Y: tf.Tensor) -> tf.Tensor:
        """Y [None, D] in the model's precision and units; an infinite entry is an error, as in
        the package (infinity is not "missing": NaN is)."""
        finite = tf.reduce_all(tf.logical_not(tf.math.is_inf(Y)))
        message = "Y has infinite entries; mark missing entries with NaN, not infinity"
        check = tf.debugging.Assert(finite, [message], name="infinite_entries_in_Y")
        with tf.control_dependencies([check]):
            return self.units.incoming(tf.cast(Y, default_float()))


class _Units:
    """The affine map between the data's units and the model's, per column: the model was
    trained on (y - location) / scale. Without a location and scale both maps are the identity
    (and add nothing to the graph)."""

    def __init__(self, location: tf.Tensor | None, scale: tf.Tensor | None):
        self.location, self.scale = location, scale

    @classmethod
    def of(cls, location: np.ndarray | None, scale: np.ndarray | None, width: int) -> _Units:
        """The map of ``location`` and ``scale`` [width] (both or neither), checked."""
        if (location is None) != (scale is None):
            raise ValueError(
                "Pass both location and scale (the data's column means and scales the model was "
                "trained to undo), or neither to serve the model's own units."
            )
        if location is None or scale is None:
            return cls(None, None)
        meaning = f"{width} finite numbers, one per column of Y"
        moments = {
            name: check_finite_array(values, name, (width,), meaning)
            for name, values in (("location", location), ("scale", scale))
        }
        if not np.all(moments["scale"] > 0):
            raise ValueError("scale must be positive in every column (a constant column: 1).")
        return cls(*(tf.constant(v, default_float()) for v in moments.values()))

    @property
    def description(self) -> dict[str, object]:
        """What the export's marker records about the units it takes and returns."""
        if self.location is None or self.scale is None:
            return {"units": MODEL_UNITS}
        return {
            "units": DATA_UNITS,
            "location": self.location.numpy().tolist(),
            "scale": self.scale.numpy().tolist(),
        }

    def incoming(self, Y: tf.Tensor) -> tf.Tensor:
        """Rows [None, D] in the data's units -> in the model's (NaN stays NaN)."""
        return Y if self.location is None else (Y - self.location) / self.scale

    def outgoing(self, mean: tf.Tensor, variance: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """A predictive's moments [None, D] in the model's units -> in the data's."""
        if self.location is None:
            return mean, variance
        return self.location + self.scale * mean, tf.square(self.scale) * variance


def _signatures(module: ServingModule) -> dict:
    """The export's signatures by name (``serving_default`` is ``reconstruct``)."""
    functions = {
        "decode": module.decode,
        "encode": module.encode,
        "reconstruct": module.reconstruct,
        "serving_default": module.reconstruct,
    }
    return {name: function.get_concrete_function() for name, function in functions.items()}


def export_saved_model(
    model: NewRowModel,
    path: str | Path,
    encode_iterations: int = 300,
    learning_rate: float = 0.05,
    num_samples: int = 64,
    seed: int = 0,
    dtype: tf.DType = tf.float64,
    overwrite: bool = False,
    chunk_size: int | None = None,
    location: np.ndarray | None = None,
    scale: np.ndarray | None = None,
) -> Path:
    """Save ``model`` as a SavedModel at ``path`` with the signatures listed in this module.

    Load it anywhere with ``tf.saved_model.load(path)`` and call e.g.
    ``loaded.signatures["reconstruct"](Y=tf.constant(Y))``. The export is written to a hidden
    temporary folder beside ``path`` first, so a failure never damages an existing export. With
    ``overwrite=True`` an earlier export of this package at ``path`` is replaced (swapped in one
    atomic step on Linux, see :mod:`~gpflow_svi_gplvm.export.folder`); anything else there, a
    file or a folder of your own, is a ``ValueError`` and is never deleted.

    ``location`` and ``scale`` [D]: for a model trained on standardised columns
    (y - location) / scale, the export takes and returns the data's own units (see this module's
    "Units"); without them it serves the model's units, with nothing applied.

    A :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM` is exported by its own
    ``export_saved_model`` (raw counts and ``obs`` columns in, into ``path/1/``, TensorFlow
    Serving's layout; :mod:`~gpflow_svi_gplvm.singlecell.storage.serving`), with ``overwrite`` and
    ``dtype`` as given.
    """
    own_export = getattr(model, "export_saved_model", None)
    if own_export is not None:  # a single-cell face, whose cells bring counts and obs columns
        return own_export(path, overwrite=overwrite, dtype=dtype)
    path = check_path(path, "path (where the export goes)")
    overwrite = check_bool(overwrite, "overwrite", "replace an earlier export at path")
    check_destination(path, overwrite)
    check_writable_folder(path.parent, "The export's parent folder")
    settings = (encode_iterations, learning_rate, num_samples, seed, dtype, chunk_size)
    module = ServingModule(model, *settings, location, scale)
    signatures = _signatures(module)
    # The signatures are what is served, and they read only the model's variables. Saving the
    # module itself would also save its tf.functions as the loaded object's methods, which
    # TensorFlow traces a second time in its save context (half of an export's time).
    holder = tf.Module()
    holder.model = model

    def fill(staging: Path) -> dict[str, object]:
        tf.saved_model.save(holder, str(staging), signatures=signatures)
        return _record(module)

    return write_staged(path, fill)


def _record(module: ServingModule) -> dict[str, object]:
    """What an export's marker file records: its shapes, dtype, signatures and units."""
    return {
        "latent_dim": module.model.latent_dim,
        "data_dim": module.model.data_dim,
        "shared_covariance": module.model.shared_covariance,
        "dtype": module.dtype.name,
        "signatures": list(SIGNATURES),
        **module.units.description,
    }
