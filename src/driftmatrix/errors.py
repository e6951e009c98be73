"""The two errors a user meets: a mistake in params.yaml (:class:`ConfigError`) and data that cannot
be read as given (:class:`DataError`). ``driftmatrix`` prints either as one line and exits 2."""


class ConfigError(ValueError):
    """A problem with params.yaml or a preset: reported as one line, no traceback."""


class DataError(ValueError):
    """Raw data that cannot be read as configured: one line naming the file, record and field."""


def untrusted_model(exc: BaseException) -> bool:
    """Whether ``exc`` is ``models.tabular.UntrustedModel`` (a stored model that would build types the
    project does not trust), found without importing that module and torch with it."""
    import sys

    tabular = sys.modules.get("driftmatrix.models.tabular")  # loaded wherever one was raised
    return tabular is not None and isinstance(exc, tabular.UntrustedModel)
