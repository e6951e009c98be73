import numpy as np

from driftmatrix.config import SyntheticConfig
from driftmatrix.data.sources.yearbook import read_yearbook
from driftmatrix.data.synthetic import CUE, cue_region, generate, knobs_for, write_dataset


def cue_energy(images: np.ndarray) -> float:
    """Mean high-frequency energy (neighbour differences) inside the cue region."""
    rs, cs = cue_region()
    x = images[:, rs, cs].astype(float).mean(axis=-1)
    return float(np.abs(np.diff(x, axis=1)).mean() + np.abs(np.diff(x, axis=2)).mean())


def test_generation_is_deterministic_and_seeded():
    cfg = SyntheticConfig(years=3, per_year=20)
    a, b = generate(cfg), generate(cfg)
    assert all((x == y).all() for x, y in zip(a, b))
    c = generate(SyntheticConfig(years=3, per_year=20, seed=1))
    assert not (a[0] == c[0]).all()
    images, labels, years = a
    assert images.shape == (60, 32, 32, 3) and images.dtype == np.uint8
    assert sorted(set(years)) == [1950, 1951, 1952] and set(labels) <= {0, 1}


def test_fading_cue_fades_and_label_shift_moves_prevalence():
    images, _, years = generate(SyntheticConfig(years=10, per_year=100, span=10))
    assert cue_energy(images[years == 1950]) > 1.5 * cue_energy(images[years == 1959])
    steady, _, y2 = generate(SyntheticConfig(scenario="none", years=10, per_year=100, span=10))
    assert abs(cue_energy(steady[y2 == 1950]) - cue_energy(steady[y2 == 1959])) < 0.2 * cue_energy(steady[y2 == 1950])
    _, labels, y3 = generate(SyntheticConfig(scenario="label-shift", years=10, per_year=300, span=10))
    assert labels[y3 == 1950].mean() < 0.35 < 0.65 < labels[y3 == 1959].mean()
    assert knobs_for("concept").flip_at == 0.5 and CUE == 4


def test_written_layout_reads_back_through_the_yearbook_reader(tmp_path):
    cfg = SyntheticConfig(years=2, per_year=10)
    assert write_dataset(cfg, tmp_path / "yb") == 20
    mtimes = sorted(p.stat().st_mtime_ns for p in (tmp_path / "yb").rglob("*.png"))
    assert write_dataset(cfg, tmp_path / "yb") == 20  # complete: nothing rewritten
    assert mtimes == sorted(p.stat().st_mtime_ns for p in (tmp_path / "yb").rglob("*.png"))
    result = read_yearbook(tmp_path / "yb")
    images, labels, years = generate(cfg)
    assert result.report.kept == 20 and result.report.total_dropped == 0
    table = result.table.assign(k=result.table["id"].str.rsplit("_", n=1).str[1].astype(int))
    order = table["k"].to_numpy()
    assert (result.images == images[order]).all()  # PNG round trip is lossless
    assert (table["label"].to_numpy() == labels[order]).all()
    assert (table["timestamp"].dt.year.to_numpy() == years[order]).all()


def test_generate_never_writes_into_a_folder_of_real_data(tmp_path):
    from typer.testing import CliRunner

    from driftmatrix.cli import app

    real = tmp_path / "yearbook"
    (real / "F").mkdir(parents=True)
    (real / "F" / "1950_real.png").write_bytes(b"not generated here")
    params = tmp_path / "params.yaml"
    params.write_text(f"dataset: {{path: {real}}}\nmodels: {{MLP-S: {{}}}}\n")
    result = CliRunner().invoke(app, ["data", "generate", "--params", str(params)])
    assert result.exit_code == 0 and "left as it is" in result.output
    assert [p.name for p in real.rglob("*") if p.is_file()] == ["1950_real.png"]


def test_appending_a_year_keeps_every_earlier_image_byte_identical(tmp_path):
    short, longer = SyntheticConfig(years=4, per_year=10), SyntheticConfig(years=5, per_year=10)
    a, b = generate(short), generate(longer)
    assert np.array_equal(a[0], b[0][:40]) and np.array_equal(a[1], b[1][:40])
    write_dataset(short, tmp_path / "yb")
    before = {p.name: p.read_bytes() for p in (tmp_path / "yb").rglob("*.png")}
    write_dataset(longer, tmp_path / "yb")
    after = {p.name: p.read_bytes() for p in (tmp_path / "yb").rglob("*.png")}
    assert len(after) == 50 and all(after[name] == data for name, data in before.items())
    # the schedule is the absolute year's: the default drift runs over 20 years, then stays
    assert cue_energy(generate(SyntheticConfig(years=25, per_year=100))[0][-100:]) < 0.7 * cue_energy(a[0][:10])
