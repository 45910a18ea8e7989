"""Tool calls in the training data, per model family's chat template: trained, or refused."""

from __future__ import annotations

import asyncio
import re

import pytest
from helpers.chat import CONVERSATION, FAMILIES, MISTRAL_TOKENS, TOOLS, call, family_tokenizer
from transformers import AutoTokenizer

from hermes_envgen.runtime.chat.template_check import (
    ChatTemplateDropsToolCalls,
    check_tool_calls_rendered,
    prepare_chat_template,
)
from hermes_envgen.runtime.chat.template_data import resolve_chat_template
from hermes_envgen.runtime.chat.template_render import encode
from hermes_envgen.runtime.chat.trajectory import (
    MASKED,
    tokenize_conversation,
    trained_runs,
    untrained_tool_calls,
)
from hermes_envgen.runtime.errors import ChatTemplateError, EnvConfigError
from hermes_envgen.testing.tokenizer import build_offline_tokenizer

MISTRAL_TOKENS += ("[/TOOL_RESULTS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]")


def trained_text(tokenizer, tokens: list[int], masks: list[int]) -> list[str]:
    return [tokenizer.decode(run) for run in trained_runs(tokens, masks)]


@pytest.mark.parametrize(
    ("family", "outcome"),
    [
        ("hermes (built-in)", "trained"),
        ("chatml-tools (built-in)", "trained"),
        ("qwen2.5", "trained"),
        ("llama3.1", "trained"),
        ("mistral v0.3", "trained"),
        ("qwen3-coder", "trained"),
        ("glm-4.5", "trained"),
        ("kimi k2", "trained"),
        ("smollm2 (plain ChatML)", "refused"),
    ],
)
def test_tool_call_turns_are_trained_or_refused_never_dropped(tmp_path, family, outcome):
    tokenizer = family_tokenizer(tmp_path, family)
    if outcome == "refused":
        with pytest.raises(ChatTemplateDropsToolCalls, match="drops tool calls"):
            check_tool_calls_rendered(tokenizer, family, token_mode=False)
        # What the probe prevents: each tool-call turn would train only its end-of-turn token,
        # so such a rollout is left out, never trained.
        with pytest.raises(ChatTemplateError, match="leaves out of an assistant turn") as caught:
            tokenize_conversation(tokenizer, CONVERSATION, TOOLS)
        assert "read_file" in str(caught.value) and "write_file" in str(caught.value)
        return
    check_tool_calls_rendered(tokenizer, family, token_mode=False)
    data = tokenize_conversation(tokenizer, CONVERSATION, TOOLS)
    runs = trained_text(tokenizer, data.tokens, data.masks)
    assert runs == data.trained_spans and len(runs) == 3
    assert untrained_tool_calls(CONVERSATION, runs) == []
    assert "read_file" in runs[0] and "write_file" in runs[1] and "Copied." in runs[2]


@pytest.mark.parametrize(
    ("family", "exact"),
    [
        ("hermes (built-in)", True),
        ("chatml-tools (built-in)", True),
        ("qwen2.5", False),
        ("llama3.1", False),
        ("mistral v0.3", False),
    ],
)
def test_arguments_are_the_servers_text_where_the_template_prints_it(tmp_path, family, exact):
    """A template that prints string arguments gets them byte for byte; others re-serialise."""
    tokenizer = family_tokenizer(tmp_path, family)
    runs = tokenize_conversation(tokenizer, CONVERSATION, TOOLS).trained_spans
    assert ('{ "path": "notes.txt" }' in runs[0]) is exact
    assert untrained_tool_calls(CONVERSATION, runs) == []


