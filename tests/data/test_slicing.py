import numpy as np
import pandas as pd
import pytest

from driftmatrix.config import SlicingConfig
from driftmatrix.data.table import DataError, DatasetMeta
from driftmatrix.learn.score import eval_mask
from driftmatrix.data.slicing import make_slices, period_bins, stratified_split
from driftmatrix.learn.fit import cutoff_train_rows

META = DatasetMeta(name="t", task="binary", input_kind="image", class_names=("F", "M"))


def table(years_counts: dict[int, int], p_m: float = 0.5, seed: int = 0) -> pd.DataFrame:
    rows = []
    for year, n in years_counts.items():
        rng = np.random.default_rng([seed, year])  # a year's rows do not depend on other years
        for k in range(n):
            rows.append({"id": f"{year}-{k}", "timestamp": pd.Timestamp(year=year, month=1 + k % 12, day=1, tz="UTC"),
                         "period": str(year), "source": "x", "label": int(rng.random() < p_m)})
    return pd.DataFrame(rows)


def test_period_labels_year_half_year_and_width():
    ts = pd.Series(pd.to_datetime(["2014-01-05", "2014-07-01", "2015-12-31", "1953-03-01"], utc=True))
    assert list(period_bins(ts, "year")[1]) == ["2014", "2014", "2015", "1953"]
    assert list(period_bins(ts, "half-year")[1]) == ["2014-H1", "2014-H2", "2015-H2", "1953-H1"]
    assert list(period_bins(ts, "year", 5)[1]) == ["2010..2014", "2010..2014", "2015..2019", "1950..1954"]
    with pytest.raises(DataError, match="slicing.period"):
        period_bins(ts, "decade")


def test_small_slices_are_dropped_and_reported():
    rows, manifest = make_slices(table({1950: 30, 1951: 5, 1952: 30}), META, SlicingConfig(min_samples=10))
    assert [s["label"] for s in manifest["slices"]] == ["1950", "1952"]
    assert manifest["dropped"] == [{"label": "1951", "n": 5, "reason": "fewer than min_samples=10 rows"}]
    assert manifest["rows_dropped"] == 5 and len(rows) == 60
    assert sorted(rows["slice"].unique()) == [0, 1]


def test_split_is_stratified_per_slice_and_sizes_add_up():
    rows, manifest = make_slices(table({1950: 200, 1951: 101}, p_m=0.3), META, SlicingConfig())
    for s in manifest["slices"]:
        part = rows[rows["slice"] == s["index"]]
        assert s["n_train"] + s["n_test"] == s["n"] == len(part)
        for cls in (0, 1):
            in_cls = part[part["label"] == cls]
            share = (in_cls["split"] == "test").mean()
            assert abs(share - 0.3) <= 1.0 / len(in_cls) + 1e-9, (s["label"], cls, share)


def test_split_depends_only_on_split_seed_and_the_slice_itself():
    base = table({1950: 80, 1951: 80})
    a, _ = make_slices(base, META, SlicingConfig(split_seed=42))
    b, _ = make_slices(table({1949: 80, 1950: 80, 1951: 80}), META, SlicingConfig(split_seed=42))
    c, _ = make_slices(base, META, SlicingConfig(split_seed=7))
    merged = a.merge(b, on="id", suffixes=("_a", "_b"))
    assert (merged["split_a"] == merged["split_b"]).all()  # another slice appearing changes nothing
    assert not (a["split"].to_numpy() == c["split"].to_numpy()).all()


def test_stratified_split_is_seeded():
    keys = np.array(["a"] * 50 + ["b"] * 50)
    assert (stratified_split(keys, 0.3, 1) == stratified_split(keys, 0.3, 1)).all()
    assert stratified_split(keys, 0.3, 1).sum() == 30


def test_no_training_row_is_ever_scored_as_in_distribution_test():
    rows, manifest = make_slices(table({y: 40 for y in range(1950, 1956)}), META, SlicingConfig())
    slice_ids, split = rows["slice"].to_numpy(), rows["split"].to_numpy()
    K = len(manifest["slices"])
    for i in range(K):
        train = set(cutoff_train_rows(slice_ids, split, i))
        assert train and all(slice_ids[r] <= i and split[r] == "train" for r in train)
        for j in range(K):
            cell = set(np.flatnonzero(eval_mask(slice_ids, split, i, j)))
            assert cell and all(slice_ids[r] == j for r in cell)
            if j <= i:
                assert not (cell & train)
                assert all(split[r] == "test" for r in cell)
            else:
                assert len(cell) == (slice_ids == j).sum()  # future cells use the whole slice
