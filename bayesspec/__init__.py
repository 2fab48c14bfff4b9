"""bayesspec: Bayesian latency laws for speculative decoding in LLM serving."""

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("bayesspec")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+src"

__all__ = ["__version__"]
