"""What a training run trained on, recorded in its checkpoints (:class:`TrainingData`): N, D,
the batch size and hashes of the values and gaps, of the rows' observed inputs and of the names
of the data's parts, so that resuming on other data is noticed, not trained on."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import tensorflow as tf

from ..distributed.workers import Workers
from ..rows.facts import RowFacts, hash_block
from ..rows.sparse import row_blocks
from .refusals import ResumeRefusedError

__all__ = ["OtherDataError", "TrainingData"]


class OtherDataError(ResumeRefusedError):
    """A resume refused: the checkpoint ``path`` was written with another batch size
    (``batch_sizes``: the checkpoint's and this run's) or while training on other data
    (``differences``: what differs, named)."""

    def __init__(
        self,
        path: str,
        differences: list[str] | None = None,
        batch_sizes: tuple[int, int] | None = None,
    ) -> None:
        self.path, self.differences, self.batch_sizes = path, list(differences or []), batch_sizes
        if batch_sizes is not None:
            written, this = batch_sizes
            super().__init__(
                f"The checkpoint {{path}} was written with {{batch_size:{written}}}, this run has "
                f"{{batch_size:{this}}}",
                [f"resume with {{batch_size:{written}}}"],
                path=path,
            )
            return
        super().__init__(
            "The checkpoint {path} was written while training on other data ({differences})",
            [
                "resume with the data it was trained on (the same rows in the same order)",
                "pass {allow_new_data:True} to continue from it on this data on purpose",
            ],
            path=path,
            differences="; ".join(self.differences),
        )


class TrainingData(tf.train.experimental.PythonState):
    """What a run trains on, kept in its checkpoints: N, D, the batch size and a hash of the
    values and the gaps of Y, so that resuming on other data is noticed, not trained on.
    Empty for a user's dataset or a run without checkpoints (nothing to compare)."""

    def __init__(self, current: dict) -> None:
        self.current = current

    @classmethod
    def of(
        cls,
        Y: np.ndarray | tf.Tensor,
        batch_size: int,
        rows: np.ndarray | None = None,
        workers: Workers | None = None,
        inputs: np.ndarray | None = None,
        names: dict[str, list[str]] | None = None,
        facts: RowFacts | None = None,
    ) -> TrainingData:
        """The record of training on Y [N, D] with a (checked) ``batch_size``; or, with
        ``workers``, on their shards: Y [n, D] is this worker's, ``rows`` [n] its row numbers,
        and the record (the same on every worker) holds a hash per worker. ``inputs`` [N, R]:
        the rows' observed inputs (covariates, size factors), hashed into the record apart;
        ``names``: what the data's parts are called (e.g. genes, covariate columns), each list
        recorded by its length, first names and a hash, and whole under "names" (so that a
        resume on data lacking some can name them). ``facts``: Y's, whose hash of its
        values and gaps is taken instead of reading Y again (for all rows in order alone)."""
        workers = workers or Workers()
        digest = _values_digest(Y, rows, facts)
        record = {
            "rows": int(workers.sum(Y.shape[0])),
            "columns": int(Y.shape[1]),
            "batch_size": int(batch_size),
            "values and gaps": digest.hex(),
        }
        if workers.count > 1:
            record["values and gaps"], record["shards"] = _agreed(digest, workers)
        if inputs is not None:
            inputs_digest = hashlib.blake2b(np.asarray(inputs).tobytes(), digest_size=16).digest()
            record["covariates and size factors"] = _agreed(inputs_digest, workers)[0]
        for name, values in (names or {}).items():
            record[name] = _listed(values)
        if names:
            record["names"] = {name: list(map(str, values)) for name, values in names.items()}
        return cls(record)

    def serialize(self) -> str:
        return json.dumps(self.current)

    def deserialize(self, string: str) -> None:
        """Nothing to keep: ``restore`` reads the stored record first (:meth:`stored_in`) and
        this run goes on recording its own data."""

    @staticmethod
    def stored_in(reader: tf.train.CheckpointReader) -> dict:
        """The record a checkpoint holds; empty for one written before they held records."""
        key = "data/.ATTRIBUTES/py_state"
        return json.loads(reader.get_tensor(key)) if reader.has_tensor(key) else {}

    def check_names_against(self, stored: dict, path: str) -> None:
        """:meth:`check_against` when this data lacks some of the names (e.g. genes) of the
        checkpoint's (its record ``stored``): a check to make before the model's shapes, which
        such data changes."""
        if _lacking(stored.get("names", {}), self.current.get("names", {})):
            self.check_against(stored, path)

    def check_against(self, stored: dict, path: str) -> None:
        """An :class:`OtherDataError` naming what differs when the checkpoint (its record
        ``stored``) was written on other data, first the names (e.g. genes) it was trained on
        that this data lacks."""
        if "batch_size" in stored and "batch_size" in self.current:
            if stored["batch_size"] != self.current["batch_size"]:
                sizes = (stored["batch_size"], self.current["batch_size"])
                raise OtherDataError(path, batch_sizes=sizes)
        differ = _lacking(stored.get("names", {}), self.current.get("names", {})) + [
            f"{name} {stored[name]} there, {value} here"
            for name, value in self.current.items()
            if name not in ("batch_size", "shards", "run", "names")
            and name in stored
            and stored[name] != value
        ]
        shards = stored.get("shards", [None]), self.current.get("shards", [None])
        if differ and len(shards[0]) == len(shards[1]) > 1:
            odd = [f"worker {i}" for i, (a, b) in enumerate(zip(*shards)) if a != b]
            differ.append(f"the rows of {', '.join(odd)} differ")
        elif differ and len(shards[0]) != len(shards[1]):
            differ.append(f"{len(shards[0])} worker(s) there, {len(shards[1])} here")
        if differ:
            raise OtherDataError(path, differ)


