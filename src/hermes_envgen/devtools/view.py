"""``hermes-envgen view``: rollouts as one self-contained HTML page, or two runs side by side.

The renderer of one run lives in ``hermes_envgen.runtime.rollouts.rollout_view``, because
``process``
writes the same page beside its groups and the runtime imports nothing from devtools; two
runs side by side are :mod:`hermes_envgen.devtools.view_compare`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermes_envgen.errors import ViewError
from hermes_envgen.runtime.rollouts.rollout_card import RolloutCard
from hermes_envgen.runtime.rollouts.rollout_view import load_rollouts, render_html, write_view

__all__ = ["RolloutCard", "load_rollouts", "load_tokenizer", "render_html", "view", "write_view"]


def view(
    paths: list[Path], output: Path | None, *, tokenizer: str | None = None, tokens_from: int = 0
) -> Path:
    """One run's page, or two runs side by side (A before, B after); the file written."""
    from hermes_envgen.devtools.view_compare import write_comparison

    if len(paths) == 2:
        return write_comparison(paths[0], paths[1], output)
    if len(paths) != 1:
        raise ViewError(f"view takes one run or two (A B), not {len(paths)}")
    loaded = load_tokenizer(tokenizer) if tokenizer else None
    return write_view(paths[0], output, tokenizer=loaded, tokens_from=tokens_from)


def load_tokenizer(name: str | Path) -> Any:
    """The run's tokenizer, to show the token views' text: a local directory or a hub name."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(name))
    except Exception as exc:  # missing files, no network, a name that is no tokenizer
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ViewError(f"cannot load the tokenizer {name}: {reason}") from None
