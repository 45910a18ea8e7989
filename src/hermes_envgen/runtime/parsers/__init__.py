"""Client-side tool-call parsers for raw LLM output (Hermes, Mistral, Llama, gpt-oss, ...).

``get_parser(name).parse(text, tools)`` returns ``(content, tool_calls)`` with OpenAI-form calls,
or ``(text, None)`` when the text holds no valid call; ``read(text, tools)`` also says why a
call the text opens could not be read. ``tools`` (the tool definitions offered to the model)
type the values of raw-text formats. A channel format (gpt-oss's harmony) splits the answer
from the reasoning even without a call: its content is the answer, ``read(...).reasoning``
the reasoning. Ids are those the format's chat template expects and ``function.arguments``
is the model's own JSON text where it wrote one (lone surrogates always stay escapes).
Parsers never raise and run in linear time.
"""

from __future__ import annotations

# Importing the format modules registers their parsers.
from .auto import AutoParser, detect_formats
from .base import (
    NoCallMeant,
    ParseOutcome,
    ParseResult,
    ToolCallParser,
    UnknownParserError,
    UnreadableCall,
    get_parser,
    list_parsers,
    make_tool_call,
    new_call_id,
    normalize_arguments,
    register_parser,
)
from .deepseek import DeepSeekV3Parser, DeepSeekV31Parser
from .glm import Glm45Parser, Glm47Parser
from .gpt_oss import GptOssParser
from .hermes import HermesParser, LongcatParser, QwenParser
from .kimi_k2 import KimiK2Parser
from .llama import Llama3JsonParser, Llama4JsonParser
from .mistral import MistralParser
from .qwen3_coder import Qwen3CoderParser

__all__ = [
    "AutoParser",
    "DeepSeekV3Parser",
    "DeepSeekV31Parser",
    "Glm45Parser",
    "Glm47Parser",
    "GptOssParser",
    "HermesParser",
    "KimiK2Parser",
    "Llama3JsonParser",
    "Llama4JsonParser",
    "LongcatParser",
    "MistralParser",
    "NoCallMeant",
    "ParseOutcome",
    "ParseResult",
    "Qwen3CoderParser",
    "QwenParser",
    "ToolCallParser",
    "UnknownParserError",
    "UnreadableCall",
    "detect_formats",
    "get_parser",
    "list_parsers",
    "make_tool_call",
    "new_call_id",
    "normalize_arguments",
    "register_parser",
]
