"""Your own estimator modules: ``models: {MyEst: {estimator: custom_models.<module>.<Class>}}`` in
params.yaml. Importable through the editable install, part of the train stage's code
(``units.code.STAGE_CODE``), and keyed by their code: editing one retrains the units of the models
that name it (docs/tabular.md)."""
