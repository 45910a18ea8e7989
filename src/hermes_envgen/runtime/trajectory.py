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


def _for_template(messages: list[dict]) -> list[dict]:
    """Copy messages into the shape chat templates expect: tool-call arguments as objects."""
    out = copy.deepcopy(messages)
    for message in out:
        for call in message.get("tool_calls") or []:
            function = call.get("function", call)
            arguments = function.get("arguments")
            if isinstance(arguments, str):
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
    messages = _for_template(messages)
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
