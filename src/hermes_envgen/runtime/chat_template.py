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
import json
import logging
from pathlib import Path
from typing import Any

from hermes_envgen.runtime.errors import EnvConfigError

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

# The probe: values that appear nowhere else, and a 9-character call id (Mistral needs one).
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
_PROBE_CALL = {
    "id": "probe0001",
    "type": "function",
    "function": {"name": _PROBE_NAME, "arguments": _PROBE_ARGUMENTS},
}
_PROBE_MESSAGES = [
    {"role": "user", "content": "Look up the probe key."},
    {"role": "assistant", "content": "", "tool_calls": [_PROBE_CALL]},
    {"role": "tool", "tool_call_id": "probe0001", "name": _PROBE_NAME, "content": _PROBE_RESULT},
]

_FIX = (
    "Fix: --env.chat_template hermes (or qwen, chatml-tools, or a Jinja file in the model's "
    "tool-call format)"
)
_OR_EXACT_TOKENS = ", or exact tokens (server_type vllm or sglang)"


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


_raw_arguments_by_template: dict[str, bool] = {}


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


def _assistant_turn(tokenizer: Any, messages: list[dict]) -> str:
    """The text the template adds for the probe's tool-call turn (``messages[-1]``)."""
    before = render(tokenizer, messages[:-1], _PROBE_TOOLS, True)
    after = render(tokenizer, messages, _PROBE_TOOLS, False)
    return after[len(before) :] if after.startswith(before) else after


def check_tool_calls_rendered(
    tokenizer: Any, name: str, *, exact_tokens: bool, system_prompt: str | None = None
) -> None:
    """Refuse, in one line, a chat template that drops tool calls or tool results.

    The probe conversation (with the env's system prompt, if any) is turned into training data
    as a rollout would be: its tool call must be among the trained tokens. With
    ``exact_tokens`` (Phase 2) the trained tokens are the model's own, so only the tool results
    (which the template renders into the next prompt) must appear.
    """
    from hermes_envgen.runtime.trajectory import tokenize_conversation, untrained_tool_calls

    where = f"the chat template of {name!r}"
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    probe = [*system, *_PROBE_MESSAGES, {"role": "assistant", "content": "Done."}]
    try:
        raw = renders_raw_arguments(tokenizer)
        full = render(tokenizer, with_arguments(probe, raw=raw), _PROBE_TOOLS, False)
        trained = "\n".join(tokenize_conversation(tokenizer, probe, _PROBE_TOOLS).trained_spans)
        turn = _assistant_turn(tokenizer, with_arguments(probe[: len(system) + 2], raw=raw))
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
    if exact_tokens or not untrained_tool_calls(probe, trained):
        return
    if untrained_tool_calls(probe, turn):
        raise ChatTemplateDropsToolCalls(
            f"{where} drops tool calls: tool-call turns would train as empty turns, teaching "
            f"the model to stop calling tools. {_FIX}{_OR_EXACT_TOKENS}"
        )
    raise ChatTemplateDropsToolCalls(
        f"{where} re-renders earlier turns (e.g. moves the system prompt to the last user "
        "turn): only the final answer would train, not the tool calls before it. "
        f"{_FIX}{_OR_EXACT_TOKENS}"
    )


def prepare_chat_template(
    tokenizer: Any,
    setting: str | None,
    name: str,
    *,
    exact_tokens: bool,
    system_prompt: str | None = None,
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
        tokenizer, name, exact_tokens=exact_tokens, system_prompt=system_prompt
    )
