"""Turn a finished multi-turn conversation into training data: tokens and masks.

The conversation is rendered with the tokenizer's own chat template as text (``tokenize=False``,
which behaves the same on transformers 4.x and 5.x) and encoded piece by piece: every assistant
turn is one trained piece, everything between them is masked with -100. Decoding the trained
tokens therefore gives back exactly the text of the assistant turns.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from hermes_envgen.runtime.chat_template import encode, for_template, render
from hermes_envgen.runtime.errors import ChatTemplateError, EarlierTurnsRewritten

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
    try:
        return render(tokenizer, messages, tools, gen)
    except Exception as exc:  # Jinja errors, and templates that raise on purpose
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ChatTemplateError(
            f"the chat template cannot render the conversation: {reason}"
        ) from None


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
    """Tokens and masks for a whole conversation; only assistant turns are trained.

    Tool-call arguments are rendered as the JSON text the server returned when the template
    prints strings as given; otherwise as objects the template serialises (see README); call
    ids in the form the template needs (Mistral's 9 characters, Kimi's functions.NAME:IDX).
    ChatTemplateError when the template cannot render the conversation, or re-renders earlier
    turns that call tools (training only the final answer would drop the calls).
    """
    messages = for_template(tokenizer, messages)
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
        # is not a prefix of itself: only the final assistant turn is exact. Earlier text
        # turns may go untrained (with a warning); earlier tool calls may not, as that would
        # teach the model to answer without calling tools: such rollouts are left out.
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        if any(m.get("tool_calls") for m in messages[:last] if m["role"] == "assistant"):
            raise EarlierTurnsRewritten(
                "the chat template re-renders earlier turns once a turn follows them (e.g. "
                "drops their reasoning): their tool calls cannot be trained"
            )
        logger.warning(
            "the chat template rewrites earlier turns; training only the final assistant turn"
        )
        return _final_turn_only(tokenizer, messages, tools, last)

    pieces.append((full[position:], False))
    return _encode(tokenizer, pieces)


def _final_turn_only(
    tokenizer: Any, messages: list[dict], tools: list[dict] | None, last: int
) -> TokenizedConversation:
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
        ids = encode(tokenizer, text)
        tokens.extend(ids)
        masks.extend(ids if trained else [MASKED] * len(ids))
        if trained:
            spans.append(text)
    return TokenizedConversation(tokens=tokens, masks=masks, trained_spans=spans)


def trained_runs(tokens: list[int], masks: list[int]) -> list[list[int]]:
    """The runs of consecutive trained tokens of a sequence (one per assistant turn)."""
    runs: list[list[int]] = []
    current: list[int] = []
    for token, mask in zip(tokens, masks):
        if mask != MASKED:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def untrained_tool_calls(messages: list[dict], trained_turns: list[str]) -> list[str]:
    """The tool calls of the assistant turns whose name or arguments their own trained turn lacks.

    ``trained_turns`` is the trained text of each assistant turn (the decoded trained runs), the
    last one for the last turn: a turn without one (only the final answer trained) trains none
    of its calls, and a call quoted in another turn's text does not count. Within a turn calls
    are looked for in order. Arguments count as trained when their JSON text appears as the
    server returned it, or a JSON object equal to them does (a template that serialises
    arguments itself, e.g. Llama 3's ``"parameters": {...}``), or each key and then its value
    does (one element per argument, as Qwen3-Coder and GLM write them).
    """
    replies = [m for m in messages if m.get("role") == "assistant"]
    texts = list(trained_turns[-len(replies) :]) if replies else []
    texts = [""] * (len(replies) - len(texts)) + texts
    missing: list[str] = []
    for reply, text in zip(replies, texts):
        cursor = 0
        for call in reply.get("tool_calls") or []:
            function = call.get("function", call)
            name, arguments = str(function.get("name") or ""), function.get("arguments", "")
            at = text.find(name, cursor) if name else -1
            end = _arguments_end(text, arguments, at + len(name)) if at >= 0 else -1
            if end < 0:
                missing.append(f"{name} {arguments}"[:160])
            else:
                cursor = end
    return missing


def _arguments_end(text: str, arguments: Any, start: int) -> int:
    """Where the arguments end in ``text`` after ``start``, or -1 when they are not there."""
    if isinstance(arguments, str):
        at = text.find(arguments, start)
        if at >= 0:
            return at + len(arguments)
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return -1
    end = _json_object_end(text, arguments, start)
    if end < 0 and isinstance(arguments, dict):
        end = _keys_and_values_end(text, arguments, start)
    return end


def _json_object_end(text: str, arguments: Any, start: int) -> int:
    """Where a JSON object equal to ``arguments`` ends in ``text`` after ``start``, or -1."""
    decoder = json.JSONDecoder()
    at = text.find("{", start)
    while at >= 0:
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            value, end = None, -1
        if value == arguments:
            return end
        at = text.find("{", at + 1)
    return -1


def _keys_and_values_end(text: str, arguments: dict, start: int) -> int:
    """Where the last value ends when each key and then its value follow in order, or -1.

    Templates that write one element per argument (Qwen3-Coder's ``<parameter=key>``, GLM's
    ``<arg_key>``) print strings as they are and other values as JSON (or as Python would).
    """
    at = start
    for key, value in arguments.items():
        at = text.find(str(key), at)
        if at < 0:
            return -1
        at += len(str(key))
        if isinstance(value, str):
            forms = [value]
        else:
            forms = [json.dumps(value, ensure_ascii=False), json.dumps(value), str(value)]
        found = [(where, form) for form in forms if (where := text.find(form, at)) >= 0]
        if not found:
            return -1
        where, form = min(found)
        at = where + len(form)
    return at
