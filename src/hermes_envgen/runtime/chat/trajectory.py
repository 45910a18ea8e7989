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

from hermes_envgen.runtime.chat.template_render import (
    as_sent,
    encode,
    end_marker,
    for_template,
    render,
    text_after_turn,
)
from hermes_envgen.runtime.errors import ChatTemplateError, GenerationPromptNotContinued
from hermes_envgen.runtime.rollout import MASKED

logger = logging.getLogger(__name__)


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
    """Tokens and masks for a whole conversation; each assistant turn trained as generated.

    Each assistant turn is rendered as it was at generation time: after the prompt the model
    was given for it (the conversation before it, as the agent loop sent it, with the
    generation prompt), as the template renders a reply that ends the conversation. Those are
    the trained tokens. What lies between two trained turns (the end of a turn, the tool
    results, the next generation prompt) is taken from the next turn's prompt and masked. So
    templates that render history otherwise than the turn being generated (Qwen3's empty think
    block of the last turn, R1-style templates that drop old reasoning, Hermes 2 Pro's tool
    turns) still train exactly what the model generated; earlier turns' text in later prompts
    may differ, but only in masked text.

    Tool-call arguments are rendered as the JSON text the server returned when the template
    prints strings as given; otherwise as objects the template serialises (docs/concepts/modes.md);
    call ids in the form the template needs (Mistral's 9 characters, Kimi's functions.NAME:IDX).
    ChatTemplateError when the template cannot render the conversation, or its rendering of
    a turn would leave out what the model generated (a tool call, the text beside a call, the
    reasoning): such a rollout is not training data.
    """
    messages = for_template(tokenizer, messages)
    sent = as_sent(messages)
    replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if not replies:
        return _encode(tokenizer, [(_render(tokenizer, messages, tools, gen=False), False)])

    pieces: list[tuple[str, bool]] = []  # (text, trained)
    turns: list[str] = []
    for number, index in enumerate(replies):
        prompt = _render(tokenizer, sent[:index], tools, gen=True)
        turn, tail, marker = _turn_as_generated(tokenizer, sent[:index], messages[index], tools)
        if number == 0:
            pieces.append((prompt, False))
        pieces.append((turn, True))
        turns.append(turn)
        following = replies[number + 1] if number + 1 < len(replies) else len(messages)
        new = sent[index + 1 : following]
        if number + 1 == len(replies) and not new:
            pieces.append((tail, False))
            break
        if marker is None:  # the tail is part of what follows (text_after_turn)
            pieces.append((tail, False))
        try:
            between = text_after_turn(
                tokenizer,
                sent[: index + 1],
                new,
                tools,
                marker,
                marker_generated=True,
                gen=following < len(messages),
                markers_in_turn=turn.count(marker) if marker else 1,
            )
        except ChatTemplateError:
            raise
        except Exception as exc:  # Jinja errors, and templates that raise on purpose
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ChatTemplateError(
                f"the chat template cannot render the conversation: {reason}"
            ) from None
        pieces.append((between, False))

    missing = untrained_parts([messages[i] for i in replies], turns)
    if missing:
        raise ChatTemplateError(
            "the chat template leaves out of an assistant turn what the model generated: "
            + "; ".join(missing[:2])
        )
    return _encode(tokenizer, pieces)


def _turn_as_generated(
    tokenizer: Any, before: list[dict], reply: dict, tools: list[dict] | None
) -> tuple[str, str, str | None]:
    """``(turn, tail, end marker)`` of ``reply`` rendered after the prompt it was generated for.

    The turn is what the model generated (up to its end-of-turn token); the tail is what the
    template puts after it (ChatML's newline), which the model does not generate.
    """
    prompt = _render(tokenizer, before, tools, gen=True)
    ended = _render(tokenizer, [*before, reply], tools, gen=False)
    start = (
        len(prompt)
        if ended.startswith(prompt)
        else _after_generation_prompt(tokenizer, before, tools, prompt, ended)
    )
    if start < 0:
        extra = prompt[len(_common_prefix(prompt, ended)) :]
        raise GenerationPromptNotContinued(
            "the chat template renders a finished reply otherwise than it prompts for one "
            f"(its generation prompt ends {extra[-40:]!r}, the rendered reply does not): the "
            "turns as generated cannot be rebuilt from the conversation"
        )
    turn, tail = _split_trailing_whitespace(ended[start:])
    return turn, tail, end_marker(tokenizer, turn)


