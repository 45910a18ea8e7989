"""Scripts for the stub server: what a scripted model says, turn by turn, in each conversation.

A script in YAML or JSON::

    model: stub-model
    conversations:
      - match: "count the lines"          # a regex searched in the first user message
        turns:
          - tool_calls: [{name: terminal, arguments: {command: "wc -l data.txt"}}]
          - content: "There are 3 lines."
      - turns:                            # no match: handed out in order to new conversations
          - content: "I don't know."
    default:                              # optional: when nothing else applies
      turns: [{content: "I cannot help with that."}]

A turn has ``content`` and/or ``tool_calls`` (each ``name`` plus ``arguments`` as an object, or
as a string sent as it is, valid JSON or not), and optionally ``reasoning``,
``finish_reason`` and ``text``: what token-mode endpoints generate for the turn, its end-of-turn
token included, in the model's own format (by default the Hermes ``<tool_call>`` form, then the
tokenizer's end-of-sequence token). A conversation that runs past its last turn repeats the
last turn. When several conversations match a prompt, new conversations get them in turn. A
prompt that no conversation matches, with no default, gets a fixed text answer.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hermes_envgen.errors import ScriptError


@dataclass
class ScriptedCall:
    name: str
    arguments: str  # sent to the client exactly as written


@dataclass
class ScriptedTurn:
    content: str | None = None
    tool_calls: list[ScriptedCall] = field(default_factory=list)
    reasoning: str | None = None
    finish_reason: str | None = None
    text: str | None = None  # the raw generation of token-mode endpoints, end token included


@dataclass
class ScriptedConversation:
    turns: list[ScriptedTurn]
    match: re.Pattern | None = None

    def turn(self, index: int) -> ScriptedTurn:
        return self.turns[min(index, len(self.turns) - 1)]


# The answer to a prompt no conversation covers (health checks, say): a real server answers too.
UNSCRIPTED = ScriptedConversation(
    [ScriptedTurn(content="(the stub's script has no conversation for this prompt)")]
)


class Script:
    """A parsed, validated script."""

    def __init__(
        self,
        conversations: list[ScriptedConversation],
        default: ScriptedConversation | None = None,
        model: str = "stub-model",
    ) -> None:
        if not conversations and default is None:
            raise ScriptError("the script has no conversations and no default")
        self.conversations = conversations
        self.default = default
        self.model = model
        self._in_order = [i for i, c in enumerate(conversations) if c.match is None]
        self._handed_out: dict[tuple[int, ...], int] = {}
        self._lock = threading.Lock()

    @classmethod
    def load(cls, source: str | Path | dict | Script) -> Script:
        """A script from a dict, a YAML/JSON file path, or a Script (returned as it is)."""
        if isinstance(source, Script):
            return source
        if isinstance(source, dict):
            return cls.from_data(source)
        path = Path(source)
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise ScriptError(f"cannot read script {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ScriptError(f"script {path} is not valid YAML/JSON: {exc}") from None
        return cls.from_data(data, where=str(path))

    @classmethod
    def from_data(cls, data: Any, where: str = "script") -> Script:
        if not isinstance(data, dict):
            raise ScriptError(f"{where}: expected a mapping with 'conversations'")
        unknown = set(data) - {"model", "conversations", "default"}
        if unknown:
            raise ScriptError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        conversations = data.get("conversations") or []
        if not isinstance(conversations, list):
            raise ScriptError(f"{where}.conversations: expected a list")
        parsed = [
            _conversation(c, f"{where}.conversations[{i}]") for i, c in enumerate(conversations)
        ]
        default = data.get("default")
        return cls(
            parsed,
            _conversation(default, f"{where}.default") if default is not None else None,
            model=str(data.get("model", "stub-model")),
        )

    def select(
        self, first_user_message: str, known_index: int | None
    ) -> tuple[int, ScriptedConversation]:
        """The conversation a request belongs to: by id marker, by match, in order, or default.

        Several conversations may match one prompt: new conversations get them in turn, so
        the rollouts of one group can follow different scripts (some solve, some fail).
        """
        if known_index is not None and 0 <= known_index < len(self.conversations):
            return known_index, self.conversations[known_index]
        candidates = self.candidates(first_user_message)
        if candidates:
            with self._lock:
                turn = self._handed_out.get(candidates, 0)
                self._handed_out[candidates] = turn + 1
            index = candidates[turn % len(candidates)]
            return index, self.conversations[index]
        if self.default is not None:
            return -1, self.default
        return -1, UNSCRIPTED

    def candidates(self, first_user_message: str) -> tuple[int, ...]:
        """The conversations a new conversation with this prompt may get: matching, or in order."""
        return tuple(
            i
            for i, conversation in enumerate(self.conversations)
            if conversation.match is not None and conversation.match.search(first_user_message)
        ) or tuple(self._in_order)


def _conversation(data: Any, where: str) -> ScriptedConversation:
    if not isinstance(data, dict):
        raise ScriptError(f"{where}: expected a mapping with 'turns'")
    unknown = set(data) - {"match", "turns"}
    if unknown:
        raise ScriptError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    turns = data.get("turns")
    if not isinstance(turns, list) or not turns:
        raise ScriptError(f"{where}.turns: expected a non-empty list of turns")
    match = data.get("match")
    pattern = None
    if match is not None:
        try:
            pattern = re.compile(str(match), re.S)
        except re.error as exc:
            raise ScriptError(f"{where}.match: invalid regular expression: {exc}") from None
    return ScriptedConversation(
        [_turn(t, f"{where}.turns[{i}]") for i, t in enumerate(turns)], pattern
    )


def _turn(data: Any, where: str) -> ScriptedTurn:
    if not isinstance(data, dict):
        raise ScriptError(f"{where}: expected a mapping with 'content' and/or 'tool_calls'")
    unknown = set(data) - {"content", "tool_calls", "reasoning", "finish_reason", "text"}
    if unknown:
        raise ScriptError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    if data.get("content") is None and not data.get("tool_calls"):
        raise ScriptError(f"{where}: a turn needs 'content' or 'tool_calls'")
    calls = data.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ScriptError(f"{where}.tool_calls: expected a list")
    parsed = []
    for i, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ScriptError(f"{where}.tool_calls[{i}]: expected a mapping with a 'name'")
        arguments = call.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        parsed.append(ScriptedCall(call["name"], arguments))
    content = data.get("content")
    return ScriptedTurn(
        content=None if content is None else str(content),
        tool_calls=parsed,
        reasoning=data.get("reasoning"),
        finish_reason=data.get("finish_reason"),
        text=None if data.get("text") is None else str(data["text"]),
    )
