"""Great Expectations suites per slice: one ephemeral context per run, no project folder.

Batches per slice (:attr:`GXRunner.FRAMES`): its rows, then frames computed in pandas and range-checked
by GX: ``schema`` (dtype kind per column: GX's type expectations do not know pandas 3 dtypes), ``classes``
and ``features``. Each expectation's ``meta`` holds what :func:`record` reports (docs/audit.md)."""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from driftmatrix.audit.slices import Slices, allowed_values, axis_names, counts_by_slice, label_counts, label_levels
from driftmatrix.config import ConfigError, build

CHECKS = ("columns", "types", "not_null", "label_set", "split_set", "min_rows", "timestamp_in_period",
          "unique_id", "id_in_one_slice", "classes_present", "classes_in_slice", "class_share", "share_vs_history",
          "split_stratification", "missing_share", "unseen_share")
DEFAULT_CRITICAL = ("columns", "types", "not_null", "label_set", "split_set", "min_rows",
                    "timestamp_in_period", "unique_id", "id_in_one_slice", "classes_present", "split_stratification")
ELSEWHERE = "_id_in_other_slice"  # derived column: the row's id also occurs in another slice
KINDS = {"string": "string", "datetime[UTC]": "datetime[UTC]", "integer": "integer", "numeric": "integer|float"}


@dataclass(frozen=True)
class ValidationConfig:
    """``params.yaml`` section ``validation:`` (all keys optional; see docs/audit.md)."""

    min_rows: int = 20
    share_min: float = 0.0
    share_max: float = 1.0
    max_change: float | None = 0.25
    split_tolerance: float = 0.1
    critical: tuple[str, ...] = DEFAULT_CRITICAL
    override: tuple[str, ...] = ()
    label_values: tuple[Any, ...] | None = None
    max_examples: int = 5
    max_missing: float = 0.5  # feature tables: share of a feature's values missing in a slice
    max_unseen: float = 0.1  # feature tables: share of a slice's categories absent from the first slice

    @classmethod
    def from_params(cls, raw: Mapping[str, Any] | None) -> "ValidationConfig":
        where = "params.yaml: validation"
        sec = build(_Section, raw, where)
        feats = build(_FeatureLimits, sec.features, f"{where}.features")
        critical = list(CHECKS) if sec.critical == "all" else list(sec.critical or [])
        bad = sorted(set(critical) - set(CHECKS))
        if bad:
            raise ConfigError(f"{where}.critical: unknown check(s) {bad}; expected some of {list(CHECKS)}")
        override = [] if sec.override is False or sec.override is None else sec.override
        if not isinstance(override, (list, tuple)) or not all(isinstance(o, str) and ":" in o for o in override):
            raise ConfigError(f"{where}.override: expected false or a list of \"<slice>:<check>\" strings")
        share, relative = dict(sec.class_share or {}), dict(sec.relative or {})
        max_change = relative.get("max_change", cls.max_change)
        return cls(min_rows=sec.min_rows, share_min=float(share.get("min", cls.share_min)),
                   share_max=float(share.get("max", cls.share_max)),
                   max_change=None if max_change is None else float(max_change),
                   split_tolerance=sec.split_tolerance, critical=tuple(critical), override=tuple(override),
                   label_values=tuple(sec.label_values) if sec.label_values else None,
                   max_missing=feats.max_missing, max_unseen=feats.max_unseen)

    def is_critical(self, key: str) -> bool:
        return key.split(":", 1)[0] in self.critical


@dataclass(frozen=True)
class _Section:  # validation: as written in params.yaml, for config.build
    min_rows: int = ValidationConfig.min_rows
    class_share: Mapping[str, Any] | None = None  # {min, max}
    relative: Mapping[str, Any] | None = None  # {max_change}
    split_tolerance: float = ValidationConfig.split_tolerance
    critical: Any = DEFAULT_CRITICAL  # a list of CHECKS, or "all"
    override: Any = False
    label_values: Any = None
    features: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class _FeatureLimits:
    max_missing: float = ValidationConfig.max_missing
    max_unseen: float = ValidationConfig.max_unseen