def test_the_override_makes_a_plain_chatml_tokenizer_train_the_calls(tmp_path):
    tokenizer = family_tokenizer(tmp_path, "smollm2 (plain ChatML)")
    prepare_chat_template(tokenizer, "hermes", "smollm2", token_mode=False)
    runs = tokenize_conversation(tokenizer, CONVERSATION, TOOLS).trained_spans
    expected = '{"name": "read_file", "arguments": { "path": "notes.txt" }}'
    assert runs[0] == f"<tool_call>\n{expected}\n</tool_call><|im_end|>"


def test_a_template_file_is_an_override_too(tmp_path):
    tokenizer = family_tokenizer(tmp_path, "smollm2 (plain ChatML)")
    template = tmp_path / "llama.jinja"
    template.write_text(FAMILIES["llama3.1"][0])
    prepare_chat_template(tokenizer, str(template), "smollm2", token_mode=False)
    assert tokenizer.chat_template == FAMILIES["llama3.1"][0]


def test_token_mode_needs_only_the_tool_results(tmp_path):
    # Token mode trains the generated tokens: SmolLM2's template renders 'tool' turns, so it serves.
    tokenizer = family_tokenizer(tmp_path, "smollm2 (plain ChatML)")
    check_tool_calls_rendered(tokenizer, "smollm2", token_mode=True)
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] in ('user', 'assistant') %}"
        "{{ m['role'] }}: {{ m['content'] }}\n{% endif %}{% endfor %}"
    )
    with pytest.raises(ChatTemplateDropsToolCalls, match="drops tool results"):
        check_tool_calls_rendered(tokenizer, "x", token_mode=True)


def test_a_template_that_raises_on_a_tool_call_is_refused_in_one_line(tmp_path):
    tokenizer = family_tokenizer(tmp_path, "hermes (built-in)")
    tokenizer.chat_template = "{{ raise_exception('tools are not supported') }}"
    with pytest.raises(ChatTemplateDropsToolCalls) as caught:
        check_tool_calls_rendered(tokenizer, "x", token_mode=False)
    assert "tools are not supported" in str(caught.value) and "\n" not in str(caught.value)


def test_a_conversation_the_template_refuses_is_a_chat_template_error(tmp_path):
    # Llama 3.1's template takes one call per turn: two are refused, not rendered wrong.
    tokenizer = family_tokenizer(tmp_path, "llama3.1")
    two_calls = [dict(CONVERSATION[1], tool_calls=[*CONVERSATION[1]["tool_calls"]] * 2)]
    with pytest.raises(ChatTemplateError, match="only supports single tool-calls"):
        tokenize_conversation(tokenizer, [CONVERSATION[0], *two_calls], TOOLS)


def test_no_chat_template_at_all_is_refused(tmp_path):
    tokenizer = family_tokenizer(tmp_path, "hermes (built-in)")
    tokenizer.chat_template = None
    with pytest.raises(ChatTemplateDropsToolCalls, match="has no chat template"):
        prepare_chat_template(tokenizer, None, "bare", token_mode=False)


@pytest.mark.parametrize("setting", ["no-such-template", "/no/such/file.jinja"])
def test_an_unknown_override_is_a_config_error(setting):
    with pytest.raises(EnvConfigError, match="neither a built-in template"):
        resolve_chat_template(setting)


