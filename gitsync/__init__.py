"""gitsync: a GitOps pull agent for Apache APISIX gateways in API-driven standalone mode."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gitsync")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
