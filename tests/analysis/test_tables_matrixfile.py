import json

import numpy as np
import pytest

from driftmatrix.analysis import matrixfile
from driftmatrix.analysis.tables import Cohort

HALF_YEARS = [f"{y}-H{h}" for y in range(2014, 2024) for h in (1, 2)]  # K = 20


def _mse_model(name, slope, k=20, seeds=2):
    """Balanced-MSE-like matrix (lower is better) that worsens by ``slope`` per slice ahead."""
    i, j = np.indices((k, k))
    base = 0.5 + slope * np.clip(j - i, 0, None)
    stack = np.stack([base + 0.01 * s for s in range(seeds)])
    return matrixfile.DriftMatrices(model=name, slices=HALF_YEARS[:k], seed_values=stack,
                                    metric="Balanced MSE", unit="", higher_is_better=False,
                                    family="FFN" if name.startswith("F") else "Recurrent",
                                    seeds=list(range(seeds)))


def test_lower_is_better_half_year_cohort():
    c = Cohort({"FFN-S": _mse_model("FFN-S", 0.01), "BiGRU-S": _mse_model("BiGRU-S", 0.03)})
    assert [c.slices[i] for i in c.cutoff_indices] == ["2014-H1", "2017-H1", "2020-H1", "2023-H1"]
    s = c.summaries["FFN-S"]
    assert s.in_distribution == pytest.approx(0.505)
    # mean lag over the 190 future cells of a 20 x 20 matrix is (sum_l l (20 - l)) / 190 = 7
    assert s.future == pytest.approx(0.505 + 0.01 * 7)
    assert s.decay == pytest.approx(0.07)  # positive: worse (higher error) in the future
    assert s.td_score > 0
    assert c.rank_by_future() == ["FFN-S", "BiGRU-S"]  # lower error first
    assert c.rank_by_decay() == ["FFN-S", "BiGRU-S"]
    table = c.cutoff_table(c.cutoff_indices[-1])  # 2023-H1: future = 2023-H2 only, lag 1
    assert table[0][1] == "FFN-S" and table[0][3] == pytest.approx(0.515)
    fam = c.family_cutoffs()
    assert set(fam) == {"FFN", "Recurrent"} and len(fam["FFN"]) == 4


def test_round_trip_our_format(tmp_path):
    m = _mse_model("FFN-S", 0.01, k=4)
    m.seed_values[1, 0, 3] = np.nan  # missing cell in one seed
    matrixfile.write(m, tmp_path / "FFN-S.json")
    (tmp_path / "summary.json").write_text(json.dumps([{"model": "FFN-S"}]))  # skipped
    back = matrixfile.load_folder(tmp_path)["FFN-S"]
    assert back.n_seeds == 2 and back.seeds == [0, 1] and not back.higher_is_better
    assert back.mean[0, 3] == pytest.approx(m.seed_values[0, 0, 3])
    raw = json.loads((tmp_path / "FFN-S.json").read_text())
    assert raw["std"][0][3] is None and raw["values"][0][0] == pytest.approx(0.505)


def test_published_format_reads_as_one_seed(tmp_path):
    d = {"title": "CNN-M", "metric": "Accuracy", "unit": "%", "higherIsBetter": True,
         "slices": ["1905", "1906"], "values": [[60.0, 50.0], [None, 70.0]]}
    (tmp_path / "CNN-M.json").write_text(json.dumps(d))
    m = matrixfile.load_folder(tmp_path)["CNN-M"]
    assert m.n_seeds == 1 and m.family == "CNN" and np.isnan(m.mean[1, 0])
    assert np.isnan(m.std).all()


def test_cohort_rejects_mixed_slices():
    a = _mse_model("FFN-S", 0.01, k=4)
    b = _mse_model("FFN-M", 0.01, k=4)
    b.slices = ["2000", "2001", "2002", "2003"]
    with pytest.raises(ValueError, match="differ in slices"):
        Cohort({"FFN-S": a, "FFN-M": b})
