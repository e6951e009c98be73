"""Tabular models: scikit-learn, LightGBM and a torch MLP over a feature table, each with its own
preprocessing fitted on its unit's training rows only.

A :class:`TabularModel` reads ``features.table.TableInputs`` batches and returns logits, so the
stages treat it like a torch model. Its :class:`Preprocessor` (categories, medians, scaling, one-hot
layout) is fitted on the unit's own training rows, stored with it and applied unchanged to every
period; a category it never saw is "unseen" and counted. Encodings: ``onehot`` (LogReg, named
estimators), ``native`` (HistGBT, LightGBM: the trees' own categorical splits), ``embed`` (MLP-Tab);
each keeps at most :data:`CATEGORY_CAPS` categories per feature (docs/tabular.md). Nothing is
unpickled: skops bytes with an explicit list of trusted types, LightGBM's text format, tensors."""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from driftmatrix.features.table import MISSING, TableInputs

log = logging.getLogger(__name__)

KINDS = ("LogReg", "HistGBT", "LightGBM", "MLP", "Custom")
ENCODING = {"LogReg": "onehot", "HistGBT": "native", "LightGBM": "native", "MLP": "embed", "Custom": "onehot"}
#: Categories kept per column, the most frequent of the window (HistGradientBoosting allows at most
#: 255 bins per categorical feature; a dense one-hot block stays small).
CATEGORY_CAPS = {"native": 250, "onehot": 250}
UNSEEN = -2.0  # one-hot code of a category the unit never saw (no column)
PROB_FLOOR = 1e-7
#: Types beyond skops' defaults that loading a catalog model's skops bytes may build.
TRUSTED = ("numpy.dtype", "functools.partial", "sklearn.utils.validation.check_array",
           "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor")
#: MLP-Tab's network: hidden widths, embedding width cap, dropout.
MLP_HIDDEN = (128, 64)
MLP_EMBED = 16
MLP_DROPOUT = 0.1


class UntrustedModel(ValueError):
    """A stored model would build types outside the trusted list."""


# --- skops ---------------------------------------------------------------------------------------
def dump(obj: Any) -> torch.Tensor:
    """A fitted scikit-learn object as canonical skops bytes in a uint8 tensor (no pickle)."""
    import skops.io as sio

    return bytes_tensor(canonical_skops(sio.dumps(obj)))


def canonical_skops(data: bytes) -> bytes:
    """skops' zip with member names and memo ids renumbered in order of appearance and a fixed
    timestamp: equal objects give equal bytes (weights digests, bit-identical units)."""
    import io
    import re
    import zipfile

    src = zipfile.ZipFile(io.BytesIO(data))
    schema = src.read("schema.json").decode()
    names: dict[str, str] = {}
    for found in re.findall(r'"([0-9]+\.npy)"', schema):
        names.setdefault(found, f"{len(names)}.npy")
    schema = re.sub(r'"([0-9]+\.npy)"', lambda m: f'"{names.get(m.group(1), m.group(1))}"', schema)
    ids: dict[str, str] = {}  # memo ids of shared references (memory addresses too)
    schema = re.sub(r'"__id__": ([0-9]+)', lambda m: f'"__id__": {ids.setdefault(m.group(1), str(len(ids)))}', schema)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        members = [("schema.json", schema.encode())] + sorted(
            (names.get(i.filename, i.filename), src.read(i)) for i in src.infolist() if i.filename != "schema.json")
        for name, payload in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(info, payload)
    return out.getvalue()


def load(blob: torch.Tensor, trusted: Sequence[str]) -> Any:
    """The object of :func:`dump`; a type beyond skops' defaults and ``trusted`` is refused unbuilt."""
    import skops.io as sio

    data = tensor_bytes(blob)
    extra = sorted(set(sio.get_untrusted_types(data=data)) - set(trusted))
    if extra:
        raise UntrustedModel(f"stored model would build untrusted types {extra}; if you trust them, list them "
                             "under the model's `trusted:` in params.yaml")
    return sio.loads(data, trusted=list(trusted))


