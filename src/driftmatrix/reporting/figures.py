"""Figures in the paper's conventions: drift matrices with rows = training cutoff, columns =
evaluated slice, time increasing up and to the right, dashed diagonal; one colour scale per cohort
(sequential for scores, zero-centred diverging for deviations). matplotlib is imported lazily (Agg).
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from driftmatrix.analysis.td_score import td_slopes

SEQUENTIAL = "viridis"
DIVERGING = "RdBu"  # red = below the cohort, blue = above (for higher-is-better)
MAX_TICKS = 8


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def value_range(matrices: Sequence[np.ndarray]) -> tuple[float, float]:
    """Shared colour range of a set of matrices (min and max over filled cells)."""
    filled = np.concatenate([np.asarray(m, dtype=float).ravel() for m in matrices])
    filled = filled[~np.isnan(filled)]
    return (0.0, 1.0) if not filled.size else (float(filled.min()), float(filled.max()))


def deviation_span(deviations: Sequence[np.ndarray]) -> float:
    """Half-width of the zero-centred scale: the largest |deviation| over all models."""
    lo, hi = value_range(deviations)
    return max(abs(lo), abs(hi)) or 1.0


def tick_positions(n: int, max_ticks: int = MAX_TICKS) -> list[int]:
    """Thinned tick positions: at most ``max_ticks`` evenly stepped labels (K = 104 -> every 15)."""
    return list(range(0, n, max(1, math.ceil(n / max_ticks))))


def draw_matrix(ax, M, slices: Sequence[str], *, vmin: float, vmax: float, cmap: str,
                title: str = "", labels: bool = True):
    """One drift matrix on ``ax`` (origin lower-left, dashed diagonal); returns the image."""
    import matplotlib as mpl

    M = np.asarray(M, dtype=float)
    k = M.shape[0]
    cm = mpl.colormaps[cmap].with_extremes(bad="#e6e6e6")  # empty cells in light grey
    im = ax.imshow(np.ma.masked_invalid(M), origin="lower", cmap=cm, vmin=vmin, vmax=vmax,
                   interpolation="nearest", aspect="equal")
    ax.plot([-0.5, k - 0.5], [-0.5, k - 0.5], ls="--", lw=0.7, color="black", alpha=0.7)
    ticks = tick_positions(k)
    ax.set(xticks=ticks, yticks=ticks)
    if labels:
        ax.set_xticklabels([slices[t] for t in ticks], rotation=90, fontsize=7)
        ax.set_yticklabels([slices[t] for t in ticks], fontsize=7)
        ax.set_xlabel("evaluated on", fontsize=8)
        ax.set_ylabel("trained up to", fontsize=8)
    else:
        ax.set(xticklabels=[], yticklabels=[])
    if title:
        ax.set_title(title, fontsize=9)
    return im


def matrix_figure(M, slices, *, title: str, vmin: float, vmax: float, cmap: str = SEQUENTIAL,
                  colorbar_label: str = ""):
    """A single heatmap with its colour bar (per-model plots, cohort mean)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    im = draw_matrix(ax, M, slices, vmin=vmin, vmax=vmax, cmap=cmap, title=title)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04).set_label(colorbar_label, fontsize=8)
    fig.tight_layout()
    return fig


def matrix_grid(matrices: Mapping[str, np.ndarray], slices, *, vmin: float, vmax: float,
                cmap: str = SEQUENTIAL, colorbar_label: str = "", ncols: int = 5):
    """All models on one shared scale, one panel each, one colour bar."""
    plt = _plt()
    n = len(matrices)
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.3 * ncols + 0.8, 2.4 * nrows), squeeze=False)
    im = None
    for k, (ax, (name, M)) in enumerate(zip(axes.flat, matrices.items())):
        edge = k % ncols == 0 and k // ncols == nrows - 1
        im = draw_matrix(ax, M, slices, vmin=vmin, vmax=vmax, cmap=cmap, title=name, labels=edge)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout(rect=(0, 0, 0.93, 1))
    cax = fig.add_axes((0.94, 0.15, 0.012, 0.7))
    fig.colorbar(im, cax=cax).set_label(colorbar_label, fontsize=8)
    return fig


def family_colours(families: Mapping[str, str | None]) -> dict[str, tuple]:
    cmap = _plt().get_cmap("tab10")
    return {f: cmap(k % 10) for k, f in enumerate(sorted({f or "other" for f in families.values()}))}


