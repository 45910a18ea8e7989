"""Turn a finished multi-turn conversation into training data: tokens and masks.

The conversation is rendered with the tokenizer's own chat template as text (``tokenize=False``,
which behaves the same on transformers 4.x and 5.x) and encoded piece by piece: every assistant
turn is one trained piece, everything between them is masked with -100. Decoding the trained
tokens therefore gives back exactly the text of the assistant turns.
"""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

MASKED = -100


@dataclass
class TokenizedConversation:
    """Training data for one rollout: ``tokens`` and ``masks`` of equal length."""

    tokens: list[int]
    masks: list[int]
    trained_spans: list[str]

    @property
    def num_trained(self) -> int:
        return sum(1 for m in self.masks if m != MASKED)


def _render(tokenizer: Any, messages: list[dict], tools: list[dict] | None, gen: bool) -> str:
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": gen}
    if tools:
        kwargs["tools"] = tools
    return tokenizer.apply_chat_template(messages, **kwargs)


# A tool call's arguments as a model might write them, spaced unlike any JSON serialiser.
_PROBE_ARGUMENTS = '{"probe":[1 ,2]}'
_PROBE = [
    {"role": "user", "content": "."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                # 9 alphanumerics: Mistral's templates refuse other ids.
                "id": "probe0001",
                "type": "function",
                "function": {"name": "probe", "arguments": _PROBE_ARGUMENTS},
            }
        ],
    },
]
_PRINTS_TEXT: dict[str, bool] = {}


def prints_argument_text(tokenizer: Any) -> bool:
    """True when the tokenizer's chat template prints string tool-call arguments as they are.

    Such templates (Qwen3, Mistral v11+, Kimi K2, DeepSeek) re-render the model's own argument
    text when it is kept; the others (Qwen3-Coder, GLM, Llama) need an object to walk or
    serialise. Judged once per template by rendering a probe call.
    """
    template = getattr(tokenizer, "chat_template", None)
    key = repr(template)
    if key not in _PRINTS_TEXT:
        try:
            text = _render(tokenizer, _PROBE, None, gen=False)
        except Exception:  # the template needs an object (or refuses the probe)
            text = ""
        _PRINTS_TEXT[key] = isinstance(text, str) and _PROBE_ARGUMENTS in text
    return _PRINTS_TEXT[key]


def _for_template(messages: list[dict], tokenizer: Any = None) -> list[dict]:
    """Copy messages into the shape the chat template expects.

    Tool-call arguments stay the model's own text when the tokenizer's template prints it
    as is (so a re-rendered turn is the text the model generated); otherwise, and without a
    tokenizer, they become objects.
    """
    out = copy.deepcopy(messages)
    keep_text = tokenizer is not None and prints_argument_text(tokenizer)
    for message in out:
        for call in message.get("tool_calls") or []:
            function = call.get("function", call)
            arguments = function.get("arguments")
            if isinstance(arguments, str) and not keep_text:
                try:
                    decoded = json.loads(arguments)
                except ValueError:
                    continue  # invalid JSON stays a string: the template renders it as given
                if isinstance(decoded, dict):
                    function["arguments"] = decoded
        if message.get("content") is None:
            message["content"] = ""
    return out


def _split_trailing_whitespace(text: str) -> tuple[str, str]:
    """Split a rendered assistant turn into what the model generates and the template's tail.

    The model stops at its end-of-turn token; a newline the template adds after it (ChatML's
    ``<|im_end|>\\n``) is not generated, so it is not trained.
    """
    stripped = text.rstrip()
    return stripped, text[len(stripped) :]


def tokenize_conversation(
    tokenizer: Any, messages: list[dict], tools: list[dict] | None = None
) -> TokenizedConversation:
    """Tokens and masks for a whole conversation; only assistant turns are trained."""
    messages = _for_template(messages, tokenizer)
    full = _render(tokenizer, messages, tools, gen=False)

    pieces: list[tuple[str, bool]] = []  # (text, trained)
    position = 0
    consistent = True
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = _render(tokenizer, messages[:index], tools, gen=True)
        after = _render(tokenizer, messages[: index + 1], tools, gen=False)
        if not (after.startswith(before) and full.startswith(after) and len(before) >= position):
            consistent = False
            break
        turn, tail = _split_trailing_whitespace(after[len(before) :])
        pieces.append((full[position : len(before)], False))
        pieces.append((turn, True))
        position = len(before) + len(turn)
        pieces.append((tail, False))
        position += len(tail)

    if not consistent:
        # Some templates rewrite earlier turns (e.g. drop old reasoning), so the conversation
        # is not a prefix of itself. Train only the final assistant turn, which is exact.
        logger.warning(
            "the chat template rewrites earlier turns; training only the final assistant turn"
        )
        return _final_turn_only(tokenizer, messages, tools)

    pieces.append((full[position:], False))
    return _encode(tokenizer, pieces)


def _final_turn_only(
    tokenizer: Any, messages: list[dict], tools: list[dict] | None
) -> TokenizedConversation:
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    before = _render(tokenizer, messages[:last], tools, gen=True)
    after = _render(tokenizer, messages[: last + 1], tools, gen=False)
    turn, tail = _split_trailing_whitespace(after[len(before) :])
    return _encode(tokenizer, [(before, False), (turn, True), (tail, False)])


def _encode(tokenizer: Any, pieces: list[tuple[str, bool]]) -> TokenizedConversation:
    tokens: list[int] = []
    masks: list[int] = []
    spans: list[str] = []
    for text, trained in pieces:
        if not text:
            continue
        ids = tokenizer.encode(text, add_special_tokens=False)
        if not isinstance(ids, list):  # some tokenizers return an Encoding-like object
            ids = list(ids["input_ids"] if isinstance(ids, dict) else ids)
        tokens.extend(ids)
        masks.extend(ids if trained else [MASKED] * len(ids))
        if trained:
            spans.append(text)
    return TokenizedConversation(tokens=tokens, masks=masks, trained_spans=spans)
