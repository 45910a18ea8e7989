"""hermes-envgen: generate, run and test multi-turn, tool-using RL environments for Atropos."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hermes-envgen")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"
