"""Every named model variant (the paper's names), registered without importing torch, and the way
back from a stored unit to its network (:func:`load_model_folder`).

A spec's ``build`` names the module and class that make the network, loaded only when one is built,
so stages that need only a model's identity never import torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from driftmatrix.errors import ConfigError
from driftmatrix.features.encoders import CATALOGUE
from driftmatrix.models.spec import (BASELINE_FAMILY, CUSTOM_FAMILY, DESCRIPTION, ESTIMATORS, INPUTS, RECORD,
                                     TABULAR_FORMAT, WEIGHTS, Builder, ModelSpec)

REGISTRY: dict[str, ModelSpec] = {}


def register(spec: ModelSpec) -> ModelSpec:
    if spec.inputs not in INPUTS:
        raise ValueError(f"model {spec.name}: inputs {spec.inputs!r} not in {INPUTS}")
    REGISTRY[spec.name] = spec
    return spec


def get(name: str) -> ModelSpec:
    """The spec of a catalog model or one named by import path, else a ConfigError listing them."""
    if name in REGISTRY:
        return REGISTRY[name]
    if name in ESTIMATORS:
        return custom_spec(name)
    raise ConfigError(f"unknown model {name!r}; known: {', '.join(sorted(REGISTRY))}")


def family_of(name: str) -> str | None:
    """Family of a known model, or None for names the catalog does not know."""
    return REGISTRY[name].family if name in REGISTRY else CUSTOM_FAMILY if name in ESTIMATORS else None


def is_baseline(name: str) -> bool:
    """True for reference models such as ``Prior`` (shown beside the others, not averaged in)."""
    return family_of(name) == BASELINE_FAMILY


DEFAULT_ENCODER = "RoBERTa"  # the paper's token states; params `embed.token_encoder` overrides
TEXT_DEFAULTS = {"optimizer": "adamw", "weight_decay": 0.01, "grad_clip": 1.0, "lr": 5e-4}
IMAGE_HEAD_DEFAULTS = {"optimizer": "adam", "lr": 1e-4}
HEAD_FAMILY = {"text": "Frozen", "image": "Transfer"}  # the paper's section names

# name -> (family, class in models.image, its shape)
IMAGE_SHAPES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "MLP-S": ("MLP", "MLP", {"hidden": (32,)}),
    "MLP-M": ("MLP", "MLP", {"hidden": (128, 128)}),
    "MLP-L": ("MLP", "MLP", {"hidden": (512, 512, 512)}),
    "CNN-S": ("CNN", "CNN", {"channels": (32, 64, 128)}),
    "CNN-M": ("CNN", "CNN", {"channels": (48, 96, 192, 192)}),
    "CNN-L": ("CNN", "CNN", {"channels": (64, 128, 256, 256, 512)}),
    "ResNet-S": ("ResNet", "ResNet", {"widths": (18, 36, 72), "blocks": (1, 1, 1)}),
    "ResNet-M": ("ResNet", "ResNet", {"widths": (32, 64, 128), "blocks": (2, 2, 1)}),
    "ResNet-L": ("ResNet", "ResNet", {"widths": (56, 112, 224), "blocks": (2, 2, 2)}),
    "ViT-S": ("ViT", "ViT", {"dim": 64, "depth": 2, "heads": 4, "mlp_ratio": 2.0}),
    "ViT-M": ("ViT", "ViT", {"dim": 128, "depth": 4, "heads": 4, "mlp_ratio": 2.0}),
    "ViT-L": ("ViT", "ViT", {"dim": 192, "depth": 6, "heads": 6, "mlp_ratio": 3.0}),
}

# family -> code revision (ModelSpec.revision): 1 = ViT blocks with MaskDropout (models.dropout)
IMAGE_REVISIONS = {"ViT": 1}

# name -> (family, class in models.text, its shape)
TEXT_SHAPES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "FFN-S": ("FFN", "FFN", {"hidden": 128}),
    "FFN-M": ("FFN", "FFN", {"hidden": 512}),
    "FFN-L": ("FFN", "FFN", {"hidden": 2048}),
    "TextCNN-S": ("TextCNN", "TextCNN", {"filters": 16, "widths": (3, 4), "proj": 64}),
    "TextCNN-M": ("TextCNN", "TextCNN", {"filters": 48, "widths": (3, 4, 5), "proj": 128}),
    "TextCNN-L": ("TextCNN", "TextCNN", {"filters": 192, "widths": (3, 4, 5), "proj": 256}),
    "BiGRU-S": ("Recurrent", "BiRNN", {"hidden": 64, "layers": 1, "cell": "gru"}),
    "BiLSTM-M": ("Recurrent", "BiRNN", {"hidden": 160, "layers": 1, "cell": "lstm"}),
    "BiLSTM-Attn-L": ("Recurrent", "BiRNN", {"hidden": 224, "layers": 2, "cell": "lstm", "attention": True}),
    "TX-S": ("Transformer", "TextTransformer", {"width": 64, "heads": 4, "layers": 1, "ff": 128}),
    "TX-M": ("Transformer", "TextTransformer", {"width": 112, "heads": 4, "layers": 4, "ff": 224}),
    "TX-L": ("Transformer", "TextTransformer", {"width": 192, "heads": 6, "layers": 5, "ff": 512}),
}

for _name, (_family, _cls, _shape) in IMAGE_SHAPES.items():
    register(ModelSpec(name=_name, family=_family, modality="image", inputs="pixels",
                       build=Builder("driftmatrix.models.image", _cls, _shape),
                       description=f"{_cls} {_shape}, trained from raw pixels",
                       revision=IMAGE_REVISIONS.get(_family, 0)))

for _name, (_family, _cls, _shape) in TEXT_SHAPES.items():
    register(ModelSpec(name=_name, family=_family, modality="text", inputs="token_states",
                       build=Builder("driftmatrix.models.text", _cls, _shape), encoder=DEFAULT_ENCODER,
                       train_defaults=TEXT_DEFAULTS,
                       description=f"{_cls} {_shape}, over cached frozen token states"))

for _name, _enc in CATALOGUE.items():
    register(ModelSpec(name=_name, family=HEAD_FAMILY[_enc.modality], modality=_enc.modality, inputs="pooled",
                       build=Builder("driftmatrix.models.frozen"), encoder=_name,
                       train_defaults=TEXT_DEFAULTS if _enc.modality == "text" else IMAGE_HEAD_DEFAULTS,
                       description=f"linear head on frozen {_enc.source} ({_enc.backend}) pooled features"))

register(ModelSpec(name="Prior", family=BASELINE_FAMILY, modality="any", inputs="none",
                   build=Builder("driftmatrix.models.heads"), train_defaults={"epochs": 0},
                   description="constant output = the cutoff's training prior (majority class log-frequencies, "
                               "weighted mean rating, weighted category log-odds); no inputs, no training"))

# name -> (family, kind in models.tabular, training defaults): models of a feature table (source: table)
TABULAR_DEFAULTS = {"epochs": 0, "eval_batch_size": 65536}  # fitted by their library; scored in large batches
TABULAR: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "LogReg": ("Linear", "LogReg", TABULAR_DEFAULTS,
               "logistic regression (linear regression for ratings) on imputed, scaled numbers and one-hot categories"),
    "HistGBT": ("GBDT", "HistGBT", TABULAR_DEFAULTS,
                "scikit-learn histogram gradient boosting with native categorical splits"),
    "LightGBM": ("GBDT", "LightGBM", TABULAR_DEFAULTS, "LightGBM gradient boosting with native categorical splits"),
    "MLP-Tab": ("MLP", "MLP", {"epochs": 8, "batch_size": 256, "lr": 1e-3, "weight_decay": 1e-5,
                               "optimizer": "adamw", "eval_batch_size": 65536},
                "MLP (128, 64) over scaled numbers and one embedding per categorical feature"),
}

for _name, (_family, _kind, _defaults, _text) in TABULAR.items():
    register(ModelSpec(name=_name, family=_family, modality="table", inputs="table",
                       build=Builder("driftmatrix.models.tabular", _kind), train_defaults=_defaults,
                       description=_text))


def custom_spec(name: str) -> ModelSpec:
    """A model named in params.yaml by its estimator's import path: a tabular model of kind ``Custom``."""
    return ModelSpec(name=name, family=CUSTOM_FAMILY, modality="table", inputs="table",
                     build=Builder("driftmatrix.models.tabular", "Custom"), train_defaults=TABULAR_DEFAULTS,
                     description=f"scikit-learn-compatible estimator {ESTIMATORS[name]['estimator']} on the unit's "
                                 "own preprocessing")


