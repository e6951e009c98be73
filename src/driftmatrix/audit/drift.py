"""Between-slice drift measures: pure functions on arrays (no I/O), documented in docs/audit.md.

``M[i, j]`` compares slice ``i`` (row) with slice ``j`` (column), as in the drift matrices. Label
shift: Jensen-Shannon divergence and Luu et al.'s ``KL(P_j || P_i)`` on add-``alpha`` smoothed
counts, so a class missing from one slice gives a finite value. Text: overlap of the top-``N``
vocabularies. Vectors: squared MMD with one median-heuristic RBF bandwidth for the whole matrix, so
cells are comparable, and a permutation p-value."""

from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Iterable, Sequence

import numpy as np

TOKEN_RE = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


# --- label shift ------------------------------------------------------------------------------
def smoothed(counts: np.ndarray, alpha: float) -> np.ndarray:
    """Add-``alpha`` smoothed distribution(s) along the last axis; all-zero rows become NaN."""
    counts = np.asarray(counts, dtype=float)
    total = counts.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = (counts + alpha) / (total + alpha * counts.shape[-1])
    return np.where(total > 0, p, np.nan)


def kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p || q) in nats; terms with p = 0 contribute 0; inf if q = 0 where p > 0."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    mask = p > 0
    with np.errstate(divide="ignore"):
        return float(np.sum(p[mask] * (np.log(p[mask]) - np.log(q[mask]))))


def js_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence in bits, in [0, 1]."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    m = 0.5 * (p + q)
    return (0.5 * kl_divergence(p, m) + 0.5 * kl_divergence(q, m)) / np.log(2)


def pairwise(items: Sequence, fn: Callable[[object, object], float]) -> np.ndarray:
    """K x K matrix ``fn(items[i], items[j])``; NaN where either item is missing (None / NaN)."""
    k = len(items)
    out = np.full((k, k), np.nan)
    ok = [x is not None and not (isinstance(x, np.ndarray) and np.isnan(x).any()) for x in items]
    for i in range(k):
        for j in range(k):
            if ok[i] and ok[j]:
                out[i, j] = fn(items[i], items[j])
    return out


def label_js_matrix(counts: np.ndarray) -> np.ndarray:
    """JS divergence between the (unsmoothed) label distributions of every pair of slices."""
    return pairwise(list(smoothed(counts, 0.0)), js_divergence)


