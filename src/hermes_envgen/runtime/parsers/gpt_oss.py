"""gpt-oss's harmony format: messages on channels, calls addressed ``to=functions.NAME``.

What the model generates after its prompt's ``<|start|>assistant``, e.g.::

    <|channel|>analysis<|message|>REASONING<|end|><|start|>assistant<|channel|>commentary
    to=functions.NAME <|constrain|>json<|message|>{...}<|call|>

(one line: the break is only for this page)
or an answer, ``...<|start|>assistant<|channel|>final<|message|>ANSWER<|return|>``. Each
message is a header (role, ``<|channel|>`` and channel, recipient ``to=...`` before or after the
channel, content type ``json`` or ``<|constrain|>json``), ``<|message|>``, a body, and an end:
``<|end|>``, ``<|call|>``, ``<|return|>``, or the end of the text (where the server stripped the
stop token). The ``analysis`` channel is reasoning and surfaces as ``reasoning``, never as the
answer; ``final`` and ``commentary`` messages without a recipient (preambles) are the content.
Unlike the other formats, the content is split out even when there is no call.

On purpose, as for the other formats: a message addressed to a function whose arguments are
not one complete JSON object, or that has text after them, is an unreadable call the model is
told about, never a call with arguments lost; so is a message to a recipient that is no
function (``to=python``, ``to=browser.search``: built-in tools no env offers), and a message
in the output from another role (the model writing a tool's answer itself). Text that does
not open with a harmony header is no harmony output: prose quoting the markup is no call.
The markers are special tokens, so a call inside Markdown code is still a call.

``openai-harmony`` (OpenAI's parser) is not used here: it parses token ids of its own
``o200k_harmony`` encoding, and loading that encoding downloads the vocabulary file at run
time, which fails offline (``HarmonyError: error downloading or loading vocab file``).
"""

from __future__ import annotations

import re
from typing import Any

from ._scan import TextScan, earliest, is_valid_name, skip_ws
from .base import ParseOutcome, ToolCallParser, UnreadableCall, make_tool_call, register_parser
from .schema import ToolSchemas

__all__ = ["GptOssParser"]

START = "<|start|>"
END = "<|end|>"
MESSAGE = "<|message|>"
CHANNEL = "<|channel|>"
CONSTRAIN = "<|constrain|>"
RETURN = "<|return|>"
CALL = "<|call|>"
FUNCTIONS = "functions."

# Real headers are a few dozen characters; the bound keeps a header's regex cheap on junk.
_MAX_HEADER = 512
_RECIPIENT = r"[^\s<>]+"
# role [to=R] [<|channel|>CHANNEL] [to=R] [[<|constrain|>]TYPE]; no nested repetition.
_HEADER = re.compile(
    rf"(?P<role>[A-Za-z_][\w.\-]*)?"
    rf"(?:[ \t]*to=(?P<to1>{_RECIPIENT}))?"
    rf"[ \t]*(?:<\|channel\|>(?P<channel>\w+))?"
    rf"(?:[ \t]+to=(?P<to2>{_RECIPIENT}))?"
    rf"(?:[ \t]*(?:<\|constrain\|>)?(?P<ctype>[\w\-/.]+))?[ \t\n]*"
)
_ENDS = (END, CALL, RETURN, START)


class _Header:
    """One parsed message header."""

    __slots__ = ("channel", "recipient", "role")

    def __init__(self, role: str, channel: str | None, recipient: str | None) -> None:
        self.role, self.channel, self.recipient = role, channel, recipient


def _header(text: str, start: int, stop: int, first: bool) -> _Header | None:
    """The header in ``text[start:stop]``, or None when it is no harmony header."""
    start = skip_ws(text, start, stop)
    if stop - start > _MAX_HEADER:
        return None
    match = _HEADER.fullmatch(text, start, stop)
    if match is None or not (match["role"] or match["channel"] or match["to1"]):
        return None
    role = match["role"]
    if role is None and not first:
        return None  # after <|start|> the role comes first
    if first and role not in (None, "assistant"):
        return None  # the output opens with prose, not with the assistant's header
    if match["to1"] and match["to2"]:
        raise UnreadableCall("a message header names two recipients")
    if role is not None and match["channel"] is None and match["ctype"] and not match["to1"]:
        # "assistant json" without a channel: harmony writes the channel first.
        return None
    return _Header(role or "assistant", match["channel"], match["to1"] or match["to2"])


