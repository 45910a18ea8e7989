"""The chat template training data is rendered with: built-in templates, the override, the probe.

Training data is the conversation rendered by the tokenizer's chat template (Phase 1), and
Phase 2 renders tool results with it. Many models' templates (plain ChatML, as SmolLM2's) render
only ``content``: an assistant turn that calls a tool becomes an empty turn, the tool results
vanish, and the model would be trained to stop calling tools. So at start-up a probe
conversation (one tool call, one tool result) is rendered and the env refuses to start, in one
line, when the call or the result does not appear. ``chat_template`` replaces the tokenizer's
template with a built-in one or a Jinja file.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import string
from pathlib import Path
from typing import Any

from hermes_envgen.runtime.errors import EarlierTurnsRewritten, EnvConfigError

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


def render(tokenizer: Any, messages: list[dict], tools: list[dict] | None, gen: bool) -> str:
    """The messages as chat-template text (``tokenize=False`` behaves alike on 4.x and 5.x)."""
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": gen}
    if tools:
        kwargs["tools"] = tools
    return tokenizer.apply_chat_template(messages, **kwargs)


def with_arguments(messages: list[dict], raw: bool) -> list[dict]:
    """A copy of ``messages`` for a template: tool-call arguments as text or as objects.

    ``raw``: the arguments stay the JSON text the server returned, rendered byte for byte by a
    template that prints strings as given. Otherwise they are decoded into objects, which the
    template serialises its own way (most templates apply ``tojson``, and would quote a string).
    """
    out = copy.deepcopy(messages)
    for message in out:
        for call in message.get("tool_calls") or []:
            function = call.get("function", call)
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
    """A copy of ``messages`` as the tokenizer's template takes them: arguments, call ids."""
    shaped = with_arguments(messages, raw=renders_raw_arguments(tokenizer))
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


def _assistant_turn(tokenizer: Any, messages: list[dict]) -> str:
    """The text the template adds for the probe's tool-call turn (``messages[-1]``)."""
    before = render(tokenizer, messages[:-1], _PROBE_TOOLS, True)
    after = render(tokenizer, messages, _PROBE_TOOLS, False)
    return after[len(before) :] if after.startswith(before) else after


def check_tool_calls_rendered(
    tokenizer: Any,
    name: str,
    *,
    exact_tokens: bool,
    system_prompt: str | None = None,
    server_type: str = "openai",
) -> None:
    """Refuse, in one line, a chat template that drops tool calls or tool results.

    The probe conversation (with the env's system prompt, if any) is turned into training data
    as a rollout would be: its tool call must be among the trained tokens, also when the replies
    carry reasoning (some templates show reasoning only on the last turn, re-rendering the
    earlier ones). With ``exact_tokens`` (Phase 2) the trained tokens are the model's own, so
    only the tool results (which the template renders into the next prompt) must appear.
    """
    from hermes_envgen.runtime.trajectory import untrained_tool_calls

    where = f"the chat template of {name!r}"
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    probe = [*system, *_SERVER_STYLE_PROBE, {"role": "assistant", "content": "Done."}]
    thinking = [
        dict(m, reasoning_content="Probe reasoning.") if m["role"] == "assistant" else m
        for m in probe
    ]
    try:
        full = render(tokenizer, for_template(tokenizer, probe), _PROBE_TOOLS, False)
        trained = _trained_turns(tokenizer, probe)
        trained_thinking = None if exact_tokens else _trained_turns(tokenizer, thinking)
        turn = [_assistant_turn(tokenizer, for_template(tokenizer, probe[: len(system) + 2]))]
    except Exception as exc:  # Jinja errors, and templates that raise on purpose
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ChatTemplateDropsToolCalls(
            f"{where} fails on a tool call ({reason}): tool-using rollouts cannot become "
            f"training data. {_FIX}"
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
        return
    or_exact_tokens = _or_exact_tokens(server_type)
    if trained is None or untrained_tool_calls(probe, trained):
        if untrained_tool_calls(probe[: len(system) + 2], turn):
            raise ChatTemplateDropsToolCalls(
                f"{where} drops tool calls: tool-call turns would train as empty turns, "
                f"teaching the model to stop calling tools. {_FIX}{or_exact_tokens}"
            )
        raise ChatTemplateDropsToolCalls(
            f"{where} re-renders earlier turns (e.g. moves the system prompt to the last user "
            "turn): their tool calls could not be trained, so every tool-using rollout would "
            f"be left out. {_FIX}{or_exact_tokens}"
        )
    if trained_thinking is None or untrained_tool_calls(thinking, trained_thinking):
        raise ChatTemplateDropsToolCalls(
            f"{where} re-renders earlier turns that carry reasoning (e.g. shows reasoning only "
            "on the last turn): the tool calls of rollouts whose replies carry reasoning could "
            f"not be trained, and those rollouts would be left out. {_FIX}{or_exact_tokens}"
        )


def _trained_turns(tokenizer: Any, messages: list[dict]) -> list[str] | None:
    """The trained text of each assistant turn; None when earlier turns are re-rendered."""
    from hermes_envgen.runtime.trajectory import tokenize_conversation

    try:
        return tokenize_conversation(tokenizer, messages, _PROBE_TOOLS).trained_spans
    except EarlierTurnsRewritten:
        return None


def prepare_chat_template(
    tokenizer: Any,
    setting: str | None,
    name: str,
    *,
    exact_tokens: bool,
    system_prompt: str | None = None,
    server_type: str = "openai",
) -> None:
    """Apply the ``chat_template`` setting to ``tokenizer``, then probe the template."""
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
