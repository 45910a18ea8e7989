"""hermes-envgen: generate, run and test multi-turn, tool-using RL environments for Atropos."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # The version is read on demand: importlib.metadata costs ~30 ms at every CLI start.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("hermes-envgen")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0.0.0"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
