"""An offline tokenizer: byte-level, ChatML chat template with tool calls, no download needed.

The directory it writes loads with ``AutoTokenizer.from_pretrained(path)`` on transformers 4.x
and 5.x alike: ``tokenizer.json`` comes from the ``tokenizers`` library and
``tokenizer_config.json`` is written by hand (a transformers-5 ``save_pretrained`` writes a
class name 4.x cannot load).
"""

from __future__ import annotations

import json
from pathlib import Path

from hermes_envgen.runtime.chat.template_data import HERMES_TEMPLATE

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# ChatML as the Hermes/Qwen models use it, with tool calls in <tool_call> tags.
CHAT_TEMPLATE = HERMES_TEMPLATE


def _byte_level_vocab() -> dict[str, int]:
    """Map each of the 256 byte-level symbols to an id, in byte order."""
    from tokenizers.pre_tokenizers import ByteLevel

    return {symbol: index for index, symbol in enumerate(sorted(ByteLevel.alphabet(), key=ord))}


def build_offline_tokenizer(
    directory: str | Path,
    chat_template: str = CHAT_TEMPLATE,
    special_tokens: tuple[str, ...] = (),
    eos_token: str = "<|im_end|>",
    bos_token: str | None = None,
) -> Path:
    """Write a byte-level tokenizer into ``directory`` and return its path.

    Every string round-trips exactly (``decode(encode(s)) == s``), so tests can compare the
    decoded training spans with the assistant turns character for character. The chat template
    is ChatML with tool calls unless another is given (with the special tokens it uses, and
    the ``bos_token`` it writes, as Llama's templates do).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(vocab=_byte_level_vocab(), merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = [*SPECIAL_TOKENS, *special_tokens, *([bos_token] if bos_token else [])]
    tokenizer.add_special_tokens([AddedToken(token, special=True) for token in specials])
    tokenizer.save(str(directory / "tokenizer.json"))

    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1_000_000,
        "bos_token": bos_token,
        "eos_token": eos_token,
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "chat_template": chat_template,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (directory / "special_tokens_map.json").write_text(
        json.dumps({"eos_token": eos_token, "pad_token": "<|endoftext|>"}, indent=2)
    )
    return directory
