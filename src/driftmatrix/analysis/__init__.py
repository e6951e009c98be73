"""Drift-matrix analysis: pure functions over seed stacks (S, K, K) and K x K matrices."""
