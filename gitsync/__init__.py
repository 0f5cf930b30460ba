"""gitsync: a GitOps pull agent for Apache APISIX gateways in API-driven standalone mode."""

# The one place the version is written: pyproject.toml reads it from here (hatch's version source),
# so that a process learns it without importing importlib.metadata (a visible part of every start).
__version__ = "0.1.0"

__all__ = ["__version__"]