# --- pure helpers (pandas) ------------------------------------------------------------------
def dtype_kind(series: pd.Series) -> str:
    dt = series.dtype
    if isinstance(dt, pd.DatetimeTZDtype):
        return "datetime[UTC]" if str(dt.tz) == "UTC" else f"datetime[{dt.tz}]"
    types = pd.api.types
    for test, kind in ((types.is_datetime64_dtype, "datetime[naive]"), (types.is_bool_dtype, "bool"),
                       (types.is_integer_dtype, "integer"), (types.is_float_dtype, "float"),
                       (types.is_string_dtype, "string")):
        if test(dt):
            return kind
    return str(dt)


def expected_kinds(slices: Slices) -> dict[str, str]:
    """Accepted dtype kind per required column ('a|b' = either)."""
    meta = slices.meta
    label_kind = KINDS["numeric"] if meta.task == "regression" else KINDS["integer"]
    kinds = {"id": "string", "timestamp": "datetime[UTC]", "period": "string", "source": "string",
             "slice": "integer", "split": "string"}
    kinds.update({c: label_kind for c in meta.label_columns})
    if meta.input_kind == "text":
        kinds["text"] = "string"
    kinds.update(feature_kinds(meta))
    return kinds


def feature_kinds(meta) -> dict[str, str]:
    """Accepted dtype kind of each feature column (numbers: float, categories: text)."""
    from driftmatrix.data.table import feature_column

    return {**{feature_column(f): KINDS["numeric"] for f in meta.numeric},
            **{feature_column(f): "string" for f in meta.categorical}}


def feature_frame(slices: Slices, index: int, first: Mapping[str, set]) -> pd.DataFrame:
    """Per feature of slice ``index``: missing share and (categories) the share the first slice lacked."""
    from driftmatrix.data.table import feature_column

    frame, meta = slices.frame(index), slices.meta
    out = []
    for f in meta.features:
        col = frame[feature_column(f)]
        present = col.dropna()
        unseen = float((~present.astype(str).isin(first[f])).mean()) if f in first and len(present) else 0.0
        out.append({"feature": f, "kind": "categorical" if f in first else "numeric",
                    "missing_share": float(col.isna().mean()) if len(col) else 0.0, "unseen_share": unseen})
    return pd.DataFrame(out)


def feature_expectations(gx: Any, feats: pd.DataFrame, index: int, cfg: ValidationConfig, first_label: str) -> list:
    out = [_expect(gx, "ExpectColumnValuesToBeBetween", "missing_share", f"missing share <= {cfg.max_missing}",
                   observed=_rounded(dict(zip(feats["feature"], feats["missing_share"]))), column="missing_share",
                   max_value=cfg.max_missing)]
    cats = feats[feats["kind"] == "categorical"]
    if index > 0 and len(cats):
        out.append(_expect(gx, "ExpectColumnValuesToBeBetween", "unseen_share",
                           f"share of categories unseen in {first_label} <= {cfg.max_unseen}",
                           observed=_rounded(dict(zip(cats["feature"], cats["unseen_share"]))), column="unseen_share",
                           max_value=cfg.max_unseen))
    return out


def ids_in_several_slices(rows: pd.DataFrame) -> set:
    """Ids that occur in more than one slice (a record in two periods leaks across cutoffs)."""
    if "id" not in rows:
        return set()
    n_slices = rows.groupby("id", sort=False)["slice"].nunique()
    return set(n_slices.index[n_slices > 1])


def schema_frame(frame: pd.DataFrame, kinds: Mapping[str, str]) -> pd.DataFrame:
    rows = []
    for col, accepted in kinds.items():
        observed = dtype_kind(frame[col]) if col in frame else "missing"
        rows.append({"column": col, "expected": accepted, "observed": observed,
                     "match": observed in accepted.split("|")})
    return pd.DataFrame(rows)


