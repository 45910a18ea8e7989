"""Token mode: exact token ids and logprobs from vLLM or SGLang, tool calls parsed here.

With a token-mode ``inference_api`` (see :mod:`hermes_envgen.runtime.inference`) the agent
loop talks to the server token-in, token-out: ``ExactTokensBackend`` keeps one ``TokenTrace``
per rollout (token ids, masks, logprobs), sends the whole trace as the prompt of every turn
through ``tokens_and_logprobs_completion`` (stock vLLM's ``/v1/completions`` with a token-id
prompt, or ``/generate`` on Atropos's vLLM server and SGLang), appends
the generated tokens as they came back, and reads tool calls from the generated text with the
configured client-side parser. Between two turns only the tokens of what is new (the chat
template's end of the assistant turn, the tool results, the next generation prompt) are
appended, masked. The trace therefore is exactly what the model saw and produced, every turn
in one sequence, and only model-generated tokens are trained.

Why not atroposlib 0.4.0's ``ManagedServer`` (``server.managed_server()``): it is built on the
same ``tokens_and_logprobs_completion`` call, but re-renders the whole conversation as text
every turn and matches it against the previous turn's text, which breaks a multi-turn tool
rollout in three ways: without vLLM installed (its tool parsers come from vLLM) it drops
``tools`` from the chat template, so the model never sees the tool definitions; it decodes the
completion without special tokens, so the next prompt repeats the end-of-turn token the model
already generated; and when the template does not re-render a turn character for character
(other JSON spacing, stripped reasoning) it starts a new sequence with the earlier turns masked.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from hermes_envgen.runtime.chat.template_render import (
    encode,
    end_marker,
    for_template,
    render,
    text_after_turn,
)
from hermes_envgen.runtime.errors import ChatTemplateError
from hermes_envgen.runtime.parsers import ToolCallParser, detect_formats, get_parser
from hermes_envgen.runtime.rollout import AssistantTurn, TokenTrace

# TokenTrace lives in rollout.py: the trace travels out of the loop in AgentResult.
__all__ = ["ExactTokensBackend", "parse_failure", "split_reasoning"]

logger = logging.getLogger(__name__)


class TokenServer(Protocol):
    """What the backend needs of a server: atroposlib's ServerManager and APIServer fit."""

    async def tokens_and_logprobs_completion(
        self, *, input_ids: list[int], **kwargs: Any
    ) -> tuple[list[int], list[list[int]], list[list[float]], list[str | None]]: ...


def parse_failure(parser: ToolCallParser, text: str, reason: str | None = None) -> str | None:
    """Why ``text`` (which gave no call) looks like a failed call of the parser's format, or None.

    A parser answers ``(text, None)`` both for prose and for a call it cannot read; the
    parser's own ``reason`` or else the format's markers tell them apart. ``detect_formats``
    is structural where markers are not (a Llama JSON call must start the message, a mere
    ``{`` in prose does not count).
    """
    if reason is None:
        if not parser.markers or not any(marker in text for marker in parser.markers):
            return None
        if not detect_formats(text):
            return None
    because = f" ({reason})" if reason else ""
    return (
        f"your tool call could not be parsed{because}, so nothing was run. "
        f"The format of a call: {parser.format}"
    )


def split_reasoning(text: str) -> tuple[str | None, str]:
    """``(reasoning, rest)`` of generated text whose reasoning ends with ``</think>``."""
    head, sep, rest = text.partition("</think>")
    if not sep:
        return None, text
    reasoning = head.strip().removeprefix("<think>").strip()
    return reasoning or None, rest.lstrip()