def test_untrained_tool_calls_needs_name_and_arguments_in_their_own_turn():
    text = '<tool_call>{"name": "read_file", "arguments": {"path": "notes.txt"}}</tool_call>'
    assert untrained_tool_calls(CONVERSATION[:2], [text]) == []
    assert untrained_tool_calls(CONVERSATION[:2], ["read_file"]) == [
        'read_file { "path": "notes.txt" }'
    ]
    assert len(untrained_tool_calls(CONVERSATION[:4], [text, text])) == 1  # write_file missing
    # A call is looked for in its own turn only, never in the text of another.
    assert len(untrained_tool_calls(CONVERSATION[:4], ["<|im_end|>", text])) == 2
    # Turns without a trained run (only the final answer trained) train none of their calls.
    assert len(untrained_tool_calls(CONVERSATION, ["Copied."])) == 2
    # Arguments written one element per key (Qwen3-Coder, GLM): each key, then its value.
    xml = "<function=read_file>\n<parameter=path>\nnotes.txt\n</parameter>\n</function>"
    assert untrained_tool_calls(CONVERSATION[:2], [xml]) == []
    assert len(untrained_tool_calls(CONVERSATION[:2], [xml.replace("notes", "other")])) == 1
    typed = [call("c", "run", '{"timeout": 30, "dry": true, "env": {"A": "1"}}')]
    typed = [{"role": "assistant", "content": "", "tool_calls": typed}]
    text = 'run <k>timeout</k><v>30</v><k>dry</k><v>true</v><k>env</k><v>{"A": "1"}</v>'
    assert untrained_tool_calls(typed, [text]) == []
    assert len(untrained_tool_calls(typed, [text.replace("30", "31")])) == 1


@pytest.mark.parametrize(
    ("family", "refused"),
    [("hermes (built-in)", False), ("qwen2.5", False), ("llama3.1", False), ("mistral v0.3", True)],
)
def test_a_system_prompt_that_the_template_moves_is_refused(tmp_path, family, refused):
    # Mistral's template puts the system prompt into the last user turn only: the rendering of
    # the conversation so far is then no prefix of the next one, so earlier turns (the tool
    # calls) could not be trained.
    tokenizer = family_tokenizer(tmp_path, family)
    system = "You are a careful agent."
    if not refused:
        check_tool_calls_rendered(tokenizer, family, token_mode=False, system_prompt=system)
        return
    refusal = "renders a finished reply otherwise than it prompts for one"
    with pytest.raises(ChatTemplateDropsToolCalls, match=refusal):
        check_tool_calls_rendered(tokenizer, family, token_mode=False, system_prompt=system)
    check_tool_calls_rendered(tokenizer, family, token_mode=True, system_prompt=system)
    conversation = [{"role": "system", "content": system}, *CONVERSATION]
    # What the refusal prevents: turns that are not what the model generated after its prompt.
    with pytest.raises(ChatTemplateError, match="cannot be rebuilt from the conversation"):
        tokenize_conversation(tokenizer, conversation, TOOLS)


def test_a_template_without_tool_definitions_is_named_in_the_log(tmp_path, caplog):
    tokenizer = family_tokenizer(tmp_path, "smollm2 (plain ChatML)")
    with caplog.at_level("WARNING"):
        check_tool_calls_rendered(tokenizer, "smollm2", token_mode=True)
    assert "does not render the tool definitions" in caplog.text
    caplog.clear()
    prepare_chat_template(tokenizer, "chatml-tools", "smollm2", token_mode=True)
    assert "tool definitions" not in caplog.text


def test_a_rollout_the_template_refuses_is_left_out_with_an_error(stub_server, tmp_path, caplog):
    # Llama 3.1's template refuses two calls in one turn: the run goes on, the rollout is not
    # trained, and the log says why.
    from helpers.envs import GREETING, make_env

    two_calls = [{"name": "terminal", "arguments": {"command": "true"}}] * 2
    server = stub_server(
        {"conversations": [{"turns": [{"tool_calls": two_calls}, {"content": "Done."}]}]}
    )
    family_tokenizer(tmp_path, "llama3.1")
    env = make_env(server.base_url, tmp_path / "tok", tmp_path)

    async def main():
        await env.setup()
        return await env.collect_trajectories(GREETING)

    with caplog.at_level("ERROR"):
        assert asyncio.run(asyncio.wait_for(main(), 120)) == (None, [])
    assert "a rollout is left out of the training data: the chat template cannot render" in (
        caplog.text
    )
    assert "only supports single tool-calls at once" in caplog.text


