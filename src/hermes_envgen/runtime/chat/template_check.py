"""The start-up check of a chat template: refuse, in one line, one whose training data is wrong.

Many models' templates (plain ChatML, as SmolLM2's) render only ``content``: an assistant turn
that calls a tool becomes an empty turn, the tool results vanish, and the model would be
trained to stop calling tools. So at start-up the probe conversation (``template_data``) is
turned into training data as a rollout is, and the env refuses to start, in one line, when that
data would be wrong. ``prepare_chat_template`` first applies the ``chat_template`` setting (a
built-in template or a Jinja file) and the template variables (``enable_thinking``...).
"""

from __future__ import annotations

import logging
from typing import Any

from hermes_envgen.runtime.chat.template_data import (
    PARALLEL,
    PROBE_DESCRIPTION,
    PROBE_RESULT,
    PROBE_TOOLS,
    SEQUENTIAL,
    TEXT_BESIDE_CALL,
    resolve_chat_template,
    with_reasoning,
)
from hermes_envgen.runtime.chat.template_render import (
    NAMED,
    SHORT,
    as_sent,
    call_id_style,
    end_marker,
    for_template,
    render,
    set_template_kwargs,
    text_after_turn,
)
from hermes_envgen.runtime.chat.trajectory import tokenize_conversation, untrained_tool_calls
from hermes_envgen.runtime.errors import (
    ChatTemplateError,
    EnvConfigError,
    GenerationPromptNotContinued,
)

logger = logging.getLogger(__name__)

_FIX = (
    "Fix: --env.chat_template hermes (or qwen, chatml-tools, or a Jinja file in the model's "
    "tool-call format)"
)


def _token_mode(server_type: str) -> str:
    """Token mode, named by the setting that switches to it.

    It is the inference API that decides, not the server type: a vLLM server sampled through
    its chat API trains on the rendered conversation too.
    """
    if server_type == "vllm":
        return "token mode: --env.inference_api completions (stock vLLM's /v1/completions)"
    if server_type == "sglang":
        return "token mode: --env.inference_api generate (SGLang's /generate)"
    return (
        "token mode, on a self-hosted vLLM or SGLang server (--openai.server_type vllm "
        "with --env.inference_api completions, or sglang with generate)"
    )


def _or_token_mode(server_type: str) -> str:
    """The other way out, after the chat_template fix."""
    return ", or " + _token_mode(server_type)