def curves_figure(curves: Mapping, *, title: str, ylabel: str,
                  colours: Mapping[str, tuple] | None = None, styles: Mapping[str, str] | None = None):
    """Forgetting curves F(lag) with mean +- seed std bands (bands only where std is known)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for name, c in curves.items():
        lags = np.arange(len(c.mean))
        colour = (colours or {}).get(name)
        line, = ax.plot(lags, c.mean, lw=1.2, label=name, color=colour, ls=(styles or {}).get(name, "-"))
        if np.any(~np.isnan(c.std)):
            ax.fill_between(lags, c.mean - c.std, c.mean + c.std, color=line.get_color(), alpha=0.15, lw=0)
    ax.set(xlabel="lag (slices between training cutoff and evaluated slice)", ylabel=ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2 if len(curves) > 8 else 1, loc="best", frameon=False)
    fig.tight_layout()
    return fig


def ranking_figure(scores: Mapping[str, tuple[list[str], Mapping[str, float]]], *,
                   colours: Mapping[str, tuple], families: Mapping[str, str | None]):
    """Horizontal bars, one panel per ranking (e.g. by future, by decay), best on top."""
    plt = _plt()
    n = max(len(order) for order, _ in scores.values())
    fig, axes = plt.subplots(1, len(scores), figsize=(5.0 * len(scores), 0.25 * n + 1.2), squeeze=False)
    for ax, (title, (order, values)) in zip(axes.flat, scores.items()):
        y = np.arange(len(order))[::-1]
        ax.barh(y, [values[m] for m in order], color=[colours[families.get(m) or "other"] for m in order])
        ax.set_yticks(y)
        ax.set_yticklabels(order, fontsize=7)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        finite = [values[m] for m in order if not math.isnan(values[m])]
        if finite and min(finite) > 0:
            lo = min(finite)
            ax.set_xlim(lo - 0.1 * (max(finite) - lo + 1e-9) - 1e-9, None)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    fig.legend(handles, list(colours), loc="lower center", ncol=len(colours), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def td_figure(slopes: Mapping[str, np.ndarray], slices, *, colours: Mapping[str, tuple],
              families: Mapping[str, str | None], unit: str):
    """TD(t) per evaluated slice t for every model, coloured by family."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    x = np.arange(len(slices))
    for name, s in slopes.items():
        ax.plot(x, s, lw=0.9, alpha=0.8, color=colours[families.get(name) or "other"])
    ax.axhline(0, color="black", lw=0.6)
    ticks = tick_positions(len(slices))
    ax.set_xticks(ticks)
    ax.set_xticklabels([slices[t] for t in ticks], rotation=90, fontsize=7)
    ax.set(xlabel="evaluated slice t", ylabel=f"TD(t) ({unit or 'score'} per slice)")
    ax.set_title("Temporal degradation slope per evaluated slice (Luu et al.)", fontsize=10)
    handles = [plt.Line2D([], [], color=c) for c in colours.values()]
    ax.legend(handles, list(colours), fontsize=7, frameon=False, ncol=len(colours))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def policy_frontier(rows: Sequence[Mapping[str, str]], metric: str, unit: str, higher_is_better: bool):
    """Retrains against served score per model from ``policies.csv`` rows: the oracle as a line,
    never and periodic(H) as circles, each nested trigger as its own marker."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9.0, 4.2))
    marks = {"estimate": "^", "cumulative": "v", "label": "s", "drift": "D"}
    models = list(dict.fromkeys(r["model"] for r in rows))
    for n, model in enumerate(models):
        c, mine = f"C{n % 10}", [r for r in rows if r["model"] == model and r["score"] != ""]
        line = sorted((float(r["retrains"]), float(r["score"])) for r in mine if r["policy"] == "oracle")
        if line:
            ax.plot(*zip(*line), color=c, lw=1.2, label=f"{model} oracle")
        for r in mine:
            if r["policy"] in ("never", "periodic"):
                ax.scatter([float(r["retrains"])], [float(r["score"])], color=c, s=16, marker="o")
            elif r["policy"] in marks and r["param"] == "nested":
                ax.scatter([float(r["retrains"])], [float(r["score"])], color=c, s=42, marker=marks[r["policy"]],
                           edgecolor="black", lw=0.5)
    handles = [plt.Line2D([], [], color="grey", marker=m, ls="", label=t) for t, m in
               (("periodic / never", "o"), *marks.items())]
    ax.legend(handles=ax.get_legend_handles_labels()[0] + handles, fontsize=7, frameon=False,
              loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_xlabel("retrains (after the first training)")
    ax.set_ylabel(f"served {metric}{' (' + unit + ')' if unit else ''}, {'higher' if higher_is_better else 'lower'} "
                  "is better")
    ax.set_title("Retraining policies: served score against retrains (lag 0 never served)", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def png_bytes(fig, dpi: int = 90) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    _plt().close(fig)
    return buf.getvalue()


def save(fig, path: str | Path, dpi: int = 110) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(fig, dpi))
    return path


# --- the figure set of a cohort (report and matrices stage) ---------------------------------
def scales(cohort) -> dict:
    """Shared colour scales of a cohort; colour maps oriented so that bright / blue = better."""
    hib = cohort.higher_is_better
    return {"range": value_range(list(cohort.means.values())),
            "span": deviation_span(list(cohort.deviations.values())),
            "seq": SEQUENTIAL if hib else SEQUENTIAL + "_r",
            "div": DIVERGING if hib else DIVERGING + "_r"}


def metric_label(cohort) -> str:
    return f"{cohort.metric} ({cohort.unit})" if cohort.unit else cohort.metric


def model_heatmap(cohort, model: str, sc: dict | None = None):
    sc = sc or scales(cohort)
    vmin, vmax = sc["range"]
    return matrix_figure(cohort.means[model], cohort.slices, title=f"{model}: {metric_label(cohort)}",
                         vmin=vmin, vmax=vmax, cmap=sc["seq"], colorbar_label=metric_label(cohort))


def cohort_figures(cohort):
    """(key, caption, figure) for every report figure, generated one at a time."""
    sc = scales(cohort)
    vmin, vmax = sc["range"]
    label = metric_label(cohort)
    colours = family_colours(cohort.families)
    fam = cohort.families
    yield ("cohort_mean", "Cohort-mean matrix: cell-wise mean over all models, at cells every model fills.",
           matrix_figure(cohort.cohort_mean, cohort.slices, title=f"Cohort mean ({len(cohort.models)} models)",
                         vmin=vmin, vmax=vmax, cmap=sc["seq"], colorbar_label=label))
    yield ("matrices", "Drift matrix of every model (seed mean), on one shared scale.",
           matrix_grid(cohort.means, cohort.slices, vmin=vmin, vmax=vmax, cmap=sc["seq"],
                       colorbar_label=label))
    yield ("deviations", "Deviation from the cohort mean, on one zero-centred scale "
                         "(blue = better than the cohort, red = worse).",
           matrix_grid(cohort.deviations, cohort.slices, vmin=-sc["span"], vmax=sc["span"],
                       cmap=sc["div"], colorbar_label=f"deviation ({cohort.unit or cohort.metric})"))
    yield ("forgetting_models", "Forgetting curves per model: mean over training cutoffs of "
                                "M[i, i + lag]; bands = seed std (absent for published matrices).",
           curves_figure(cohort.curves, title="Forgetting curves per model", ylabel=label,
                         colours={m: colours[fam[m] or "other"] for m in cohort.curves},
                         styles={m: ("-", "--", ":", "-.")[k % 4] for k, m in enumerate(cohort.curves)}))
    yield ("forgetting_families", "Forgetting curves per family (mean of the members' curves; band = "
                                  "pooled seed std).",
           curves_figure(cohort.family_curves, title="Forgetting curves per family", ylabel=label,
                         colours=colours))
    fut = {m: s.future for m, s in cohort.summaries.items()}
    dec = {m: s.decay for m, s in cohort.summaries.items()}
    yield ("rankings", "Models ranked by future score and by decay (best on top).",
           ranking_figure({f"Future {label}": (cohort.rank_by_future(), fut),
                           "Decay (smaller = more robust)": (cohort.rank_by_decay(), dec)},
                          colours=colours, families=fam))
    yield ("td_slopes", "TD(t): least-squares slope of the misalignment penalty against the training "
                        "slice index, per evaluated slice t; TD score = mean over t.",
           td_figure({m: td_slopes(M, cohort.higher_is_better) for m, M in cohort.means.items()},
                     cohort.slices, colours=colours, families=fam, unit=cohort.unit))