def class_frame(slices: Slices, index: int, levels: Sequence[Any], counts: np.ndarray, n: np.ndarray,
                trained: np.ndarray | None = None) -> pd.DataFrame:
    """Per class of slice ``index``: count, shares in the slice, its history and splits, training rows."""
    meta = slices.meta
    frame = slices.frame(index)

    def share(c: np.ndarray, total: float) -> np.ndarray:
        return c / total if total > 0 else np.full(len(levels), np.nan)

    hist = share(counts[:index].sum(axis=0), n[:index].sum()) if index > 0 else np.full(len(levels), np.nan)
    parts = {s: frame[frame["split"] == s] for s in ("train", "test")}
    split_shares = {s: share(label_counts(p, meta, levels), len(p)) for s, p in parts.items()}
    gap = np.abs(split_shares["train"] - split_shares["test"])
    gap = np.where(np.isnan(gap), 1.0, gap)  # an empty split cannot be stratified
    out = pd.DataFrame({"class": axis_names(meta, levels), "count": counts[index].astype(int),
                        "trained": counts.sum(axis=0) if trained is None else trained,
                        "share": share(counts[index], n[index]),
                        "hist_share": hist, "train_share": split_shares["train"],
                        "test_share": split_shares["test"], "split_gap": gap})
    out["abs_change"] = (out["share"] - out["hist_share"]).abs()
    return out


def _rounded(values: Mapping[str, float]) -> dict[str, float | None]:
    return {str(k): (None if v is None or (isinstance(v, float) and math.isnan(v)) else round(float(v), 4))
            for k, v in values.items()}


# --- GX ---------------------------------------------------------------------------------------
class GXRunner:
    """One ephemeral GX context with a whole-dataframe batch definition per frame kind."""

    FRAMES = ("rows", "schema", "classes", "features")

    def __init__(self) -> None:
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
        logging.getLogger("great_expectations").setLevel(logging.WARNING)
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.gx = gx
        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False)
        source = self.context.data_sources.add_pandas("driftmatrix-slices")
        self.batch_definitions = {
            name: source.add_dataframe_asset(name=name).add_batch_definition_whole_dataframe(f"{name}-whole")
            for name in self.FRAMES}

    def validate(self, frame_kind: str, frame: pd.DataFrame, name: str, expectations: list, index_columns: list[str],
                 max_examples: int) -> list:
        """GX's results of ``expectations`` on ``frame``. A suite is checked in GX's BASIC format
        first: its outcome and observed values are SUMMARY's, without the lists of unexpected rows,
        which cost about 40% of a clean slice's checks. Only a suite with a failure (or an error) is
        validated again in SUMMARY, for the examples of what failed."""
        batch = self.batch_definitions[frame_kind].get_batch(batch_parameters={"dataframe": frame})
        results = self._results(batch, name, expectations, {"result_format": "BASIC"})
        if all(r.success and raised(r) is None for r in results):
            return results
        return self._results(batch, name, expectations, self.summary_format(index_columns, max_examples))

    @staticmethod
    def summary_format(index_columns: list[str], max_examples: int) -> dict[str, Any]:
        """GX's SUMMARY result format, with up to ``max_examples`` unexpected rows named by ``index_columns``."""
        return {"result_format": "SUMMARY", "partial_unexpected_count": max_examples,
                "unexpected_index_column_names": index_columns}

    def _results(self, batch: Any, name: str, expectations: list, result_format: dict[str, Any]) -> list:
        suite = self.gx.ExpectationSuite(name=name)
        for e in expectations:
            suite.add_expectation(e)
        return list(batch.validate(suite, result_format=result_format).results)


def _expect(gx: Any, cls: str, key: str, bound: Any, observed: Any = None, **kwargs: Any) -> Any:
    meta = {"key": key, "bound": bound}
    if observed is not None:
        meta["observed"] = observed
    return getattr(gx.expectations, cls)(meta=meta, **kwargs)


