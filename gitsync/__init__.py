"""gitsync: a GitOps pull agent for Apache APISIX gateways in API-driven standalone mode."""

# The one place the version is written: pyproject.toml reads it from here (hatch's version source),
# so that a process learns it without importing importlib.metadata (a visible part of every start).
__version__ = "0.1.0"
#: The name the project publishes under (its wheels: ``apisix_gitsync-<version>-py3-none-any.whl``). The
#: import package and the command stay ``gitsync``; the name ``gitsync`` on the package index is another
#: project's, so nothing installs by it (tests/adopt/test_pin.py greps for that).
DISTRIBUTION = "apisix-gitsync"

__all__ = ["DISTRIBUTION", "__version__"]
