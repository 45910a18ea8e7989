"""hermes-envgen: generate, run and test multi-turn, tool-using RL environments for Atropos."""

from __future__ import annotations

import logging


def _not_the_torch_notice(record: logging.LogRecord) -> bool:
    # transformers, imported without torch, announces that "models won't be available": envs
    # use only its tokenizers, and the one part that needs torch (the test kit's GRPO trainer)
    # fails on its import with its own message. Set before anything imports transformers.
    return not record.getMessage().startswith("PyTorch was not found")


logging.getLogger("transformers").addFilter(_not_the_torch_notice)


def __getattr__(name: str) -> str:
    # The version is read on demand: importlib.metadata costs ~30 ms at every CLI start.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("hermes-envgen")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0.0.0"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
