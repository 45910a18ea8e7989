"""The chat template training data is rendered with: built-in templates, the override, the probe.

Training data is the conversation rendered by the tokenizer's chat template (Phase 1), and
Phase 2 renders tool results with it. Many models' templates (plain ChatML, as SmolLM2's) render
only ``content``: an assistant turn that calls a tool becomes an empty turn, the tool results
vanish, and the model would be trained to stop calling tools. So at start-up a probe
conversation (two sequential tool calls and their results) is turned into training data as a
rollout is, and the env refuses to start, in one line, when that data would be wrong.
``chat_template`` replaces the tokenizer's template with a built-in one or a Jinja file; the
template variables the server renders with (``enable_thinking``...) render the data too.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import string
import weakref
from pathlib import Path
from typing import Any

from hermes_envgen.runtime.errors import (
    ChatTemplateError,
    EnvConfigError,
    GenerationPromptNotContinued,
)

logger = logging.getLogger(__name__)

_ASSISTANT_AND_SYSTEM = """\
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
"""

# Hermes / Qwen 2.5: tool results go back in a user turn, each in <tool_response> tags.
_TOOL_RESULTS_IN_USER_TURN = """\
{%- elif message['role'] == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
"""

# Plain ChatML with a turn of role ``tool`` per result.
_TOOL_RESULTS_IN_TOOL_TURNS = """\
{%- elif message['role'] == 'tool' %}
{{- '<|im_start|>tool\\n' + message['content'] + '<|im_end|>\\n' }}
"""

_END = """\
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

# ChatML as the Hermes/Qwen models use it: tools listed in the system turn, assistant tool calls
# as <tool_call>{json}</tool_call>, tool results as <tool_response> blocks inside a user turn.
# Arguments that are a string (the model's own JSON text) are rendered as they are.
HERMES_TEMPLATE = _ASSISTANT_AND_SYSTEM + _TOOL_RESULTS_IN_USER_TURN + _END
# The same tool-call format on plain ChatML, with tool results in turns of their own.
CHATML_TOOLS_TEMPLATE = _ASSISTANT_AND_SYSTEM + _TOOL_RESULTS_IN_TOOL_TURNS + _END

BUILTIN_TEMPLATES = {
    "hermes": HERMES_TEMPLATE,
    "qwen": HERMES_TEMPLATE,
    "chatml-tools": CHATML_TOOLS_TEMPLATE,
}

# The probe: values that appear nowhere else.
_PROBE_NAME = "probe_lookup"
_PROBE_KEY, _PROBE_VALUE, _PROBE_RESULT = "probe_key", "probe-value-7x3", "probe-result-k9w"
_PROBE_DESCRIPTION = "Look a key up."
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": _PROBE_NAME,
            "description": _PROBE_DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {_PROBE_KEY: {"type": "string"}},
                "required": [_PROBE_KEY],
            },
        },
    }
]
# Spaced unlike json.dumps, to tell a template that renders argument text as given.
_PROBE_ARGUMENTS = f'{{ "{_PROBE_KEY}":  "{_PROBE_VALUE}" }}'


def _probe_messages(call_id: str) -> list[dict]:
    """The probe conversation: a tool call with ``call_id``, and its result."""
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": _PROBE_NAME, "arguments": _PROBE_ARGUMENTS},
    }
    return [
        {"role": "user", "content": "Look up the probe key."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "name": _PROBE_NAME, "content": _PROBE_RESULT},
    ]


# A 9-character id, which every template takes (Mistral's takes no other), and one as
# OpenAI-style servers give them, which the start-up probe uses as a rollout would.
_PROBE_ID = "probe0001"
_PROBE_MESSAGES = _probe_messages(_PROBE_ID)
_SERVER_STYLE_PROBE = _probe_messages("call_" + "3b9e" * 6)

_FIX = (
    "Fix: --env.chat_template hermes (or qwen, chatml-tools, or a Jinja file in the model's "
    "tool-call format)"
)


def _or_exact_tokens(server_type: str) -> str:
    """The other way out: exact tokens, named by the setting that switches to them.

    It is the inference API that decides, not the server type: a vLLM server sampled through
    its chat API trains on the rendered conversation too.
    """
    if server_type == "vllm":
        return ", or exact tokens: --env.inference_api completions (stock vLLM's /v1/completions)"
    if server_type == "sglang":
        return ", or exact tokens: --env.inference_api generate (SGLang's /generate)"
    return (
        ", or exact tokens from a self-hosted vLLM or SGLang server (--openai.server_type vllm "
        "with --env.inference_api completions, or sglang with generate)"
    )


class ChatTemplateDropsToolCalls(EnvConfigError):
    """The chat template leaves tool calls or tool results out of the rendered conversation."""