def rows_expectations(gx: Any, slices: Slices, spec: Mapping[str, Any], cfg: ValidationConfig,
                      levels: Sequence[Any]) -> list:
    meta = slices.meta
    kinds = expected_kinds(slices)
    start, end = (t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")
                  for t in (pd.Timestamp(spec["start"]), pd.Timestamp(spec["end"])))
    out = [_expect(gx, "ExpectTableColumnsToMatchSet", "columns", f"includes {sorted(kinds)}",
                   column_set=sorted(kinds), exact_match=False),
           _expect(gx, "ExpectTableRowCountToBeBetween", "min_rows", f">= {cfg.min_rows}", min_value=cfg.min_rows),
           _expect(gx, "ExpectColumnValuesToBeUnique", "unique_id", "no duplicate id", column="id"),
           _expect(gx, "ExpectColumnValuesToBeInSet", "id_in_one_slice", "no id also in another slice",
                   column=ELSEWHERE, value_set=[False]),
           _expect(gx, "ExpectColumnValuesToBeBetween", "timestamp_in_period", f"[{start.isoformat()}, {end.isoformat()})",
                   column="timestamp", min_value=start, max_value=end, strict_max=True),
           _expect(gx, "ExpectColumnValuesToBeInSet", "split_set", "in ['test', 'train']", column="split",
                   value_set=["train", "test"])]
    optional = feature_kinds(meta)  # features keep their missing values (checked by missing_share)
    for col in kinds:
        if col not in optional:
            out.append(_expect(gx, "ExpectColumnValuesToNotBeNull", f"not_null:{col}", "no nulls", column=col))
    value_set = [v.item() if hasattr(v, "item") else v for v in allowed_values(meta, levels)]  # numpy -> plain
    for col in meta.label_columns:
        out.append(_expect(gx, "ExpectColumnValuesToBeInSet", f"label_set:{col}", f"in {value_set}",
                           column=col, value_set=value_set))
    return out


def schema_expectations(gx: Any, schema: pd.DataFrame) -> list:
    bad = schema[~schema["match"]]
    observed = {r.column: r.observed for r in bad.itertuples()} or "all columns as expected"
    return [_expect(gx, "ExpectColumnValuesToBeInSet", "types", dict(zip(schema["column"], schema["expected"])),
                    observed=observed, column="match", value_set=[True])]


def class_expectations(gx: Any, classes: pd.DataFrame, index: int, cfg: ValidationConfig, multiclass: bool = False,
                       last: bool = True) -> list:
    """Multiclass: a class absent from a slice is a warning (``classes_in_slice``, with the counts);
    ``classes_present`` fails for a class no training window holds (checked on the last slice).
    Other tasks: ``classes_present`` fails for a class, category or level absent from the slice."""
    shares = dict(zip(classes["class"], classes["share"]))
    if multiclass:
        out = [_expect(gx, "ExpectColumnValuesToBeBetween", "classes_in_slice", "count > 0 for every class",
                       observed=dict(zip(classes["class"], classes["count"].astype(int).tolist())), column="count",
                       min_value=0, strict_min=True)]
        out += [_expect(gx, "ExpectColumnValuesToBeBetween", "classes_present",
                        "every class in some training window (train rows of all slices > 0)",
                        observed=dict(zip(classes["class"], classes["trained"].astype(int).tolist())),
                        column="trained", min_value=0, strict_min=True)] if last else []
    else:
        out = [_expect(gx, "ExpectColumnValuesToBeBetween", "classes_present", "share > 0 for every class",
                       observed=_rounded(shares), column="share", min_value=0.0, strict_min=True)]
    out += [_expect(gx, "ExpectColumnValuesToBeBetween", "class_share", {"min": cfg.share_min, "max": cfg.share_max},
                   observed=_rounded(shares), column="share", min_value=cfg.share_min, max_value=cfg.share_max),
           _expect(gx, "ExpectColumnValuesToBeBetween", "split_stratification",
                   f"|train share - test share| <= {cfg.split_tolerance}",
                   observed=_rounded(dict(zip(classes["class"], classes["split_gap"]))),
                   column="split_gap", max_value=cfg.split_tolerance)]
    if index > 0 and cfg.max_change is not None:
        out.append(_expect(gx, "ExpectColumnValuesToBeBetween", "share_vs_history",
                           f"|share - cumulative history share| <= {cfg.max_change}",
                           observed=_rounded(dict(zip(classes["class"], classes["abs_change"]))),
                           column="abs_change", max_value=cfg.max_change))
    return out


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def raised(res: Any) -> str | None:
    """The message of the exception a GX expectation result raised, else None."""
    info = res.exception_info or {}
    return info.get("exception_message") if info.get("raised_exception") else None