#: Tasks of each tabular kind (``models.tabular``): only MLP-Tab's torch losses cover multilabel.
TABULAR_TASKS = {"MLP": ("binary", "multiclass", "multilabel", "regression")}
SINGLE_LABEL = ("binary", "multiclass", "regression")
NEEDS = {"binary": "predict_proba", "multiclass": "predict_proba", "regression": "predict"}


def model_problem(name: str, options: Mapping[str, Any], task: str, where: str,
                  import_estimator: bool = True) -> str | None:
    """Why ``models.<name>`` with estimator ``options`` cannot work, or None (checked before training;
    without ``import_estimator``, only what needs no import of a named estimator)."""
    spec = REGISTRY.get(name) or (custom_spec(name) if name in ESTIMATORS else None)
    if spec is None:
        return None
    if spec.inputs != "table":
        return f"{where}: {sorted(options)} configure tabular models only; {name} is a {spec.modality} model" \
            if options else None
    if options.get("estimator") and spec.family != "Custom":
        return f"{where}: {name} is a catalog model; name your estimator something else (e.g. My{name})"
    if task not in TABULAR_TASKS.get(spec.build.cls, SINGLE_LABEL):
        return (f"{where}: {name} cannot do a {task} task (the tabular {task} model: MLP-Tab); remove it from "
                "models or change dataset.task")
    if spec.build.cls != "Custom" or not import_estimator:
        return None
    import importlib

    path = str(options["estimator"])
    module, _, cls = path.rpartition(".")
    try:
        est = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        return f"{where}.estimator: {path} cannot be imported: {exc}"
    if not (hasattr(est, "fit") and hasattr(est, "get_params")):
        return f"{where}.estimator: {path} is not a scikit-learn-compatible estimator (no fit / get_params)"
    try:
        est = est(**dict(options.get("params") or {}))
    except Exception as exc:  # noqa: BLE001 - any constructor error, named in one line
        return f"{where}.estimator: {path} cannot be built: {type(exc).__name__}: {' '.join(str(exc).split())}"
    if not callable(getattr(est, NEEDS[task], None)):
        return f"{where}.estimator: {path} has no {NEEDS[task]}(), which a {task} task scores with"
    return None