def loading_trust(model: str, info: Mapping[str, Any]) -> list[str]:
    """The types a stored unit of ``model`` may have skops build, as the loading project decides
    (:data:`TRUSTED`, a named estimator's class and its ``trusted:`` list); a ``model.json``
    asking for more is refused (UntrustedModel)."""
    from driftmatrix.models import spec as custom

    asked = dict(info.get("options") or {})
    ours = dict(custom.ESTIMATORS.get(model) or {}) if info.get("kind") == "Custom" else {}
    allowed = [*TRUSTED, *([ours["estimator"]] if ours.get("estimator") else []), *ours.get("trusted", [])]
    if asked.get("estimator") != ours.get("estimator"):
        raise UntrustedModel(f"{model}: model.json names estimator {asked.get('estimator')!r}, this project's "
                             f"params.yaml {ours.get('estimator')!r}; refused")
    extra = sorted({str(t) for t in asked.get("trusted") or []} - set(allowed))
    if extra:
        raise UntrustedModel(f"{model}: model.json asks to trust {extra}, beyond what this project trusts for it "
                             f"({allowed[len(TRUSTED):] or 'the built-in list only'}); refused")
    return allowed


def bytes_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)


def tensor_bytes(t: torch.Tensor) -> bytes:
    return t.cpu().numpy().tobytes()


# --- preprocessing -------------------------------------------------------------------------------
class Preprocessor:
    """The unit's preprocessing: known categories per column and a fitted ``ColumnTransformer``."""

    def __init__(self, encoding: str, n_num: int, n_cat: int):
        self.encoding, self.n_num, self.n_cat = encoding, n_num, n_cat
        self.known: list[np.ndarray] = []  # per categorical column: sorted hashes of training categories
        self.transformer = None
        self.unseen = 0  # categories met since fitting that training never saw (not missing ones)

    def fit(self, num: np.ndarray, cat: np.ndarray) -> "Preprocessor":
        self.known = []
        for k in range(self.n_cat):
            h = cat[:, k][cat[:, k] != MISSING]
            values, counts = np.unique(h, return_counts=True)
            cap = CATEGORY_CAPS.get(self.encoding, len(values))
            if len(values) > cap:
                values = np.sort(values[np.argsort(-counts, kind="stable")[:cap]])
            self.known.append(values.astype(np.int64))
        self.transformer = self._make().fit(self._matrix(num, cat, count=False))
        self.unseen = 0
        return self

    def codes(self, cat: np.ndarray, count: bool = True) -> np.ndarray:
        """Category hashes -> training codes 0..n-1 (float; NaN = missing, :data:`UNSEEN` = unseen)."""
        out = np.empty(cat.shape, dtype=np.float64)
        for k, known in enumerate(self.known):
            h = cat[:, k]
            pos = np.minimum(np.searchsorted(known, h), max(len(known) - 1, 0))
            hit = known[pos] == h if len(known) else np.zeros(len(h), dtype=bool)
            missing = h == MISSING
            out[:, k] = np.where(hit, pos, np.where(missing, np.nan, UNSEEN))
            if count:
                self.unseen += int((~hit & ~missing).sum())
        return out

    def _matrix(self, num: np.ndarray, cat: np.ndarray, count: bool = True) -> np.ndarray:
        return np.hstack([np.asarray(num, dtype=np.float64), self.codes(cat, count)])

    def _make(self):
        from sklearn.compose import ColumnTransformer
        from sklearn.impute import SimpleImputer
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import OneHotEncoder, StandardScaler

        num_cols = list(range(self.n_num))
        cat_cols = list(range(self.n_num, self.n_num + self.n_cat))
        numbers = Pipeline([("impute", SimpleImputer(strategy="median", add_indicator=True, keep_empty_features=True)),
                            ("scale", StandardScaler())])
        parts = []
        if self.encoding == "native":
            parts = [("num", "passthrough", num_cols), ("cat", "passthrough", cat_cols)]
        elif self.encoding == "embed":
            parts = [("num", numbers, num_cols)]
        else:
            onehot = OneHotEncoder(categories=[np.arange(-1.0, len(k)) for k in self.known], handle_unknown="ignore",
                                   sparse_output=False, dtype=np.float32)
            parts = [("num", numbers, num_cols),
                     ("cat", Pipeline([("impute", SimpleImputer(strategy="constant", fill_value=-1.0)),
                                       ("onehot", onehot)]), cat_cols)]
        return ColumnTransformer([p for p in parts if p[2]], remainder="drop", sparse_threshold=0.0)

    def transform(self, num: np.ndarray, cat: np.ndarray) -> np.ndarray:
        """The estimator's input (float32; native: NaN for missing and unseen categories)."""
        x = self._matrix(num, cat)
        if self.encoding == "native":
            x[:, self.n_num:][x[:, self.n_num:] == UNSEEN] = np.nan
            return x.astype(np.float32)
        if self.transformer is None or x.shape[1] == 0 or (self.encoding == "embed" and self.n_num == 0):
            return np.zeros((len(x), 0), dtype=np.float32)
        return np.asarray(self.transformer.transform(x), dtype=np.float32)

    def embed_indices(self, cat: np.ndarray) -> np.ndarray:
        """Embedding rows of each category (0 = missing or unseen, 1.. = training categories)."""
        codes = self.codes(cat, count=False)
        return np.where(np.isnan(codes) | (codes < 0), 0, codes + 1).astype(np.int64)

    def cardinalities(self) -> list[int]:
        return [len(k) + 1 for k in self.known]

    def state(self) -> dict[str, torch.Tensor]:
        out = {"prep.transformer": dump(self.transformer)}
        out.update({f"prep.known.{k}": torch.as_tensor(v) for k, v in enumerate(self.known)})
        return out

    def load_state(self, state: Mapping[str, torch.Tensor], trusted: Sequence[str]) -> "Preprocessor":
        self.known = [state[f"prep.known.{k}"].cpu().numpy().astype(np.int64) for k in range(self.n_cat)]
        self.transformer = load(state["prep.transformer"], trusted)
        return self


