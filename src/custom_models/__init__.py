"""Your own estimator modules: ``models: {MyEst: {estimator: custom_models.<module>.<Class>}}`` in
params.yaml. Importable through the editable install, a dependency of dvc.yaml's train stage, and
keyed by their code: editing one retrains the units of the models that name it (docs/tabular.md)."""
