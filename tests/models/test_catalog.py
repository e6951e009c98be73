"""models.catalog: every variant is known without torch; networks come from their modules."""

import pickle
import subprocess
import sys

import pytest

from driftmatrix.models.catalog import IMAGE_SHAPES, TEXT_SHAPES, Builder
from driftmatrix.models.catalog import REGISTRY


def test_identity_stages_never_import_torch():
    code = ("import sys\n"
            "from driftmatrix.models.catalog import REGISTRY\n"
            "specs = [(s.family, s.inputs, s.description, dict(s.train_defaults)) for s in REGISTRY.values()]\n"
            "from driftmatrix.stages import matrices, train\nfrom driftmatrix.units import status, experiment\n"
            "assert len(specs) > 30, specs\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_catalogue_tables_are_all_registered_and_builders_pickle():
    assert set(IMAGE_SHAPES) | set(TEXT_SHAPES) | {"Prior"} <= set(REGISTRY)
    spec = REGISTRY["CNN-S"]
    assert isinstance(spec.build, Builder)
    again = pickle.loads(pickle.dumps(spec.build))  # Ray ships specs to workers
    net = again(2, {})
    assert sum(p.numel() for p in net.parameters()) == sum(p.numel() for p in spec.build(2, {}).parameters())


def test_an_unknown_model_name_is_a_config_error_listing_the_known_ones():
    from driftmatrix.config import ConfigError
    from driftmatrix.models.catalog import get

    with pytest.raises(ConfigError, match=r"^unknown model 'CNN-XL'; known: .*\bCNN-S, .*\bViT-S\b"):
        get("CNN-XL")
    assert "CNN-XL" not in REGISTRY and "CNN-S" in REGISTRY  # the mapping itself keeps KeyError semantics
