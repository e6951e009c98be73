"""Before the labels arrive: a deployed model's score on a new period, estimated without labels.

- :mod:`~driftmatrix.estimate.cells`: the forward-pass statistics the evaluate stage keeps per
  cell (``evaluation.forward_stats``), pooled and stripped of their labels;
- :mod:`~driftmatrix.estimate.methods`: the estimators, pure functions over arrays (carry-forward,
  trend, AC, DoC, ATC, IW, IW-inputs, BBSE) and the black-box label-shift estimate;
- :mod:`~driftmatrix.estimate.domain`: per-slice input features and the input-space domain
  classifier's importance weights (``IW-inputs``);
- :mod:`~driftmatrix.estimate.backtest`: every future cell M[i, j > i] of a drift matrix estimated
  from what was known at cutoff i, against its true value (pure);
- :mod:`~driftmatrix.stages.estimates`: the ``estimates`` DVC stage (files, metrics, MLflow);
- :mod:`~driftmatrix.stages.newperiod`: ``driftmatrix estimate --data PATH``.

docs/estimates.md describes each method, what it assumes and where it does not apply.
"""
