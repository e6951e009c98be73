"""The two errors a user meets: a mistake in params.yaml (:class:`ConfigError`) and data that cannot
be read as given (:class:`DataError`). ``driftmatrix`` prints either as one line and exits 2."""


class ConfigError(ValueError):
    """A problem with params.yaml or a preset: reported as one line, no traceback."""


class DataError(ValueError):
    """Raw data that cannot be read as configured: one line naming the file, record and field."""