def with_reasoning(messages: list[dict]) -> list[dict]:
    """The conversation as a reasoning model's rollout: every reply carries its reasoning."""
    return [
        dict(m, reasoning_content=f"Thinking about step {i}.") if m["role"] == "assistant" else m
        for i, m in enumerate(messages)
    ]


def test_a_template_that_drops_old_reasoning_trains_each_turn_as_generated(tmp_path):
    # The template shows reasoning on the last turn only: each turn was the last one when it
    # was generated, so each is trained with its reasoning, calls and all; the prompts between
    # them (masked) render earlier turns without it, as the model saw them.
    tokenizer = family_tokenizer(tmp_path, "reasoning on the last turn")
    check_tool_calls_rendered(tokenizer, "r1-style", token_mode=False)
    conversation = with_reasoning(CONVERSATION)
    data = tokenize_conversation(tokenizer, conversation, TOOLS)
    runs = trained_text(tokenizer, data.tokens, data.masks)
    assert runs == data.trained_spans and len(runs) == 3
    assert [
        run.startswith(f"<think>Thinking about step {i}.</think>")
        for i, run in zip((1, 3, 5), runs)
    ] == [True] * 3
    assert untrained_tool_calls(conversation, runs) == []
    masked = tokenizer.decode([t for t, m in zip(data.tokens, data.masks) if m == MASKED])
    assert "Thinking" not in masked


def test_a_template_that_renders_no_reasoning_leaves_reasoning_rollouts_out(tmp_path, caplog):
    # Llama 3.1's template has no place for reasoning: a reply that carries some would be
    # trained without it, so that rollout is left out (and the start-up probe says so).
    tokenizer = family_tokenizer(tmp_path, "llama3.1")
    with caplog.at_level("WARNING"):
        check_tool_calls_rendered(tokenizer, "llama", token_mode=False)
    assert "cannot render replies with reasoning as generated" in caplog.text
    with pytest.raises(ChatTemplateError, match=r"the reasoning 'Thinking about step 1\.'"):
        tokenize_conversation(tokenizer, with_reasoning(CONVERSATION), TOOLS)


def with_server_ids(messages: list[dict]) -> list[dict]:
    """The conversation with the call ids an OpenAI-style server gives: ``call_`` + 24 hex."""
    long = {f"call0000{n}": f"call_{n:024x}" for n in (1, 2)}
    out = []
    for m in messages:
        m = dict(m, tool_call_id=long[m["tool_call_id"]]) if "tool_call_id" in m else m
        calls = [dict(c, id=long[c["id"]]) for c in m.get("tool_calls") or []]
        out.append(dict(m, tool_calls=calls) if calls else m)
    return out


def test_mistral_trains_the_calls_of_a_server_that_gives_long_call_ids(tmp_path, caplog):
    # Mistral's template refuses any id but 9 characters; servers often give call_ + 24 hex.
    tokenizer = family_tokenizer(tmp_path, "mistral v0.3")
    with caplog.at_level("INFO"):
        check_tool_calls_rendered(tokenizer, "mistral", token_mode=False)
    assert "takes only 9-character call ids" in caplog.text
    conversation = with_server_ids(CONVERSATION)
    data = tokenize_conversation(tokenizer, conversation, TOOLS)
    runs = trained_text(tokenizer, data.tokens, data.masks)
    assert untrained_tool_calls(conversation, runs) == []
    # Each id is rendered as the same 9 characters in its call and in its result.
    rendered = tokenizer.decode(data.tokens)
    ids = re.findall(r'"id": "([^"]*)"', rendered)
    assert [len(i) for i in ids] == [9, 9] and ids[0] != ids[1]
    assert all(i.isalnum() for i in ids)
    assert re.findall(r'"call_id": "([^"]*)"', rendered) == ids
    # Ids of 9 characters (vLLM's Mistral parser gives them) stay as they are.
    rendered = tokenizer.decode(tokenize_conversation(tokenizer, CONVERSATION, TOOLS).tokens)
    assert re.findall(r'"id": "([^"]*)"', rendered) == ["call00001", "call00002"]