def _after_generation_prompt(
    tokenizer: Any, before: list[dict], tools: list[dict] | None, prompt: str, ended: str
) -> int:
    """Where the reply starts in ``ended`` when the text before it differs from ``prompt``.

    Some templates render the last message otherwise than the same message followed by a
    reply (Hermes 2 Pro's tool turn loses a newline when it is last): the reply then starts
    after the generation prompt that follows as many of them as the conversation before it
    renders. -1 when the template has no generation prompt of its own, or the reply does not
    follow one (R1-style prompts that open a think block the rendered reply lacks).
    """
    plain = _render(tokenizer, before, tools, gen=False)
    if not prompt.startswith(plain) or len(prompt) == len(plain):
        return -1
    opening = prompt[len(plain) :]
    at = -1
    for _ in range(plain.count(opening) + 1):
        at = ended.find(opening, at + 1)
        if at < 0:
            return -1
    return at + len(opening)


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a[:n]


def untrained_parts(replies: list[dict], turns: list[str]) -> list[str]:
    """What of each reply its trained turn lacks: tool calls, the text, the reasoning."""
    missing = untrained_tool_calls(replies, turns)
    for reply, turn in zip(replies, turns):
        content = reply.get("content")
        if isinstance(content, str) and content.strip() and content.strip() not in turn:
            missing.append(f"the text {content.strip()[:60]!r}")
        reasoning = reply.get("reasoning_content") or reply.get("thinking")
        if isinstance(reasoning, str) and reasoning.strip() and reasoning.strip() not in turn:
            missing.append(f"the reasoning {reasoning.strip()[:60]!r}")
    return missing


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
            if at >= 0 and end < 0 and 0 <= _arguments_end(text, arguments, cursor) <= at:
                end = at + len(name)  # arguments before the name (vLLM's hermes template)
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


def token_fidelity(
    tokenizer: Any,
    messages: list[dict],
    tokens: list[int],
    masks: list[int],
    tools: list[dict] | None = None,
) -> list[str]:
    """Where the chat template's tokens of the conversation differ from the sampled ones.

    For a token-mode rollout: the conversation is re-tokenized as chat mode would (the template's
    rendering of each assistant turn) and each trained run is compared with the tokens the
    model generated. An empty list when every assistant turn gives the same ids; otherwise a
    line per differing turn that says where (the first differing token, decoded both ways).
    """
    sampled = trained_runs(tokens, masks)
    try:
        rendered = trained_runs(*_tokens_and_masks(tokenizer, messages, tools))
    except ChatTemplateError as exc:
        return [f"the chat template cannot re-render the conversation: {exc}"]
    differences = []
    if len(rendered) != len(sampled):
        differences.append(
            f"{len(sampled)} generated turns, the chat template renders {len(rendered)}"
        )
    for number, (ours, theirs) in enumerate(zip(rendered, sampled), start=1):
        if ours == theirs:
            continue
        at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
        at = min(len(ours), len(theirs)) if at is None else at
        context = slice(max(0, at - 8), at + 8)
        differences.append(
            f"turn {number}, token {at}: sampled "
            f"{tokenizer.decode(theirs[context], skip_special_tokens=False)!r}, the template "
            f"renders {tokenizer.decode(ours[context], skip_special_tokens=False)!r}"
        )
    return differences


def _tokens_and_masks(
    tokenizer: Any, messages: list[dict], tools: list[dict] | None
) -> tuple[list[int], list[int]]:
    data = tokenize_conversation(tokenizer, messages, tools)
    return data.tokens, data.masks