def record(res: Any, cfg: ValidationConfig) -> dict[str, Any]:
    """One GX expectation result in the project's format (never the whole frame)."""
    meta = res.expectation_config.meta or {}
    r = res.result or {}
    key = meta["key"]
    if "observed" in meta:
        observed = meta["observed"]
    elif "observed_value" in r:
        observed = r["observed_value"]
    elif "unexpected_count" in r:
        observed = f"{r['unexpected_count']} of {r.get('element_count')} rows"
    else:
        observed = None
    examples = r.get("partial_unexpected_index_list") or r.get("partial_unexpected_list") or \
        r.get("partial_missing_list") or []
    error = raised(res)
    if error:
        observed = f"error: {error}"
    return {"expectation": key, "gx": res.expectation_config.type, "success": bool(res.success) and not error,
            "observed": _jsonable(observed), "bound": _jsonable(meta.get("bound")),
            "critical": cfg.is_critical(key), "examples": _jsonable(list(examples)[: cfg.max_examples])}


def first_categories(slices: Slices) -> dict[str, set]:
    """The categories of each categorical feature in the first slice (unseen shares compare to it)."""
    from driftmatrix.data.table import feature_column

    if not slices.meta.categorical or not slices.specs:
        return {}
    frame = slices.frame(int(slices.specs[0]["index"]))
    return {f: set(frame[feature_column(f)].dropna().astype(str)) for f in slices.meta.categorical}


def validate_slices(slices: Slices, cfg: ValidationConfig, runner: GXRunner | None = None) -> list[dict[str, Any]]:
    """Validate every slice; returns ``[{"index", "label", "n", "expectations": [record, ...]}]``."""
    runner = runner or GXRunner()
    gx = runner.gx
    kinds = expected_kinds(slices)
    labelled = {"split", *slices.meta.label_columns} <= set(slices.rows.columns)
    levels = label_levels(slices.meta, slices.rows, cfg.label_values) if labelled else []
    counts, n = counts_by_slice(slices.rows, slices.meta, levels, len(slices.specs)) if labelled else (None, None)
    trained = label_counts(slices.rows[slices.rows["split"] == "train"], slices.meta, levels) if labelled else None
    shared_ids = ids_in_several_slices(slices.rows)
    first = first_categories(slices)
    out = []
    for spec in slices.specs:
        i, label = int(spec["index"]), str(spec["label"])
        frame = slices.frame(i).reset_index(drop=True)
        schema = schema_frame(frame, kinds)
        if "id" in frame:
            frame = frame.assign(**{ELSEWHERE: frame["id"].isin(shared_ids)})
        present = set(frame.columns)
        row_checks = [e for e in rows_expectations(gx, slices, spec, cfg, levels)
                      if getattr(e, "column", None) in (None, *present)]  # missing columns: see "columns"
        results = runner.validate("rows", frame, f"{label}-rows", row_checks, ["id"] if "id" in present else [],
                                  cfg.max_examples)
        results += runner.validate("schema", schema, f"{label}-schema", schema_expectations(gx, schema),
                                   ["column", "expected", "observed"], cfg.max_examples)
        if labelled:
            classes = class_frame(slices, i, levels, counts, n, trained)
            checks = class_expectations(gx, classes, i, cfg, slices.meta.task == "multiclass",
                                        i == int(slices.specs[-1]["index"]))
            results += runner.validate("classes", classes, f"{label}-classes", checks, ["class"], cfg.max_examples)
        if slices.meta.features:
            feats = feature_frame(slices, i, first)
            results += runner.validate("features", feats, f"{label}-features",
                                       feature_expectations(gx, feats, i, cfg, str(slices.specs[0]["label"])),
                                       ["feature"], cfg.max_examples)
        records = sorted((record(r, cfg) for r in results), key=lambda rec: rec["expectation"])
        out.append({"index": i, "label": label, "n": int(len(frame)), "expectations": records})
    return out