def load_model_folder(folder: str | Path, device: str = "cpu"):
    """Rebuild a stored unit from ``model.json`` and ``model.safetensors`` (no pickle); a tabular
    unit's skops parts build only the types this project trusts for it, never what its own
    ``model.json`` asks for."""
    from safetensors.torch import load_file

    folder = Path(folder)
    desc = json.loads((folder / DESCRIPTION).read_text())
    if desc.get("format") == TABULAR_FORMAT:  # preprocessing + estimator; skops / LightGBM text inside
        from driftmatrix.models import tabular

        info = dict(desc.get("info") or {})
        try:
            model = tabular.TabularModel(str(info.get("kind") or ""), desc["num_outputs"], info, desc.get("dropout"))
            return model.load_state_dict(load_file(str(folder / WEIGHTS), device="cpu"),
                                         tabular.loading_trust(str(desc.get("model")), info)).eval()
        except tabular.UntrustedModel as exc:
            unit = json.loads((folder / RECORD).read_text()).get("unit") if (folder / RECORD).is_file() else None
            where = f"{unit.get('model')} cutoff {unit.get('cutoff')} seed {unit.get('seed')}" if unit else str(folder)
            raise tabular.UntrustedModel(f"{where}: {exc}") from None
    kwargs = {"dropout": desc["dropout"]} if desc.get("dropout") is not None else {}
    model = get(desc["model"]).build(desc["num_outputs"], desc.get("info") or {}, **kwargs)
    model.load_state_dict(load_file(str(folder / WEIGHTS), device=device))
    return model.to(device).eval()