def label_kl_matrix(counts: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """``M[i, j] = KL(P_j || P_i)`` on add-``alpha`` smoothed counts (row 0 = Luu et al.'s curve)."""
    return pairwise(list(smoothed(counts, alpha)), lambda p_i, p_j: kl_divergence(p_j, p_i))


def prevalence(counts: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Share of rows per class / category / level in each slice (NaN for empty slices)."""
    n = np.asarray(n, float)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.asarray(counts, float) / n, np.nan)


# --- covariate shift: text --------------------------------------------------------------------
def tokenize(text: str) -> list[str]:
    """Lower-cased runs of Unicode letters/digits, inner apostrophes kept (``don't``)."""
    return TOKEN_RE.findall(text.lower())


def top_vocabulary(texts: Iterable[str], top_n: int = 10_000) -> frozenset[str]:
    """The ``top_n`` most frequent unigrams (ties broken alphabetically, so deterministic)."""
    counts = Counter(tok for t in texts for tok in tokenize(t or ""))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return frozenset(tok for tok, _ in ranked[:top_n])


def vocabulary_overlap(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return float("nan")
    return len(a & b) / min(len(a), len(b))


# --- covariate shift: vectors -----------------------------------------------------------------
def downsample_images(images: np.ndarray, size: int = 8) -> np.ndarray:
    """uint8 (N, H, W, C) -> float (N, size*size*C) in [0, 1] by block averaging."""
    imgs = np.asarray(images, dtype=np.float32) / 255.0
    n, h, w, c = imgs.shape
    fh, fw = max(1, h // size), max(1, w // size)
    oh, ow = h // fh, w // fw
    imgs = imgs[:, : oh * fh, : ow * fw].reshape(n, oh, fh, ow, fw, c).mean(axis=(2, 4))
    return imgs.reshape(n, -1)


def subsample(x: np.ndarray, max_n: int, rng: np.random.Generator) -> np.ndarray:
    x = np.asarray(x)
    if len(x) <= max_n:
        return np.asarray(x, dtype=np.float64)
    return np.asarray(x[np.sort(rng.choice(len(x), max_n, replace=False))], dtype=np.float64)


def sq_distances(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    d = (x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2.0 * x @ y.T
    return np.maximum(d, 0.0)


def median_bandwidth(z: np.ndarray) -> float:
    """Median heuristic: median Euclidean distance over distinct pairs (1.0 if all coincide)."""
    d = np.sqrt(sq_distances(z, z)[np.triu_indices(len(z), k=1)])
    med = float(np.median(d)) if d.size else 0.0
    return med if med > 0 else 1.0


def mmd2_test(x: np.ndarray, y: np.ndarray, sigma: float, permutations: int,
              rng: np.random.Generator) -> tuple[float, float]:
    """(biased squared MMD, permutation p-value) between samples ``x`` and ``y``."""
    z = np.vstack([x, y])
    kern = np.exp(-sq_distances(z, z) / (2.0 * sigma * sigma))
    n, m = len(x), len(y)
    w = np.concatenate([np.full(n, 1.0 / n), np.full(m, -1.0 / m)])
    observed = float(w @ kern @ w)
    if permutations <= 0:
        return max(observed, 0.0), float("nan")
    perms = np.stack([rng.permutation(w) for _ in range(permutations)], axis=1)
    stats = np.einsum("ip,ip->p", kern @ perms, perms)
    pvalue = (1.0 + np.sum(stats >= observed - 1e-12)) / (1.0 + permutations)
    return max(observed, 0.0), float(pvalue)


def mmd_matrix(samples: Sequence[np.ndarray], max_n: int = 300, permutations: int = 200,
               seed: int = 0) -> tuple[np.ndarray, np.ndarray, float]:
    """(K x K squared MMD, K x K p-values, bandwidth), each slice subsampled to ``max_n`` rows once."""
    rng, k = np.random.default_rng(seed), len(samples)
    subs = [subsample(s, max_n, rng) if len(s) else None for s in samples]
    present = [s for s in subs if s is not None]
    mmd, pval = np.full((k, k), np.nan), np.full((k, k), np.nan)
    if not present:
        return mmd, pval, float("nan")
    sigma = median_bandwidth(subsample(np.vstack(present), 1000, rng))
    for i in range(k):
        if subs[i] is None:
            continue
        mmd[i, i], pval[i, i] = 0.0, 1.0
        for j in range(i + 1, k):
            if subs[j] is not None:
                mmd[i, j], pval[i, j] = mmd2_test(subs[i], subs[j], sigma, permutations, rng)
                mmd[j, i], pval[j, i] = mmd[i, j], pval[i, j]
    return mmd, pval, sigma


def window_mmd(x: np.ndarray, slice_ids: np.ndarray, k: int, max_n: int = 300,
               seed: int = 0) -> tuple[np.ndarray, float]:
    """(K x K squared MMD of the window of slices 0..r against slice t > r, NaN elsewhere; bandwidth)."""
    rng = np.random.default_rng(seed)
    order = np.argsort(slice_ids, kind="stable")
    x, ends = np.asarray(x)[order], np.searchsorted(np.asarray(slice_ids)[order], np.arange(k), side="right")
    out = np.full((k, k), np.nan)
    if not len(x):
        return out, float("nan")
    sigma = median_bandwidth(subsample(x, 1000, rng))
    kernel = lambda a, b: float(np.exp(-sq_distances(a, b) / (2.0 * sigma * sigma)).mean())  # noqa: E731
    draw = lambda rows: subsample(rows, max_n, rng).astype(np.float32) if len(rows) else None  # noqa: E731
    wins = [draw(x[:ends[r]]) for r in range(k)]
    periods = [draw(x[ends[t - 1]:ends[t]]) if t else None for t in range(k)]
    own = {id(a): kernel(a, a) for a in wins + periods if a is not None}
    for r, t in zip(*np.triu_indices(k, 1)):
        if wins[r] is not None and periods[t] is not None:
            out[r, t] = max(own[id(wins[r])] + own[id(periods[t])] - 2.0 * kernel(wins[r], periods[t]), 0.0)
    return out, sigma


# --- data drift vs model decay ----------------------------------------------------------------
def correlate(data_drift: np.ndarray, model_matrix: np.ndarray, higher_is_better: bool = True) -> dict:
    """Spearman correlation between drift(i, j) and the model's drop from M[i, i] to M[i, j], j > i
    (signed so a positive drop is worse for either metric direction); pairs with a missing value
    are left out."""
    d = np.asarray(data_drift, float)
    m = np.asarray(model_matrix, float)
    k = min(len(d), len(m))
    xs, ys = [], []
    for i in range(k):
        for j in range(i + 1, k):
            drop = m[i, i] - m[i, j] if higher_is_better else m[i, j] - m[i, i]
            if np.isfinite(d[i, j]) and np.isfinite(drop):
                xs.append(float(d[i, j]))
                ys.append(float(drop))
    out = {"n": len(xs), "spearman": None, "pvalue": None, "drift": xs, "drop": ys}
    if len(xs) >= 3 and np.ptp(xs) > 0 and np.ptp(ys) > 0:
        out["spearman"], out["pvalue"] = spearman(np.array(xs), np.array(ys))
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Spearman's rho (Pearson's r of tie-averaged ranks) and its two-sided t-test p-value, as
    ``scipy.stats.spearmanr`` computes them, with ``scipy.special`` alone (``scipy.stats`` costs a
    report process half a second to import)."""
    import pandas as pd
    from scipy.special import stdtr

    ranks = [pd.Series(v).rank(method="average").to_numpy() for v in (x, y)]  # ties: their mean rank
    rho = float(np.clip(np.corrcoef(*ranks)[0, 1], -1.0, 1.0))
    dof = len(x) - 2
    if abs(rho) == 1.0:
        return rho, 0.0
    t = rho * np.sqrt(dof / ((1.0 + rho) * (1.0 - rho)))
    return rho, float(2.0 * stdtr(dof, -abs(t)))