class ExactTokensBackend:
    """Token mode's backend of ``HermesAgentLoop``: a rollout's exact tokens, its calls parsed here.

    Use one instance per rollout; ``trace`` holds its tokens, masks and logprobs.
    """

    def __init__(
        self,
        server: TokenServer,
        tokenizer: Any,
        tool_call_parser: str | ToolCallParser = "hermes",
        *,
        default_max_tokens: int | None = None,
    ) -> None:
        self.server = server
        self.tokenizer = tokenizer
        self.parser = (
            get_parser(tool_call_parser) if isinstance(tool_call_parser, str) else tool_call_parser
        )
        # Native /generate defaults are short (vLLM's SamplingParams: 16 tokens): send a limit.
        self.default_max_tokens = default_max_tokens
        self.trace = TokenTrace()
        self._assistant_at: int | None = None  # index the last generated message will take
        self._special_ids = set(getattr(tokenizer, "all_special_ids", None) or [])

    def reset(self) -> None:
        """Forget the trace, to start another rollout."""
        self.trace = TokenTrace()
        self._assistant_at = None

    async def complete(self, messages: list[dict], **kwargs: Any) -> AssistantTurn:
        """Generate the next assistant turn from the trace plus the messages added since."""
        tools = kwargs.pop("tools", None)
        kwargs.pop("tool_choice", None)  # tools are in the rendered prompt; parsed here
        kwargs.update(kwargs.pop("extra_body", None) or {})  # sampling fields go in the body
        kwargs.pop("chat_template_kwargs", None)  # the prompt is rendered here, with them
        if kwargs.get("max_tokens") is None:
            kwargs.pop("max_tokens", None)
            if self.default_max_tokens is not None:
                kwargs["max_tokens"] = self.default_max_tokens
        kwargs["n"] = 1
        if self._assistant_at is None:
            new_text = self._render(messages, tools, generation_prompt=True)
        else:
            new_text = self._continuation(messages, tools)
        new_ids = self._encode(new_text)
        prompt = self.trace.tokens + new_ids
        _, outputs, logprobs, finish_reasons = await self.server.tokens_and_logprobs_completion(
            input_ids=list(prompt), **kwargs
        )
        if not outputs:
            raise RuntimeError("the server returned no completion")
        output_ids = [int(t) for t in outputs[0]]
        # Nothing is kept before the server has answered, so a failed request can be retried.
        self.trace.add_prompt(new_ids)
        self.trace.add_generated(output_ids, list(logprobs[0]) if logprobs else [])
        self._assistant_at = len(messages)
        return self._turn(output_ids, _finish_reason(finish_reasons), tools)

    def _turn(
        self, output_ids: list[int], finish_reason: str | None, tools: list[dict] | None = None
    ) -> AssistantTurn:
        """The assistant turn in generated tokens: reasoning, content, parsed tool calls.

        ``tools`` are the definitions offered this turn: raw-text formats type values by them.
        """
        text_ids = output_ids
        if output_ids and output_ids[-1] in self._special_ids:
            text_ids = output_ids[:-1]  # the end-of-turn token is no part of the text
        raw = self.tokenizer.decode(text_ids, skip_special_tokens=False)
        reasoning, body = split_reasoning(raw)
        outcome = self.parser.read(body, tools)
        content, calls = outcome.content, outcome.tool_calls
        # A settled outcome (markup only quoted, or a channel format's answer) is no failure.
        settled = calls or outcome.settled
        error = None if settled else parse_failure(self.parser, body, outcome.error)
        if calls and finish_reason in (None, "stop"):
            finish_reason = "tool_calls"
        return AssistantTurn(
            content=body if error else content or "",
            tool_calls=calls or [],
            # Channel formats (gpt-oss) carry reasoning apart: their parser splits it out.
            reasoning=outcome.reasoning or reasoning,
            finish_reason=finish_reason,
            parse_error=error,
        )

    def _continuation(self, messages: list[dict], tools: list[dict] | None) -> str:
        """The text after the last generated token: the end of that turn, then what is new.

        It is read from the template's rendering of the whole conversation after the end of
        the last turn (see ``text_after_turn``), so a template that renders old turns
        otherwise (Qwen3 drops old reasoning and the last turn's empty think block) changes
        nothing: the generated tokens stay as they were, only the new text is taken.
        """
        at = self._assistant_at
        if at is None or len(messages) <= at or messages[at].get("role") != "assistant":
            raise ValueError("the messages do not continue the conversation this backend traced")
        last = self.trace.tokens[-1] if self.trace.turns else None
        generated_end = last is not None and last in self._special_ids
        if generated_end:
            marker = self.tokenizer.decode([last], skip_special_tokens=False)
        else:  # cut short: the template's own end of the turn, which the prompt then gets
            before = self._render(messages[:at], tools, generation_prompt=True)
            turn = self._render(messages[: at + 1], tools, generation_prompt=False)
            marker = end_marker(self.tokenizer, turn[len(before) :])
        generated = self.tokenizer.decode(self.trace.generated()[-1], skip_special_tokens=False)
        shaped = for_template(self.tokenizer, messages)
        try:
            return text_after_turn(
                self.tokenizer,
                shaped[: at + 1],
                shaped[at + 1 :],
                tools,
                marker,
                marker_generated=generated_end,
                gen=True,
                markers_in_turn=generated.count(marker) if marker else 1,
            )
        except ChatTemplateError:
            raise
        except Exception as exc:  # Jinja errors, and templates that raise on purpose
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ChatTemplateError(f"the chat template cannot render the turn: {reason}") from None

    def _render(
        self, messages: list[dict], tools: list[dict] | None, generation_prompt: bool
    ) -> str:
        """The messages as chat-template text, tool-call arguments as the template prints them."""
        if not messages:
            return ""
        return render(
            self.tokenizer, for_template(self.tokenizer, messages), tools, generation_prompt
        )

    def _encode(self, text: str) -> list[int]:
        """Token ids of template text; the template writes any BOS itself."""
        return encode(self.tokenizer, text)


def _finish_reason(finish_reasons: list) -> str | None:
    """The first finish reason as a string (SGLang sends ``{"type": "stop", ...}``)."""
    if not finish_reasons:
        return None
    reason = finish_reasons[0]
    if isinstance(reason, dict):
        reason = reason.get("type")
    return reason if isinstance(reason, str) else None
