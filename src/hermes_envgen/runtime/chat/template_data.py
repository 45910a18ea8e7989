"""The chat templates' data: the built-in templates, and the probe conversation.

The built-in templates replace a tokenizer's own (``--env.chat_template hermes``...); the probe
conversation (two sequential tool calls and their results, with values that appear nowhere
else) is what the start-up check (``template_check``) and the input shaping
(``template_render``) ask a template to render.
"""

from __future__ import annotations

from pathlib import Path

from hermes_envgen.runtime.errors import EnvConfigError

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

# The probe conversation: values that appear nowhere else.
PROBE_NAME = "probe_lookup"
PROBE_KEY, PROBE_VALUE, PROBE_RESULT = "probe_key", "probe-value-7x3", "probe-result-k9w"
PROBE_DESCRIPTION = "Look a key up."
PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": PROBE_NAME,
            "description": PROBE_DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {PROBE_KEY: {"type": "string"}},
                "required": [PROBE_KEY],
            },
        },
    }
]
# Spaced unlike json.dumps, to tell a template that renders argument text as given.
PROBE_ARGUMENTS = f'{{ "{PROBE_KEY}":  "{PROBE_VALUE}" }}'


def _probe_messages(call_id: str) -> list[dict]:
    """The probe conversation: a tool call with ``call_id``, and its result."""
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": PROBE_NAME, "arguments": PROBE_ARGUMENTS},
    }
    return [
        {"role": "user", "content": "Look up the probe key."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "name": PROBE_NAME, "content": PROBE_RESULT},
    ]


# A 9-character id, which every template takes (Mistral's takes no other), and one as
# OpenAI-style servers give them, which the start-up probe uses as a rollout would.
PROBE_ID = "probe0001"
PROBE_MESSAGES = _probe_messages(PROBE_ID)
SERVER_STYLE_PROBE = _probe_messages("call_" + "3b9e" * 6)


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


def _probe_call(call_id: str, value: str) -> dict:
    arguments = PROBE_ARGUMENTS.replace(PROBE_VALUE, value)
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": PROBE_NAME, "arguments": arguments},
    }


def _probe_result(call_id: str, result: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "name": PROBE_NAME, "content": result}


# Two sequential calls, then an answer; the variants add what some templates cannot render.
SECOND_ID = "call_" + "7c1d" * 6
SEQUENTIAL = [
    *SERVER_STYLE_PROBE,
    {"role": "assistant", "content": "", "tool_calls": [_probe_call(SECOND_ID, "probe-2")]},
    _probe_result(SECOND_ID, "probe-result-2"),
    {"role": "assistant", "content": "Done."},
]
PARALLEL = [
    SERVER_STYLE_PROBE[0],
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [SERVER_STYLE_PROBE[1]["tool_calls"][0], _probe_call(SECOND_ID, "p-2")],
    },
    SERVER_STYLE_PROBE[2],
    _probe_result(SECOND_ID, "probe-result-2"),
    {"role": "assistant", "content": "Done."},
]
TEXT_BESIDE_CALL = [
    SERVER_STYLE_PROBE[0],
    dict(SERVER_STYLE_PROBE[1], content="Looking it up."),
    *SERVER_STYLE_PROBE[2:],
    {"role": "assistant", "content": "Done."},
]


def with_reasoning(messages: list[dict]) -> list[dict]:
    """``messages`` with reasoning in each assistant turn (the probe of reasoning models)."""
    return [
        dict(m, reasoning_content=f"Probe reasoning {i}.") if m["role"] == "assistant" else m
        for i, m in enumerate(messages)
    ]
