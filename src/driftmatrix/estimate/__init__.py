"""Before the labels arrive: a deployed model's score on a new period, estimated without labels.

``cells`` (per-cell forward-pass statistics), ``methods`` (the estimators), ``domain`` (input-space
importance weights) and ``backtest`` (every future cell estimated as at its cutoff); the stages are
``stages.estimates`` and ``stages.newperiod``. docs/estimates.md describes each method."""
