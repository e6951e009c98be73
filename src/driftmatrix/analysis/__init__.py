"""Drift-matrix analysis: pure functions over seed stacks (S, K, K) and K x K matrices.

Modules: ``summary`` (ID / future / decay / backward, per-cutoff rows), ``td_score`` (Luu et al.),
``forgetting`` (forgetting curves), ``cohort`` (cohort mean, deviations), ``ranking`` (rankings,
family means), ``advisor`` (retraining horizon), ``policy`` (retraining policies, the oracle),
``matrixfile`` (JSON I/O), ``published``
(comparison with published matrices), ``tables`` (all of it for a cohort of models).
"""
