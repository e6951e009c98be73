"""params.yaml parsing: every key is checked for its type and range, with the file and key named."""

import pytest

from driftmatrix.config import ConfigError, load_params, parse_params


@pytest.mark.parametrize("section, key, value, message", [
    ("train", "epochs", "ten", "train.epochs: expected a whole number, got 'ten'"),
    ("train", "epochs", 2.5, "train.epochs: expected a whole number, got 2.5"),
    ("train", "seeds", 3, "train.seeds: expected a list of whole numbers, e.g. [0, 1], got 3"),
    ("train", "seeds", [0, "1"], "train.seeds: expected a list of whole numbers, e.g. [0, 1], got [0, '1']"),
    ("train", "lr", -1, "train.lr: expected a value > 0, got -1.0"),
    ("train", "lr", "fast", "train.lr: expected a number, got 'fast'"),
    ("train", "batch_size", 0, "train.batch_size: expected a value >= 1, got 0"),
    ("train", "dropout", 1.0, "train.dropout: expected a value in [0, 1), got 1.0"),
    ("train", "device", 0, "train.device: expected text, got 0"),
    ("slicing", "test_fraction", 1.5,
     "slicing.test_fraction: expected a value between 0 and 1, both excluded, got 1.5"),
    ("slicing", "min_samples", True, "slicing.min_samples: expected a whole number, got True"),
    ("synthetic", "per_year", 0, "synthetic.per_year: expected a value >= 1, got 0"),
    ("tracking", "register", "yes", "tracking.register: expected true or false, got 'yes'"),
    ("dataset", "options", [1], "dataset.options: expected a mapping, got [1]"),
])
def test_bad_values_name_the_file_key_and_value(section, key, value, message):
    with pytest.raises(ConfigError) as err:
        parse_params({section: {key: value}, "models": {"MLP-S": {}}}, "p.yaml")
    assert str(err.value) == f"p.yaml: {message}"


def test_model_overrides_are_checked_with_the_model_named():
    with pytest.raises(ConfigError, match=r"^models.CNN-S.epochs: expected a whole number, got 'x'$"):
        parse_params({"models": {"MLP-S": {}, "CNN-S": {"epochs": "x"}}})


def test_good_values_are_typed():
    p = parse_params({"train": {"seeds": [0, 1, 2], "lr": "1e-04", "weight_decay": 0, "epochs": 0,
                                "grad_clip": None, "window": {"sliding": 3}},
                      "models": {"MLP-S": {"lr": 2}}})
    assert p.train.seeds == (0, 1, 2) and p.train.lr == 1e-4 and isinstance(p.train.weight_decay, float)
    assert p.train.epochs == 0 and p.train.grad_clip is None and p.train.window == {"sliding": 3}
    assert p.train_for("MLP-S").lr == 2.0 and isinstance(p.train_for("MLP-S").lr, float)


def test_a_file_that_is_not_yaml_or_not_a_mapping_is_a_clear_error(tmp_path):
    (tmp_path / "broken.yaml").write_text("train: [\n")
    with pytest.raises(ConfigError, match=r"(?s)broken.yaml: not valid YAML: .*line 2, column 1"):
        load_params(tmp_path / "broken.yaml")
    (tmp_path / "list.yaml").write_text("- MLP-S\n")
    with pytest.raises(ConfigError, match=r"list.yaml: expected a mapping of sections"):
        load_params(tmp_path / "list.yaml")