class ChatTemplateDropsToolCalls(EnvConfigError):
    """The chat template leaves tool calls or tool results out of the rendered conversation."""


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def check_tool_calls_rendered(
    tokenizer: Any,
    name: str,
    *,
    token_mode: bool,
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
    training data with the reason, never trained wrong. In ``token_mode`` the
    trained tokens are the model's own: the template must render the tool results after them.
    """
    where = f"the chat template of {name!r}"
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    probe = [*system, *SEQUENTIAL]
    try:
        full = render(tokenizer, for_template(tokenizer, probe), PROBE_TOOLS, False)
    except Exception as exc:  # Jinja errors, and templates that raise on purpose
        raise ChatTemplateDropsToolCalls(
            f"{where} fails on a tool call ({_first_line(exc)}): tool-using rollouts cannot "
            f"become training data. {_FIX}"
        ) from None
    if PROBE_RESULT not in full:
        raise ChatTemplateDropsToolCalls(
            f"{where} drops tool results: the training data and the prompts would lack what "
            f"the tools returned. {_FIX}"
        )
    if PROBE_DESCRIPTION not in full:
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
    if token_mode:
        _check_continuation(tokenizer, where, probe)
        return
    or_token_mode = _or_token_mode(server_type)
    try:
        tokenize_conversation(tokenizer, probe, PROBE_TOOLS)
    except GenerationPromptNotContinued as exc:
        opening = _unfinished_opening(tokenizer, probe)
        if opening is not None and not _renders_reasoning(tokenizer, system):
            # QwQ's, the R1 distills': the prompt opens the think block, and no reply's
            # reasoning is ever rendered, so what the model wrote in it and how it closed it
            # are lost; no template override in another format can give them back.
            raise ChatTemplateDropsToolCalls(
                f"{where} opens each reply in its generation prompt ({opening!r}), which its "
                "rendered replies do not start with, and renders no reply's reasoning: chat "
                "mode cannot rebuild the text the model generated after that prompt. Fix: "
                f"{_token_mode(server_type)}"
            ) from None
        raise ChatTemplateDropsToolCalls(f"{where}: {exc}. {_FIX}{or_token_mode}") from None
    except ChatTemplateError as exc:
        replies = [m for m in probe if m["role"] == "assistant"]
        turns = _rendered_turns(tokenizer, probe)
        if turns is not None and untrained_tool_calls(replies, turns):
            raise ChatTemplateDropsToolCalls(
                f"{where} drops tool calls: tool-call turns would train as empty turns, "
                f"teaching the model to stop calling tools. {_FIX}{or_token_mode}"
            ) from None
        raise ChatTemplateDropsToolCalls(
            f"{where} cannot give tool-call turns as generated ({_first_line(exc)}). "
            f"{_FIX}{or_token_mode}"
        ) from None
    for what, conversation in (
        ("two tool calls in one turn", PARALLEL),
        ("text beside a tool call", TEXT_BESIDE_CALL),
        ("reasoning", with_reasoning(SEQUENTIAL)),
    ):
        try:
            tokenize_conversation(tokenizer, [*system, *conversation], PROBE_TOOLS)
        except ChatTemplateError as exc:
            logger.warning(
                "%s cannot render replies with %s as generated (%s): such rollouts are left "
                "out of the training data (%s%s)",
                where,
                what,
                _first_line(exc),
                _FIX,
                or_token_mode,
            )


def _unfinished_opening(tokenizer: Any, probe: list[dict]) -> str | None:
    """The generation prompt of the probe's first reply when the rendered reply does not
    start with it (QwQ's ``<|im_start|>assistant\\n<think>\\n``), else None."""
    shaped = as_sent(for_template(tokenizer, probe))
    at = next(i for i, m in enumerate(shaped) if m["role"] == "assistant")
    try:
        plain = render(tokenizer, shaped[:at], PROBE_TOOLS, False)
        prompt = render(tokenizer, shaped[:at], PROBE_TOOLS, True)
        ended = render(tokenizer, shaped[: at + 1], PROBE_TOOLS, False)
    except Exception:  # Jinja errors: no generation prompt to name
        return None
    if not prompt.startswith(plain) or not ended.startswith(plain):
        return None
    opening = prompt[len(plain) :]
    return opening if opening and not ended[len(plain) :].startswith(opening) else None


def _renders_reasoning(tokenizer: Any, system: list[dict]) -> bool:
    """Whether the template renders the reasoning of a reply that ends the conversation."""
    reply = with_reasoning(SEQUENTIAL[:2])
    try:
        text = render(tokenizer, for_template(tokenizer, [*system, *reply]), PROBE_TOOLS, False)
    except Exception:  # Jinja errors: nothing rendered
        return False
    return reply[1]["reasoning_content"] in text


def _rendered_turns(tokenizer: Any, messages: list[dict]) -> list[str] | None:
    """Each assistant turn of ``messages`` as the template renders it after its prompt."""
    shaped = as_sent(for_template(tokenizer, messages))
    turns = []
    try:
        for index, message in enumerate(shaped):
            if message["role"] == "assistant":
                before = render(tokenizer, shaped[:index], PROBE_TOOLS, True)
                after = render(tokenizer, shaped[: index + 1], PROBE_TOOLS, False)
                turns.append(after[len(before) :] if after.startswith(before) else after)
    except Exception:  # Jinja errors: the caller says the template cannot give the turns
        return None
    return turns


def _check_continuation(tokenizer: Any, where: str, probe: list[dict]) -> None:
    """Refuse a template that cannot render tool results after a turn (token mode's prompts)."""
    shaped = for_template(tokenizer, probe)
    at = next(i for i, m in enumerate(shaped) if m["role"] == "assistant")
    try:
        turn = render(tokenizer, shaped[: at + 1], PROBE_TOOLS, False)
        before = render(tokenizer, shaped[:at], PROBE_TOOLS, True)
        marker = end_marker(tokenizer, turn[len(before) :] if turn.startswith(before) else turn)
        new = text_after_turn(
            tokenizer,
            shaped[: at + 1],
            shaped[at + 1 : at + 2],
            PROBE_TOOLS,
            marker,
            marker_generated=True,
            gen=True,
        )
    except Exception as exc:  # ChatTemplateError, Jinja errors
        raise ChatTemplateDropsToolCalls(
            f"{where} cannot render tool results after a turn ({_first_line(exc)}): the "
            f"prompts of tool-using rollouts cannot be built. {_FIX}"
        ) from None
    if PROBE_RESULT not in new:
        raise ChatTemplateDropsToolCalls(
            f"{where} drops tool results after a turn: the prompts would lack what the tools "
            f"returned. {_FIX}"
        )


def prepare_chat_template(
    tokenizer: Any,
    setting: str | None,
    name: str,
    *,
    token_mode: bool,
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
        token_mode=token_mode,
        system_prompt=system_prompt,
        server_type=server_type,
    )
