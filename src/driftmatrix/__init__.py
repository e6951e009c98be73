"""driftmatrix: temporal drift matrices (the "Drift Happens" protocol) as a reproducible pipeline.
Heavy libraries load lazily in the modules that need them, so the command line starts fast."""

__version__ = "0.1.0"
