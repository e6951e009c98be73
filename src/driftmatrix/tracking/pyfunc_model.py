"""A driftmatrix unit as an MLflow pyfunc model, logged as code (MLflow's "models from code").

MLflow copies this file into every registered version and runs it to load one: it names the
model class and nothing else. The network is rebuilt from ``artifacts/model.json`` and its
weights read from ``artifacts/model.safetensors``; nothing is unpickled
(:mod:`driftmatrix.tracking.pyfunc` holds the class, so loading needs the project's environment).
"""

from mlflow.models import set_model

from driftmatrix.tracking.pyfunc import UnitModel

set_model(UnitModel())
