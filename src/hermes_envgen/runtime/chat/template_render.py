"""Rendering a conversation with a tokenizer's chat template, and shaping it for the template.

One place renders (``render``, with the template variables the server renders its prompts
with), encodes (``encode``), finds where a rendered turn ends (``end_marker``,
``text_after_turn``), and gives messages the form the template takes (``for_template``: tool-call
arguments as text or objects, call ids as the template needs them, reasoning in the field it
reads). Training data (``trajectory``), token mode's prompts (``exact_tokens``) and the start-up
check (``template_check``) all render through here.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import string
import weakref
from typing import Any

from hermes_envgen.runtime.chat.template_data import (
    PROBE_ARGUMENTS,
    PROBE_ID,
    PROBE_MESSAGES,
    PROBE_NAME,
    SERVER_STYLE_PROBE,
)
from hermes_envgen.runtime.errors import ChatTemplateError

logger = logging.getLogger(__name__)


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of text a chat template rendered: it wrote any BOS itself, so none is added."""
    if not text:
        return []
    ids = tokenizer.encode(text, add_special_tokens=False)
    if not isinstance(ids, list):  # some tokenizers return an Encoding-like object
        ids = list(ids["input_ids"] if isinstance(ids, dict) else ids)
    return ids


# The template variables of each tokenizer (``enable_thinking``...), as the env sends them to
# the server in ``extra_body.chat_template_kwargs``: the training data renders with the same.
_template_kwargs: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def set_template_kwargs(tokenizer: Any, kwargs: dict[str, Any] | None) -> None:
    """Render every later conversation of ``tokenizer`` with these template variables."""
    try:
        _template_kwargs[tokenizer] = dict(kwargs or {})
    except TypeError:  # a tokenizer that takes no weak reference: its template's defaults
        logger.warning("chat template variables %r cannot be attached to the tokenizer", kwargs)


def template_kwargs(tokenizer: Any) -> dict[str, Any]:
    """The template variables ``tokenizer`` renders with (see set_template_kwargs)."""
    try:
        return dict(_template_kwargs.get(tokenizer) or {})
    except TypeError:
        return {}


def render(tokenizer: Any, messages: list[dict], tools: list[dict] | None, gen: bool) -> str:
    """The messages as chat-template text (``tokenize=False`` behaves alike on 4.x and 5.x)."""
    kwargs: dict[str, Any] = template_kwargs(tokenizer)
    kwargs.update(tokenize=False, add_generation_prompt=gen)
    if tools:
        kwargs["tools"] = tools
    return tokenizer.apply_chat_template(messages, **kwargs)


def as_sent(messages: list[dict]) -> list[dict]:
    """The messages as the agent loop sends them to a chat server: past reasoning left out."""
    return [{k: v for k, v in m.items() if k not in _REASONING} for m in messages]


_REASONING = ("reasoning_content", "thinking")


def end_marker(tokenizer: Any, turn: str) -> str | None:
    """The special token a rendered turn ends with (``<|im_end|>``, ``<|eot_id|>``...), or None."""
    stripped = turn.rstrip()
    specials = set(getattr(tokenizer, "all_special_tokens", None) or [])
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    specials |= {str(token) for token in decoder.values()}
    found = [token for token in specials if token and stripped.endswith(token)]
    return max(found, key=len) if found else None


def text_after_turn(
    tokenizer: Any,
    before: list[dict],
    new: list[dict],
    tools: list[dict] | None,
    marker: str | None,
    *,
    marker_generated: bool,
    gen: bool,
    markers_in_turn: int = 1,
) -> str:
    """The template's text after a turn that ended with ``marker``: the turn's tail, then ``new``.

    ``before`` is the conversation up to and including the turn; the turn's end in the
    rendering of ``before + new`` is the occurrence of ``marker`` that follows those the
    conversation before the turn renders, and the ``markers_in_turn`` the turn holds (GigaChat
    ends the text and then the call of one reply with it). Counting markers, not text, lets the
    template render earlier turns differently once more follows (Qwen3's empty think block
    of the last turn, Hermes 2 Pro's newline before the ``<|im_end|>`` of a tool turn): that
    text is masked, and only what follows the turn is taken. A turn that did not end with the
    marker (cut short) gets the marker too.
    """
    full = render(tokenizer, [*before, *new], tools, gen)
    if marker is None:  # no special token ends a turn: the conversation must extend itself
        so_far = render(tokenizer, before, tools, False)
        if not full.startswith(so_far):
            raise ChatTemplateError(
                "the chat template ends a turn with no special token and re-renders it once "
                "more follows: the turns of a conversation cannot be told apart"
            )
        return full[len(so_far) :]
    earlier = render(tokenizer, before[:-1], tools, True).count(marker) if len(before) > 1 else 0
    at = -1
    for _ in range(earlier + max(1, markers_in_turn)):
        at = full.find(marker, at + 1)
        if at < 0:
            raise ChatTemplateError(
                f"the chat template does not end a turn with {marker!r} once more follows it"
            )
    return full[at + len(marker) :] if marker_generated else full[at:]