# --- MLP-Tab network -----------------------------------------------------------------------------
class TabMLP(nn.Module):
    """Numbers and one embedding per categorical feature, concatenated, then an MLP."""

    def __init__(self, n_in: int, cardinalities: Sequence[int], num_outputs: int,
                 hidden: Sequence[int] = MLP_HIDDEN, dropout: float = MLP_DROPOUT):
        super().__init__()
        self.embeds = nn.ModuleList(nn.Embedding(c, min(MLP_EMBED, (c + 1) // 2 + 1)) for c in cardinalities)
        width = n_in + sum(e.embedding_dim for e in self.embeds)
        layers: list[nn.Module] = []
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU(), nn.Dropout(dropout)]
            width = h
        layers.append(nn.Linear(width, num_outputs))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        parts = [x] + [e(c[:, k]) for k, e in enumerate(self.embeds)]
        return self.net(torch.cat(parts, dim=1))


class PreparedInputs:
    """One unit's preprocessed rows (MLP-Tab trains on them): ``batch(idx)`` -> (numbers, indices)."""

    def __init__(self, x: np.ndarray, c: np.ndarray, device="cpu"):
        self.x = torch.as_tensor(x).to(device)
        self.c = torch.as_tensor(c).to(device)

    def __len__(self) -> int:
        return len(self.x)

    def batch(self, idx: torch.Tensor):
        idx = idx.to(self.x.device)
        return self.x[idx], self.c[idx]


# --- the model -----------------------------------------------------------------------------------
def estimator_class(path: str):
    """The class an import path names (``package.module.Class``)."""
    import importlib

    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"estimator {path!r} cannot be imported: {exc}") from None


class TabularModel:
    """One unit's tabular model: preprocessing plus an estimator; ``(num, cat)`` -> float32 logits."""

    def __init__(self, kind: str, num_outputs: int, info: Mapping[str, Any], dropout: float | None = None):
        if kind not in KINDS:
            raise ValueError(f"unknown tabular model kind {kind!r}")
        self.kind, self.num_outputs, self.info = kind, int(num_outputs), dict(info)
        self.task = str(info.get("task", "binary"))
        self.options = dict(info.get("options") or {})
        self.dropout = MLP_DROPOUT if dropout is None else dropout
        self.encoding = self.options.get("encoding") or ENCODING[kind]
        self.prep = Preprocessor(self.encoding, len(info.get("numeric", ())), len(info.get("categorical", ())))
        self.estimator = None  # scikit-learn estimator, LightGBM booster or TabMLP
        self.constant: np.ndarray | None = None  # logits when the window has a single class
        self.device = torch.device("cpu")
        self.fit_summary = ""  # how the library fit went (training logs it); "" for MLP-Tab (epochs)

    # torch-like surface used by the stages
    def eval(self) -> "TabularModel":
        if isinstance(self.estimator, nn.Module):
            self.estimator.eval()
        return self

    def train(self, mode: bool = True) -> "TabularModel":
        if isinstance(self.estimator, nn.Module):
            self.estimator.train(mode)
        return self

    def to(self, device) -> "TabularModel":
        self.device = torch.device(device)
        if isinstance(self.estimator, nn.Module):
            self.estimator.to(self.device)
        return self

    @property
    def unseen(self) -> int:
        return self.prep.unseen

    @property
    def trusted(self) -> list[str]:
        extra = [self.options["estimator"]] if self.options.get("estimator") else []
        return [*TRUSTED, *extra, *self.options.get("trusted", [])]

    # fitting
    def fit(self, inputs: TableInputs, rows: np.ndarray, targets: np.ndarray, cfg, seed: int, device,
            on_epoch=None, loop=None) -> list[float]:
        """Fit preprocessing and model on the unit's training ``rows`` only."""
        num, cat = (t.numpy() for t in inputs.batch(torch.as_tensor(np.asarray(rows), dtype=torch.long)))
        y = np.asarray(targets)[rows]
        self.prep.fit(num, cat)
        if self.task in ("binary", "multiclass") and len(np.unique(y)) < 2:
            from driftmatrix.models.heads import prior_bias

            self.constant = prior_bias(self.task, y, self.num_outputs).astype(np.float32)
            self.fit_summary = "one class in the window: its prior, nothing fitted"
            return []
        threads = max(torch.get_num_threads(), 1)
        if self.kind == "MLP":
            return self._fit_mlp(num, cat, y, cfg, seed, device, on_epoch, loop)
        x = self.prep.transform(num, cat)
        weights = _level_weights(y) if self.task == "regression" else None
        if self.kind == "LightGBM":
            self.estimator = _fit_lightgbm(x, y, self.task, self.num_outputs, self.prep.n_num, self.options, seed,
                                           threads, weights)
            self.fit_summary = f"LightGBM, {self.estimator.current_iteration()} boosting rounds"
            return []
        from threadpoolctl import threadpool_limits

        self.estimator = self._make_estimator(seed)
        with threadpool_limits(limits=threads):
            try:
                self.estimator.fit(x, y, sample_weight=weights) if weights is not None else self.estimator.fit(x, y)
            except TypeError:  # an estimator without sample weights
                self.estimator.fit(x, y)
        load(dump(self.estimator), self.trusted)  # fails here, not at scoring, when a type is untrusted
        self.fit_summary = describe_fit(self.estimator)
        return []

    def _make_estimator(self, seed: int):
        params = dict(self.options.get("params") or {})
        classify = self.task in ("binary", "multiclass")
        if self.kind == "LogReg":
            from sklearn.linear_model import LogisticRegression, Ridge

            est = LogisticRegression(max_iter=1000) if classify else Ridge()
        elif self.kind == "HistGBT":
            from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

            mask = [False] * self.prep.n_num + [True] * self.prep.n_cat
            cls = HistGradientBoostingClassifier if classify else HistGradientBoostingRegressor
            est = cls(categorical_features=mask if any(mask) else None, early_stopping=False)
        else:
            est = estimator_class(self.options["estimator"])()
        est.set_params(**params)
        if "random_state" in est.get_params():
            est.set_params(random_state=int(seed))
        return est

    def _fit_mlp(self, num, cat, y, cfg, seed, device, on_epoch, fit) -> list[float]:
        from driftmatrix.models.heads import init_output_bias
        from driftmatrix.learn.tasks import make_loss

        x, c = self.prep.transform(num, cat), self.prep.embed_indices(cat)
        torch.manual_seed(seed)
        self.estimator = TabMLP(x.shape[1], self.prep.cardinalities(), self.num_outputs,
                                dropout=self.dropout).to(device)
        init_output_bias(self.estimator, self.task, y)
        classes = self.task in ("binary", "multiclass")
        targets = torch.as_tensor(y.astype(np.int64 if classes else np.float32)).to(device)
        return fit(self.estimator, PreparedInputs(x, c, device), targets, np.arange(len(y)), cfg,
                   make_loss(self.task, y), seed, device, on_epoch)

    # predicting
    def __call__(self, num: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(self.predict_arrays(num.cpu().numpy(), cat.cpu().numpy()))

    def predict_arrays(self, num: np.ndarray, cat: np.ndarray) -> np.ndarray:
        """Logits (float32, N x outputs) of numeric values and category hashes."""
        if self.constant is not None:
            self.prep.codes(cat)  # counts unseen categories all the same
            return np.tile(self.constant, (len(num), 1))
        if self.kind == "MLP":
            x = torch.as_tensor(self.prep.transform(num, cat)).to(self.device)
            c = torch.as_tensor(self.prep.embed_indices(cat)).to(self.device)
            with torch.inference_mode():
                return self.estimator(x, c).float().cpu().numpy()
        x = self.prep.transform(num, cat)
        if self.kind == "LightGBM":
            out = np.asarray(self.estimator.predict(x, num_threads=1))
            if self.task == "regression":
                return out.reshape(-1, 1).astype(np.float32)
            probs = np.stack([1 - out, out], axis=1) if out.ndim == 1 else out
            return np.log(np.clip(probs, PROB_FLOOR, 1.0)).astype(np.float32)
        if self.task == "regression":
            return np.asarray(self.estimator.predict(x), dtype=np.float32).reshape(-1, 1)
        probs = np.full((len(x), self.num_outputs), 0.0)
        probs[:, np.asarray(self.estimator.classes_, dtype=np.int64)] = self.estimator.predict_proba(x)
        return np.log(np.clip(probs, PROB_FLOOR, 1.0)).astype(np.float32)

    # storing
    def state_dict(self) -> dict[str, torch.Tensor]:
        """Tensors only (safetensors): skops bytes, LightGBM text, network weights."""
        state = self.prep.state()
        if self.constant is not None:
            state["constant"] = torch.as_tensor(self.constant)
        elif self.kind == "MLP":
            state["mlp.shape"] = torch.as_tensor([self.estimator.net[0].in_features
                                                  - sum(e.embedding_dim for e in self.estimator.embeds)],
                                                 dtype=torch.int64)
            state.update({f"mlp.{k}": v.detach().cpu() for k, v in self.estimator.state_dict().items()})
        elif self.kind == "LightGBM":
            state["lightgbm.txt"] = bytes_tensor(self.estimator.model_to_string().encode())
        else:
            state["estimator.skops"] = dump(self.estimator)
        return state

    def load_state_dict(self, state: Mapping[str, torch.Tensor], trusted: Sequence[str] | None = None) -> "TabularModel":
        """Rebuild from :meth:`state_dict` (``trusted``: default this model's own list)."""
        trusted = list(trusted if trusted is not None else self.trusted)
        self.prep.load_state(state, trusted)
        if "constant" in state:
            self.constant = state["constant"].cpu().numpy()
        elif self.kind == "MLP":
            n_in = int(state["mlp.shape"][0])
            self.estimator = TabMLP(n_in, self.prep.cardinalities(), self.num_outputs, dropout=self.dropout)
            self.estimator.load_state_dict({k.removeprefix("mlp."): v for k, v in state.items()
                                            if k.startswith("mlp.") and k != "mlp.shape"})
            self.estimator.to(self.device).eval()
        elif self.kind == "LightGBM":
            import lightgbm

            self.estimator = lightgbm.Booster(model_str=tensor_bytes(state["lightgbm.txt"]).decode())
        else:
            self.estimator = load(state["estimator.skops"], trusted)
        return self

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "encoding": self.encoding, "options": self.options}


def capped_features(kind: str, options: Mapping[str, Any], categorical: Sequence[str], cat: np.ndarray) -> list[str]:
    """One line per categorical feature with more categories than its encoding keeps."""
    encoding = options.get("encoding") or ENCODING[kind]
    cap = CATEGORY_CAPS.get(encoding)
    counts = [len(np.unique(cat[:, k][cat[:, k] != MISSING])) for k in range(len(categorical))] if cap else []
    return [f"feature {name!r}: {n} categories; {encoding} encoding keeps the {cap} most frequent of each training "
            "window, the rest count as unseen" for name, n in zip(categorical, counts) if n > cap]


def describe_fit(est) -> str:
    """``LogisticRegression, 23 iterations`` (``n_iter_``), or ``<name>, fitted`` when it reports none."""
    n = getattr(est, "n_iter_", None)
    return f"{type(est).__name__}, {int(np.max(n))} iterations" if n is not None else f"{type(est).__name__}, fitted"


def _level_weights(y: np.ndarray) -> np.ndarray:
    """Regression sample weights ``n / n_r`` per rating level (the paper's balanced loss)."""
    from driftmatrix.learn.tasks import level_weights

    levels, weights = level_weights(y)
    return weights[np.searchsorted(levels, np.round(y).astype(np.int64))].astype(np.float64)


#: LightGBM settings of the catalog entry (``params`` in params.yaml override them).
LIGHTGBM_DEFAULTS = {"num_boost_round": 200, "learning_rate": 0.05, "num_leaves": 31, "min_data_in_leaf": 20,
                     "max_cat_to_onehot": 8, "verbose": -1}


def _fit_lightgbm(x, y, task, num_outputs, n_num, options, seed, threads, weights):
    import lightgbm

    params = {**LIGHTGBM_DEFAULTS, **dict(options.get("params") or {})}
    rounds = int(params.pop("num_boost_round", params.pop("n_estimators", 200)))
    objective = {"binary": {"objective": "binary"}, "multiclass": {"objective": "multiclass", "num_class": num_outputs},
                 "regression": {"objective": "regression"}}[task]
    params.update(objective, seed=int(seed), num_threads=int(threads), deterministic=True, force_row_wise=True)
    cats = list(range(n_num, x.shape[1]))
    data = lightgbm.Dataset(x, label=y, weight=weights, categorical_feature=cats or "auto", free_raw_data=True,
                            params={"verbose": -1})
    return lightgbm.train(params, data, num_boost_round=rounds)


def build(cls: str, shape: Mapping[str, Any], num_outputs: int, info: Mapping[str, Any] | None = None,
          dropout: float | None = None) -> TabularModel:
    """An unfitted tabular model of kind ``cls`` (a catalogue entry or an estimator named in params.yaml)."""
    return TabularModel(cls, num_outputs, info or {}, dropout)