def test_templates_that_take_any_call_id_render_the_servers_ids(tmp_path, caplog):
    tokenizer = family_tokenizer(tmp_path, "chatml-tools (built-in)")
    tokenizer.chat_template = tokenizer.chat_template.replace(
        "'<tool_call>\\n", "'<tool_call id=' + call['id'] + '>\\n"
    )
    with caplog.at_level("INFO"):
        check_tool_calls_rendered(tokenizer, "ids", token_mode=False)
    assert "call ids" not in caplog.text
    data = tokenize_conversation(tokenizer, with_server_ids(CONVERSATION), TOOLS)
    assert data.trained_spans[0].startswith(f"<tool_call id=call_{1:024x}>")


def test_kimi_k2_gets_the_call_ids_that_carry_the_names(tmp_path, caplog):
    # Kimi K2's template prints the id where the call's name belongs (functions.NAME:IDX, as
    # vLLM's Kimi parser gives it); other servers' ids would leave the name out.
    tokenizer = family_tokenizer(tmp_path, "kimi k2")
    with caplog.at_level("INFO"):
        check_tool_calls_rendered(tokenizer, "kimi", token_mode=False)
    assert "prints the call id where the call's name belongs" in caplog.text
    rendered = tokenizer.decode(
        tokenize_conversation(tokenizer, with_server_ids(CONVERSATION), TOOLS).tokens
    )
    assert re.findall(r"<\|tool_call_begin\|>([^<]*)<", rendered) == [
        "functions.read_file:0",
        "functions.write_file:1",
    ]
    assert re.findall(r"## Return of (\S*)", rendered) == [
        "functions.read_file:0",
        "functions.write_file:1",
    ]
    # Ids in that form already (the model's own) stay as they are.
    own = [
        dict(m, tool_calls=[dict(c, id="functions.read_file:7") for c in m["tool_calls"]])
        if m.get("tool_calls")
        else dict(m, tool_call_id="functions.read_file:7")
        if m["role"] == "tool"
        else m
        for m in CONVERSATION[:3]
    ]
    rendered = tokenizer.decode(tokenize_conversation(tokenizer, own, TOOLS).tokens)
    assert "<|tool_call_begin|>functions.read_file:7<" in rendered


def test_encode_adds_no_special_tokens_and_reads_encoding_objects(tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(build_offline_tokenizer(tmp_path / "tok"))
    text = "<|im_start|>user\nhi<|im_end|>\n"
    assert encode(tokenizer, text) == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(encode(tokenizer, text)) == text
    assert encode(tokenizer, "") == []

    class EncodingTokenizer:  # tokenizers whose encode returns a BatchEncoding-like dict
        def encode(self, text, add_special_tokens):
            return {"input_ids": tokenizer.encode(text, add_special_tokens=add_special_tokens)}

    assert encode(EncodingTokenizer(), text) == encode(tokenizer, text)


@pytest.mark.parametrize(
    ("server_type", "switch", "not_said"),
    [
        ("vllm", "--env.inference_api completions", "server_type vllm"),
        ("sglang", "--env.inference_api generate", "server_type sglang"),
        ("openai", "--openai.server_type vllm", None),
    ],
)
def test_the_refusal_names_the_switch_to_token_mode_for_the_server_in_use(
    tmp_path, server_type, switch, not_said
):
    # A vLLM server sampled through its chat API is vllm already: the switch is the API.
    tokenizer = family_tokenizer(tmp_path, "smollm2 (plain ChatML)")
    with pytest.raises(ChatTemplateDropsToolCalls) as caught:
        check_tool_calls_rendered(tokenizer, "smollm2", token_mode=False, server_type=server_type)
    message = str(caught.value)
    assert "drops tool calls" in message and switch in message
    assert "\n" not in message
    if not_said:
        assert not_said not in message