def with_arguments(messages: list[dict], raw: bool) -> list[dict]:
    """A copy of ``messages`` for a template: tool-call arguments as text or as objects.

    ``raw``: the arguments stay the JSON text the server returned, rendered byte for byte by a
    template that prints strings as given. Otherwise they are decoded into objects, which the
    template serialises its own way (most templates apply ``tojson``, and would quote a string).
    """
    out = copy.deepcopy(messages)
    names: dict[str, str] = {}  # call id -> the called function, for results that lack it
    for message in out:
        if message.get("role") == "tool" and "name" not in message:
            name = names.get(str(message.get("tool_call_id")))
            if name:  # some templates print it, and raise without (vLLM's hermes example)
                message["name"] = name
        for call in message.get("tool_calls") or []:
            function = call.get("function", call)
            if isinstance(function.get("name"), str):
                names[str(call.get("id"))] = function["name"]
            arguments = function.get("arguments")
            if isinstance(arguments, str) and not raw:
                try:
                    decoded = json.loads(arguments)
                except ValueError:
                    continue  # invalid JSON stays a string: the template renders it as given
                if isinstance(decoded, dict):
                    function["arguments"] = decoded
        if message.get("content") is None:
            message["content"] = ""
    return out


_ALNUM = string.ascii_letters + string.digits


def short_call_id(call_id: str) -> str:
    """``call_id`` as 9 alphanumeric characters (itself when it is that), the same every time."""
    if len(call_id) == 9 and call_id.isascii() and call_id.isalnum():
        return call_id
    number = int.from_bytes(hashlib.sha256(call_id.encode()).digest(), "big")
    chars = []
    for _ in range(9):
        number, digit = divmod(number, len(_ALNUM))
        chars.append(_ALNUM[digit])
    return "".join(chars)


# How a template needs call ids (see call_id_style).
AS_GIVEN, SHORT, NAMED = "as given", "9 characters", "functions.NAME:IDX"


def with_call_ids(messages: list[dict], style: str) -> list[dict]:
    """A copy of ``messages`` whose call ids (and the results' ``tool_call_id``) have ``style``.

    SHORT: 9 characters derived from each id. NAMED: ``functions.NAME:IDX`` with IDX counting
    the calls of the conversation, unless the id has that form already (the model's own).
    """
    out = copy.deepcopy(messages)
    renamed: dict[str, str] = {}
    for message in out:
        for call in message.get("tool_calls") or []:
            old = call.get("id")
            if not isinstance(old, str):
                continue
            if style == SHORT:
                new = short_call_id(old)
            elif style == NAMED and not old.startswith("functions."):
                new = f"functions.{call.get('function', call).get('name')}:{len(renamed)}"
            else:
                new = old
            call["id"] = renamed[old] = new
        result_of = message.get("tool_call_id")
        if isinstance(result_of, str):
            fallback = short_call_id(result_of) if style == SHORT else result_of
            message["tool_call_id"] = renamed.get(result_of, fallback)
    return out


def for_template(tokenizer: Any, messages: list[dict]) -> list[dict]:
    """A copy of ``messages`` as the tokenizer's template takes them: arguments, call ids,
    and reasoning in the field the template reads (gpt-oss's reads ``thinking``)."""
    shaped = with_arguments(messages, raw=renders_raw_arguments(tokenizer))
    template = str(getattr(tokenizer, "chat_template", None))
    if "thinking" in template and "reasoning_content" not in template:
        for message in shaped:
            if message.get("reasoning_content") and "thinking" not in message:
                message["thinking"] = message["reasoning_content"]
    style = call_id_style(tokenizer)
    return shaped if style == AS_GIVEN else with_call_ids(shaped, style)


_raw_arguments_by_template: dict[str, bool] = {}
_id_style_by_template: dict[str, str] = {}


def renders_raw_arguments(tokenizer: Any) -> bool:
    """True when the tokenizer's template prints string arguments as given (not quoted)."""
    template = str(getattr(tokenizer, "chat_template", None))
    known = _raw_arguments_by_template.get(template)
    if known is None:
        try:
            text = render(tokenizer, with_arguments(PROBE_MESSAGES[:2], raw=True), None, False)
        except Exception:  # a template that cannot take string arguments gets objects
            text = ""
        known = _raw_arguments_by_template[template] = PROBE_ARGUMENTS in text
    return known


def call_id_style(tokenizer: Any) -> str:
    """How the tokenizer's template needs call ids: AS_GIVEN, SHORT or NAMED.

    SHORT: Mistral's templates raise on any call id but 9 alphanumeric characters, which
    OpenAI-style servers (and llama.cpp's) do not give. NAMED: Kimi K2's prints the id where the
    call's name belongs, so only ``functions.NAME:IDX`` (what vLLM's Kimi parser gives) renders
    the name. The training data renders other ids in the form the template needs.
    """
    template = str(getattr(tokenizer, "chat_template", None))
    known = _id_style_by_template.get(template)
    if known is None:
        if not _renders(tokenizer, SERVER_STYLE_PROBE) and _renders(tokenizer, PROBE_MESSAGES):
            known = SHORT
        else:
            try:
                text = render(tokenizer, with_arguments(PROBE_MESSAGES[:2], raw=False), None, False)
            except Exception:  # Jinja errors: the probe says what is wrong
                text = ""
            known = NAMED if PROBE_ID in text and PROBE_NAME not in text else AS_GIVEN
        _id_style_by_template[template] = known
    return known


def _renders(tokenizer: Any, messages: list[dict]) -> bool:
    """Whether the template renders ``messages`` (arguments as objects) without an error."""
    try:
        render(tokenizer, with_arguments(messages, raw=False), None, False)
    except Exception:  # Jinja errors, and templates that raise on purpose
        return False
    return True