def resolve_chat_template(setting: str) -> str:
    """The Jinja text of a ``chat_template`` setting: a built-in name or a file path."""
    if setting in BUILTIN_TEMPLATES:
        return BUILTIN_TEMPLATES[setting]
    path = Path(setting).expanduser()
    if not path.is_file():
        raise EnvConfigError(
            f"chat_template {setting!r} is neither a built-in template "
            f"({', '.join(BUILTIN_TEMPLATES)}) nor a file"
        )
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvConfigError(f"cannot read chat_template {setting!r}: {exc}") from None


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
            text = render(tokenizer, with_arguments(_PROBE_MESSAGES[:2], raw=True), None, False)
        except Exception:  # a template that cannot take string arguments gets objects
            text = ""
        known = _raw_arguments_by_template[template] = _PROBE_ARGUMENTS in text
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
        if not _renders(tokenizer, _SERVER_STYLE_PROBE) and _renders(tokenizer, _PROBE_MESSAGES):
            known = SHORT
        else:
            try:
                text = render(
                    tokenizer, with_arguments(_PROBE_MESSAGES[:2], raw=False), None, False
                )
            except Exception:  # Jinja errors: the probe says what is wrong
                text = ""
            known = NAMED if _PROBE_ID in text and _PROBE_NAME not in text else AS_GIVEN
        _id_style_by_template[template] = known
    return known


def _renders(tokenizer: Any, messages: list[dict]) -> bool:
    """Whether the template renders ``messages`` (arguments as objects) without an error."""
    try:
        render(tokenizer, with_arguments(messages, raw=False), None, False)
    except Exception:  # Jinja errors, and templates that raise on purpose
        return False
    return True


def _probe_call(call_id: str, value: str) -> dict:
    arguments = _PROBE_ARGUMENTS.replace(_PROBE_VALUE, value)
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": _PROBE_NAME, "arguments": arguments},
    }


def _probe_result(call_id: str, result: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "name": _PROBE_NAME, "content": result}


# Two sequential calls, then an answer; the variants add what some templates cannot render.
_SECOND_ID = "call_" + "7c1d" * 6
_SEQUENTIAL = [
    *_SERVER_STYLE_PROBE,
    {"role": "assistant", "content": "", "tool_calls": [_probe_call(_SECOND_ID, "probe-2")]},
    _probe_result(_SECOND_ID, "probe-result-2"),
    {"role": "assistant", "content": "Done."},
]
_PARALLEL = [
    _SERVER_STYLE_PROBE[0],
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [_SERVER_STYLE_PROBE[1]["tool_calls"][0], _probe_call(_SECOND_ID, "p-2")],
    },
    _SERVER_STYLE_PROBE[2],
    _probe_result(_SECOND_ID, "probe-result-2"),
    {"role": "assistant", "content": "Done."},
]
_TEXT_BESIDE_CALL = [
    _SERVER_STYLE_PROBE[0],
    dict(_SERVER_STYLE_PROBE[1], content="Looking it up."),
    *_SERVER_STYLE_PROBE[2:],
    {"role": "assistant", "content": "Done."},
]


def _with_reasoning(messages: list[dict]) -> list[dict]:
    return [
        dict(m, reasoning_content=f"Probe reasoning {i}.") if m["role"] == "assistant" else m
        for i, m in enumerate(messages)
    ]


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def check_tool_calls_rendered(
    tokenizer: Any,
    name: str,
    *,
    exact_tokens: bool,
    system_prompt: str | None = None,
    server_type: str = "openai",
) -> None:
    """Refuse, in one line, a chat template whose training data would be wrong.

    A probe conversation (two sequential tool calls and their results, then an answer, with
    the env's system prompt, if any) is turned into training data as a rollout would be. The
    template is refused when the tool results are not rendered, or (chat mode, where the
    training data is the template's rendering) when the trained turns would lack the calls or
    could not be rebuilt as generated. Conversations some templates cannot render (two calls
    in one turn, text beside a call, reasoning) are logged: such rollouts are left out of the
    training data with the reason, never trained wrong. With ``exact_tokens`` (Phase 2) the
    trained tokens are the model's own: the template must render the tool results after them.
    """
    from hermes_envgen.runtime.trajectory import tokenize_conversation, untrained_tool_calls

    where = f"the chat template of {name!r}"
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    probe = [*system, *_SEQUENTIAL]
    try:
        full = render(tokenizer, for_template(tokenizer, probe), _PROBE_TOOLS, False)
    except Exception as exc:  # Jinja errors, and templates that raise on purpose
        raise ChatTemplateDropsToolCalls(
            f"{where} fails on a tool call ({_first_line(exc)}): tool-using rollouts cannot "
            f"become training data. {_FIX}"
        ) from None
    if _PROBE_RESULT not in full:
        raise ChatTemplateDropsToolCalls(
            f"{where} drops tool results: the training data and the prompts would lack what "
            f"the tools returned. {_FIX}"
        )
    if _PROBE_DESCRIPTION not in full:
        logger.warning(
            "%s does not render the tool definitions (tools=): the model learns of its tools "
            "only from what the prompts say about them",
            where,
        )
    style = call_id_style(tokenizer)
    if style == SHORT:
        logger.warning(
            "%s takes only 9-character call ids: the training data renders longer ids (as "
            "OpenAI-style servers give them) as 9 characters derived from them",
            where,
        )
    elif style == NAMED:
        logger.warning(
            "%s prints the call id where the call's name belongs: the training data renders "
            "ids not of the form functions.NAME:IDX in that form",
            where,
        )
    if exact_tokens:
        _check_continuation(tokenizer, where, probe)
        return
    or_exact_tokens = _or_exact_tokens(server_type)
    try:
        tokenize_conversation(tokenizer, probe, _PROBE_TOOLS)
    except GenerationPromptNotContinued as exc:
        raise ChatTemplateDropsToolCalls(f"{where}: {exc}. {_FIX}{or_exact_tokens}") from None
    except ChatTemplateError as exc:
        replies = [m for m in probe if m["role"] == "assistant"]
        turns = _rendered_turns(tokenizer, probe)
        if turns is not None and untrained_tool_calls(replies, turns):
            raise ChatTemplateDropsToolCalls(
                f"{where} drops tool calls: tool-call turns would train as empty turns, "
                f"teaching the model to stop calling tools. {_FIX}{or_exact_tokens}"
            ) from None
        raise ChatTemplateDropsToolCalls(
            f"{where} cannot give tool-call turns as generated ({_first_line(exc)}). "
            f"{_FIX}{or_exact_tokens}"
        ) from None
    for what, conversation in (
        ("two tool calls in one turn", _PARALLEL),
        ("text beside a tool call", _TEXT_BESIDE_CALL),
        ("reasoning", _with_reasoning(_SEQUENTIAL)),
    ):
        try:
            tokenize_conversation(tokenizer, [*system, *conversation], _PROBE_TOOLS)
        except ChatTemplateError as exc:
            logger.warning(
                "%s cannot render replies with %s as generated (%s): such rollouts are left "
                "out of the training data (%s%s)",
                where,
                what,
                _first_line(exc),
                _FIX,
                or_exact_tokens,
            )