def _values_digest(Y, rows: np.ndarray | None, facts: RowFacts | None) -> bytes:
    """The hash (16 bytes) of Y's values and gaps, and of its ``rows`` [n] when given: that of
    ``facts`` (one pass over Y learnt it: :func:`~gpflow_svi_gplvm.rows.facts.scan_rows`) when
    it holds one and no ``rows`` are hashed, else one more pass's."""
    if rows is None and facts is not None and facts.digest is not None:
        return bytes.fromhex(facts.digest)
    digest = hashlib.blake2b(digest_size=16)
    if rows is not None:
        digest.update(np.asarray(rows, np.int64).tobytes())
    for block in row_blocks(Y):
        hash_block(digest, block, np.isnan(block))
    return digest.digest()


def _agreed(digest: bytes, workers: Workers) -> tuple[str, list[str]]:
    """One worker's hash ``digest`` (16 bytes) as the hash of every worker's together, and each
    worker's (the same on every worker)."""
    if workers.count == 1:
        return digest.hex(), [digest.hex()]
    hashes = workers.stack(np.frombuffer(digest, np.uint8).astype(np.int64))
    shards = [bytes(row.astype(np.uint8)).hex() for row in hashes]
    return hashlib.blake2b("".join(shards).encode()).hexdigest()[:32], shards


def _lacking(written: dict[str, list[str]], held: dict[str, list[str]]) -> list[str]:
    """For each list of names recorded whole in both records, those ``written`` (the
    checkpoint's) that this data's (``held``) lacks, named (the first ten)."""
    lacking = []
    for name in [name for name in written if name in held]:
        here = set(held[name])
        missing = [value for value in written[name] if value not in here]
        if missing:
            more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
            shown = ", ".join(missing[:10]) + more
            lacking.append(
                f"this data lacks {len(missing)} of its {len(written[name])} {name}: {shown}"
            )
    return lacking


def _listed(names: list[str]) -> str:
    """A list of names in a record: its length, first names and a hash of all."""
    digest = hashlib.blake2b("\n".join(map(str, names)).encode(), digest_size=4).hexdigest()
    shown = ", ".join(map(str, names[:3])) + (", ..." if len(names) > 3 else "")
    return f"{len(names)} ({shown}; {digest})"