@register_parser("gpt_oss", "harmony")
class GptOssParser(ToolCallParser):
    """gpt-oss (harmony): analysis is reasoning, final/commentary the answer, calls by recipient."""

    format = (
        "<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.NAME <|constrain|>json<|message|>{...}<|call|> (harmony)"
    )
    markers = (MESSAGE,)

    def _parse(self, text: str, schemas: ToolSchemas) -> ParseOutcome:
        """Read the messages one by one; every call message must read whole."""
        scan = TextScan(text, schemas)
        n = len(text)
        pos = skip_ws(text, 0, n)
        if text.startswith(START, pos):
            pos += len(START)
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[dict[str, Any]] = []
        first = True
        while pos < n:
            message_at = scan.find(MESSAGE, pos)
            if message_at < 0:
                if first:
                    return ParseOutcome(text, None)
                if "to=" in text[pos : pos + _MAX_HEADER]:
                    raise UnreadableCall("the output is cut off in the header of a call")
                break  # cut off in the header of a message that says nothing yet
            header = _header(text, pos, message_at, first)
            if header is None:
                if first:
                    return ParseOutcome(text, None)  # no harmony output: prose quoting it
                raise UnreadableCall(f"the message header at character {pos} does not read")
            if header.role != "assistant":
                raise UnreadableCall(
                    f"the output holds a message from {header.role[:80]}: the model writes "
                    "only its own messages"
                )
            first = False
            body = message_at + len(MESSAGE)
            if header.recipient is not None:
                call, pos = self._call(scan, header.recipient, body)
                calls.append(call)
            else:
                stop = earliest(*(scan.find(end, body) for end in _ENDS))
                stop = n if stop < 0 else stop
                part = text[body:stop].strip()
                if part:
                    (reasoning if header.channel == "analysis" else content).append(part)
                pos = stop if text.startswith(START, stop) else self._past_end(text, stop)
            if pos >= n:
                break
            pos = skip_ws(text, pos, n)
            if text.startswith(START, pos):
                pos += len(START)
            elif pos < n:
                if calls:
                    raise UnreadableCall(f"text follows the end of a message at character {pos}")
                return ParseOutcome(text, None)  # not harmony output after all
        answer = "\n\n".join(content)
        thought = "\n\n".join(reasoning) or None
        if calls:
            return ParseOutcome(answer or None, calls, reasoning=thought)
        return ParseOutcome(answer, None, reasoning=thought, settled=True)

    @staticmethod
    def _past_end(text: str, stop: int) -> int:
        """Position after the end marker at ``stop`` (or ``stop`` at the end of the text)."""
        for end in (END, CALL, RETURN):
            if text.startswith(end, stop):
                return stop + len(end)
        return stop

    def _call(self, scan: TextScan, recipient: str, body: int) -> tuple[dict[str, Any], int]:
        """The call a message to ``recipient`` makes, and where its message ends."""
        text, n = scan.text, len(scan.text)
        if not recipient.startswith(FUNCTIONS):
            raise UnreadableCall(
                f"the message is addressed to {recipient[:80]}, which is no function; "
                "call a tool with to=functions.NAME"
            )
        name = recipient[len(FUNCTIONS) :]
        if not is_valid_name(name):
            raise UnreadableCall(f"{recipient[:80]} names no function")
        pos = skip_ws(text, body, n)
        if text.startswith(CALL, pos):
            arguments: dict[str, Any] = {}  # a call without arguments
            raw, stop = None, pos
        else:
            decoded = scan.object_at(pos)
            if decoded is None:
                raise UnreadableCall(
                    f"the arguments of the call to {name} are not one complete JSON object"
                )
            arguments, start, stop = decoded
            raw = text[start:stop]
        after = skip_ws(text, stop, n)
        if after < n and not text.startswith((CALL, END, START), after):
            raise UnreadableCall(f"text follows the arguments of the call to {name}")
        call = make_tool_call(name, arguments, raw=raw)
        if call is None:
            raise UnreadableCall(f"the call to {name} could not be read")
        if text.startswith(START, after):
            return call, after
        return call, self._past_end(text, after)
