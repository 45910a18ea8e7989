"""An offline tokenizer: byte-level, ChatML chat template with tool calls, no download needed.

The directory it writes loads with ``AutoTokenizer.from_pretrained(path)`` on transformers 4.x
and 5.x alike: ``tokenizer.json`` comes from the ``tokenizers`` library and
``tokenizer_config.json`` is written by hand (a transformers-5 ``save_pretrained`` writes a
class name 4.x cannot load).
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# ChatML as the Hermes/Qwen models use it: tools are listed in the system turn, assistant tool
# calls are rendered as <tool_call>{json}</tool_call>, tool results as <tool_response> blocks
# inside a user turn. Arguments may be a dict or a JSON string; both render the same.
CHAT_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions. Function signatures are in <tools></tools>:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each call, return a JSON object inside <tool_call></tool_call> tags.<|im_end|>\\n' }}
{%- elif messages[0]['role'] == 'system' %}
{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message['role'] == 'system' %}
{%- if not loop.first %}{{- '<|im_start|>system\\n' + message['content'] + '<|im_end|>\\n' }}{%- endif %}
{%- elif message['role'] == 'user' %}
{{- '<|im_start|>user\\n' + message['content'] + '<|im_end|>\\n' }}
{%- elif message['role'] == 'assistant' %}
{{- '<|im_start|>assistant\\n' }}
{%- if message.get('reasoning_content') %}{{- '<think>' + message['reasoning_content'] + '</think>\\n' }}{%- endif %}
{%- if message['content'] %}{{- message['content'] }}{%- endif %}
{%- for call in message.get('tool_calls') or [] %}
{%- set fn = call['function'] if call['function'] is defined else call %}
{%- if message['content'] or not loop.first %}{{- '\\n' }}{%- endif %}
{{- '<tool_call>\\n{"name": "' + fn['name'] + '", "arguments": ' }}
{%- if fn['arguments'] is string %}{{- fn['arguments'] }}{%- else %}{{- fn['arguments'] | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message['role'] == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


def _byte_level_vocab() -> dict[str, int]:
    """Map each of the 256 byte-level symbols to an id, in byte order."""
    from tokenizers.pre_tokenizers import ByteLevel

    return {symbol: index for index, symbol in enumerate(sorted(ByteLevel.alphabet(), key=ord))}


def build_offline_tokenizer(directory: str | Path) -> Path:
    """Write a byte-level ChatML tokenizer into ``directory`` and return its path.

    Every string round-trips exactly (``decode(encode(s)) == s``), so tests can compare the
    decoded training spans with the assistant turns character for character.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(vocab=_byte_level_vocab(), merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token, special=True) for token in SPECIAL_TOKENS])
    tokenizer.save(str(directory / "tokenizer.json"))

    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1_000_000,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (directory / "special_tokens_map.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, indent=2)
    )
    return directory