def _rendered_turns(tokenizer: Any, messages: list[dict]) -> list[str] | None:
    """Each assistant turn of ``messages`` as the template renders it after its prompt."""
    shaped = as_sent(for_template(tokenizer, messages))
    turns = []
    try:
        for index, message in enumerate(shaped):
            if message["role"] == "assistant":
                before = render(tokenizer, shaped[:index], _PROBE_TOOLS, True)
                after = render(tokenizer, shaped[: index + 1], _PROBE_TOOLS, False)
                turns.append(after[len(before) :] if after.startswith(before) else after)
    except Exception:  # Jinja errors: the caller says the template cannot give the turns
        return None
    return turns


def _check_continuation(tokenizer: Any, where: str, probe: list[dict]) -> None:
    """Refuse a template that cannot render tool results after a turn (Phase 2 prompts)."""
    shaped = for_template(tokenizer, probe)
    at = next(i for i, m in enumerate(shaped) if m["role"] == "assistant")
    try:
        turn = render(tokenizer, shaped[: at + 1], _PROBE_TOOLS, False)
        before = render(tokenizer, shaped[:at], _PROBE_TOOLS, True)
        marker = end_marker(tokenizer, turn[len(before) :] if turn.startswith(before) else turn)
        new = text_after_turn(
            tokenizer,
            shaped[: at + 1],
            shaped[at + 1 : at + 2],
            _PROBE_TOOLS,
            marker,
            marker_generated=True,
            gen=True,
        )
    except Exception as exc:  # ChatTemplateError, Jinja errors
        raise ChatTemplateDropsToolCalls(
            f"{where} cannot render tool results after a turn ({_first_line(exc)}): the "
            f"prompts of tool-using rollouts cannot be built. {_FIX}"
        ) from None
    if _PROBE_RESULT not in new:
        raise ChatTemplateDropsToolCalls(
            f"{where} drops tool results after a turn: the prompts would lack what the tools "
            f"returned. {_FIX}"
        )


def prepare_chat_template(
    tokenizer: Any,
    setting: str | None,
    name: str,
    *,
    exact_tokens: bool,
    system_prompt: str | None = None,
    template_variables: dict[str, Any] | None = None,
    server_type: str = "openai",
) -> None:
    """Apply the ``chat_template`` setting to ``tokenizer``, then probe the template.

    ``template_variables`` (``enable_thinking``...) render every conversation of ``tokenizer``
    from here on, as the server renders its prompts with them.
    """
    set_template_kwargs(tokenizer, template_variables)
    if setting:
        tokenizer.chat_template = resolve_chat_template(setting)
        name = f"{name} with chat_template {setting}"
    elif not getattr(tokenizer, "chat_template", None):
        raise ChatTemplateDropsToolCalls(
            f"the tokenizer {name!r} has no chat template: training data cannot be rendered. "
            + _FIX
        )
    check_tool_calls_rendered(
        tokenizer,
        name,
        exact_tokens=exact_tokens,
        system_prompt=system_prompt,
        server_type=server_type,
    )
