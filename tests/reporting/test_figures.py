import numpy as np
import pytest

from driftmatrix.analysis.matrixfile import DriftMatrices
from driftmatrix.analysis.tables import Cohort
from driftmatrix.reporting import figures


def test_tick_thinning_for_long_timelines():
    assert figures.tick_positions(104) == list(range(0, 104, 13))
    assert figures.tick_positions(5) == [0, 1, 2, 3, 4]


def test_shared_scales():
    a = np.array([[1.0, np.nan], [3.0, 4.0]])
    b = np.array([[-2.0, 0.5], [np.nan, 2.0]])
    assert figures.value_range([a, b]) == (-2.0, 4.0)
    assert figures.deviation_span([a, b]) == 4.0
    assert figures.value_range([np.full((2, 2), np.nan)]) == (0.0, 1.0)


def test_heatmap_orientation_and_diagonal():
    """Origin lower-left: row 0 (earliest cutoff) at the bottom; dashed diagonal drawn."""
    M = np.arange(9, dtype=float).reshape(3, 3)
    M[0, 2] = np.nan
    fig = figures.matrix_figure(M, ["a", "b", "c"], title="t", vmin=0, vmax=8)
    ax = fig.axes[0]
    im = ax.images[0]
    assert im.origin == "lower"
    assert ax.get_ylim()[0] < ax.get_ylim()[1]  # y grows upward
    assert any(line.get_linestyle() == "--" for line in ax.lines)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    png = figures.png_bytes(fig)
    assert png[:4] == b"\x89PNG"


@pytest.mark.parametrize("hib", [True, False])
def test_cohort_figure_set(hib):
    slices = [str(2000 + k) for k in range(6)]
    rng = np.random.default_rng(0)
    models = {name: DriftMatrices(name, slices, rng.uniform(50, 90, (2, 6, 6)), higher_is_better=hib,
                                  family=fam)
              for name, fam in (("MLP-S", "MLP"), ("CNN-S", "CNN"), ("CNN-M", "CNN"))}
    cohort = Cohort(models)
    figs = list(figures.cohort_figures(cohort))
    assert [k for k, _, _ in figs] == ["cohort_mean", "matrices", "deviations", "forgetting_models",
                                       "forgetting_families", "rankings", "td_slopes"]
    dev = dict((k, f) for k, _, f in figs)["deviations"]
    im = dev.axes[0].images[0]
    lo, hi = im.get_clim()
    assert lo == -hi  # zero-centred
    assert im.get_cmap().name.startswith("RdBu")
    for _, _, fig in figs:
        figures.png_bytes(fig, dpi=40)
