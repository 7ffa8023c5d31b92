"""llmgw node agent: reports what a node is and how it is doing to the control plane."""

from importlib import metadata

try:
    __version__ = metadata.version("llmgw-agent")
except metadata.PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.1.0"

__all__ = ["__version__"]
