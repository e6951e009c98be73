"""A drift-matrix cell from a model's outputs on its rows (pure): the metric, the forward-pass
statistics the label-free estimators read, and each held-out row's correctness."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np



def eval_mask(slice_ids: np.ndarray, split: np.ndarray, cutoff: int, j: int) -> np.ndarray:
    """Rows of the evaluation set of cell (cutoff, j)."""
    in_slice = slice_ids == j
    return in_slice & (split == "test") if j <= cutoff else in_slice


def score_cell(outputs: np.ndarray, targets: np.ndarray, task: str,
               categories: tuple[str, ...] = (), per_row: bool = False, metric: str = "accuracy") -> dict[str, Any]:
    """One cell from the outputs on its evaluation rows (pure): value (None if empty), n, left out,
    and (classification) :func:`forward_stats`, with ``per_row`` also :func:`row_correctness`
    (held-out cells, which input-space importance weighting reweights row by row)."""
    from driftmatrix.learn.tasks import cell_score

    value, left = cell_score(task, outputs, targets, categories, metric)
    cell = {"value": None if np.isnan(value) else value, "n_eval": int(len(targets)), "left_out": left}
    stats = forward_stats(outputs, targets, task)
    if stats is not None:
        cell["stats"] = {**stats, **row_correctness(outputs, targets)} if per_row else stats
    return cell


def row_correctness(outputs: np.ndarray, targets: np.ndarray) -> dict[str, Any]:
    """Each row's correctness as ``right_bits`` (base64 ``np.packbits``, 1 bit a row) and ``right_n``."""
    import base64

    right = np.asarray(outputs).argmax(axis=1) == np.asarray(targets, dtype=np.int64)
    return {"right_bits": base64.b64encode(np.packbits(right)).decode("ascii"), "right_n": int(len(right))}


def decode_correctness(stats: Mapping[str, Any]) -> np.ndarray | None:
    """The bool array :func:`row_correctness` stored (None when the cell has none)."""
    import base64

    if "right_bits" not in stats:
        return None
    bits = np.frombuffer(base64.b64decode(stats["right_bits"]), dtype=np.uint8)
    return np.unpackbits(bits, count=int(stats["right_n"])).astype(bool)


#: Confidence bins of :func:`forward_stats`: x = -log10(1 - max probability) in steps of
#: ``CONF_STEP`` up to ``CONF_BINS`` bins (the last holds everything above), fine where a trained
#: model's confidences crowd (0.99, 0.999) and about 0.06 wide at 0.5.
CONF_STEP = 0.025
CONF_BINS = 320


def confidence_bin(conf: np.ndarray) -> np.ndarray:
    """Bin index of each max-probability (:data:`CONF_STEP`, :data:`CONF_BINS`)."""
    x = -np.log10(np.maximum(1.0 - np.asarray(conf, dtype=np.float64), 1e-12))
    return np.clip(np.floor(x / CONF_STEP), 0, CONF_BINS - 1).astype(np.int64)


def forward_stats(outputs: np.ndarray, targets: np.ndarray | None, task: str) -> dict[str, Any] | None:
    """What label-free estimators need from one cell's forward pass, in a size that does not grow
    with its rows (classification only; None otherwise): ``hist`` over (predicted class,
    confidence bin) with a ``correct`` column, ``pred``, ``confusion``, ``conf_sum``,
    ``conf_var`` and ``prob_sum``. Only ``confusion`` and ``correct`` use labels; ``targets``
    None leaves them out."""
    if task not in ("binary", "multiclass") or len(outputs) == 0:
        return None
    logits = np.asarray(outputs, dtype=np.float64)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    n_classes = probs.shape[1]
    pred, conf = probs.argmax(axis=1), probs.max(axis=1)
    flat = pred * CONF_BINS + confidence_bin(conf)
    size = n_classes * CONF_BINS
    counts = np.bincount(flat, minlength=size)
    used = np.flatnonzero(counts)
    out = {"hist": [[int(f // CONF_BINS), int(f % CONF_BINS), int(counts[f])] for f in used],
           "pred": np.bincount(pred, minlength=n_classes).tolist(), "conf_sum": float(conf.sum()),
           "conf_var": float((conf * (1.0 - conf)).sum()), "prob_sum": probs.sum(axis=0).tolist()}
    if targets is not None:
        truth = np.asarray(targets, dtype=np.int64)
        right = np.bincount(flat, weights=pred == truth, minlength=size)
        for row in out["hist"]:
            row.append(int(right[row[0] * CONF_BINS + row[1]]))
        out["confusion"] = np.bincount(truth * n_classes + pred, minlength=n_classes * n_classes).reshape(
            n_classes, n_classes).tolist()
    return out


def row_summary(values: list[float | None], cutoff: int) -> dict[str, float]:
    """The run's own in-distribution score M[i, i] and mean future score (j > i)."""
    out = {}
    if values[cutoff] is not None:
        out["in_distribution"] = values[cutoff]
    future = [v for v in values[cutoff + 1:] if v is not None]
    if future:
        out["future_mean"] = float(np.mean(future))
    return out


class EvalBatches:
    """Each evaluation set's input batches, made once per process and reused by every checkpoint
    that scores it, up to ``budget`` bytes; the tensors are the same either way, so scores are
    unchanged."""

    BUDGET = 512 << 20

    def __init__(self, inputs, batch_size: int, budget: int = BUDGET):
        self.inputs, self.batch_size, self.left = inputs, batch_size, budget
        self.kept: dict[tuple[int, str], list] = {}

    def get(self, j: int, evalset: str, rows: np.ndarray):
        from driftmatrix.learn.fit import input_batches

        if (j, evalset) in self.kept:
            return self.kept[j, evalset]
        batches = list(input_batches(self.inputs, self.batch_size, rows))
        size = sum(t.element_size() * t.nelement() for batch in batches for t in batch)
        if size <= self.left:
            self.kept[j, evalset], self.left = batches, self.left - size
        return batches


