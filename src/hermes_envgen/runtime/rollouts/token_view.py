"""The token view of one rollout: what a trainer is given of it, token by token.

Process mode's groups carry each rollout's exact token ids and masks (-100: not trained), and
in token mode the logprob the server sampled each token with. The view shows the tokens in
order, trained ones and masked ones apart, the chat template's special tokens as boundaries,
the logprob on hover, and each trained span beside the assistant turn it should hold, with
what does not line up said in words: a turn's text or tool call missing from its span (a
template that drops a call), a prompt's text inside a trained span (a mask that covers the
prompt), a span whose text re-tokenises to other ids than were sampled, masks that disagree
with their tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from hermes_envgen.runtime.rollouts.rollout_card import RolloutCard

MASKED = -100
# Logprobs of masked positions are written as 1.0 (no sample): not a logprob to show.
NO_LOGPROB = 1.0
MIN_PROMPT_TEXT = 12  # shorter user/tool texts ("ok", "6") may rightly recur in an answer
TOKEN_BUDGET = 100_000  # tokens drawn on one page; past it, rollouts say how to see theirs


class TokenText:
    """Token ids as text, through the run's tokenizer when there is one (each id decoded once)."""

    def __init__(self, tokenizer: Any | None) -> None:
        self.tokenizer = tokenizer
        self._pieces: dict[int, str] = {}
        self._shown: dict[int, str] = {}
        self.special: set[int] = set()
        if tokenizer is not None:
            self.special = set(getattr(tokenizer, "all_special_ids", None) or ())
            added = getattr(tokenizer, "added_tokens_decoder", None) or {}
            self.special |= {int(i) for i, t in added.items() if getattr(t, "special", True)}

    def piece(self, token: int) -> str:
        if self.tokenizer is None:
            return f"⟨{token}⟩"
        text = self._pieces.get(token)
        if text is None:
            try:
                text = self.tokenizer.decode([token])
            except Exception:  # an id outside this tokenizer's vocabulary
                text = f"⟨{token}?⟩"
            self._pieces[token] = text
        return text

    def shown(self, token: int) -> str:
        """The token's text as HTML: escaped, a line break marked, an empty one visible."""
        html = self._shown.get(token)
        if html is None:
            html = escape(self.piece(token)).replace("\n", "↵\n") or "∅"
            self._shown[token] = html
        return html

    def decode(self, tokens: list[int]) -> str | None:
        if self.tokenizer is None:
            return None
        try:
            return str(self.tokenizer.decode(tokens))
        except Exception:
            return None

    def encode(self, text: str) -> list[int] | None:
        if self.tokenizer is None:
            return None
        try:
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        except Exception:
            return None


@dataclass
class TrainedSpan:
    start: int
    tokens: list[int]
    text: str | None


@dataclass
class TokenReport:
    """What the view found in one rollout's training data."""

    spans: list[TrainedSpan]
    findings: list[str] = field(default_factory=list)


def trained_spans(tokens: list[int], masks: list[int], text: TokenText) -> list[TrainedSpan]:
    """The maximal runs of trained tokens, in order."""
    spans: list[TrainedSpan] = []
    start: int | None = None
    for index, mask in enumerate([*masks, MASKED]):
        if mask != MASKED and start is None:
            start = index
        elif mask == MASKED and start is not None:
            ids = tokens[start:index]
            spans.append(TrainedSpan(start, ids, text.decode(ids)))
            start = None
    return spans


def check_tokens(card: RolloutCard, text: TokenText) -> TokenReport:
    """Line the trained spans up with the assistant turns; say what does not fit."""
    tokens = [int(t) for t in card.tokens or []]
    masks = [int(m) for m in card.masks or []]
    findings: list[str] = []
    if len(masks) != len(tokens):
        findings.append(
            f"{len(tokens)} tokens but {len(masks)} masks: a trainer pairs them by position"
        )
        masks = (masks + [MASKED] * len(tokens))[: len(tokens)]
    disagree = sum(1 for t, m in zip(tokens, masks) if m not in (MASKED, t))
    if disagree:
        findings.append(
            f"{disagree} masks are neither -100 nor their token's id: atroposlib's masks "
            "repeat the id of each trained token"
        )
    spans = trained_spans(tokens, masks, text)
    turns = [m for m in card.messages if m.get("role") == "assistant"]
    if not spans:
        findings.append("no token is trained: this rollout teaches nothing")
    elif len(spans) != len(turns):
        findings.append(
            f"{len(spans)} trained spans for {len(turns)} assistant turns: they should be one each"
        )
    if text.tokenizer is None:
        return TokenReport(spans, findings)
    for number, (span, turn) in enumerate(zip(spans, turns), start=1):
        if span.text is None:
            continue
        missing = [
            what for what, piece in _turn_pieces(turn) if _flat(piece) not in _flat(span.text)
        ]
        for what in missing:
            findings.append(f"turn {number}: its {what} is not in trained span {number}")
    for message in card.messages:
        role = message.get("role")
        content = _flat(_content(message.get("content")))
        if role == "assistant" or len(content) < MIN_PROMPT_TEXT:
            continue
        for number, span in enumerate(spans, start=1):
            if span.text is not None and content in _flat(span.text):
                findings.append(
                    f"trained span {number} holds the {role} message "
                    f"“{content[:50]}”: the mask covers the prompt"
                )
                break
    for number, span in enumerate(spans, start=1):
        if span.text is None:
            continue
        again = text.encode(span.text)
        if again is not None and again != span.tokens:
            differ = sum(1 for a, b in zip(again, span.tokens) if a != b)
            differ += abs(len(again) - len(span.tokens))
            findings.append(
                f"trained span {number}: its text re-tokenises to other ids ({differ} of "
                f"{len(span.tokens)} positions differ, {len(again)} tokens instead of "
                f"{len(span.tokens)}): a trainer that re-tokenises trains other tokens than "
                "were sampled"
            )
    return TokenReport(spans, findings)


def _content(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _turn_pieces(turn: dict) -> list[tuple[str, str]]:
    """What an assistant turn's trained span must contain: its text and each call's name."""
    pieces = []
    content = _content(turn.get("content")).strip()
    if content:
        pieces.append(("text", content))
    for call in turn.get("tool_calls") or []:
        function = call.get("function", call) if isinstance(call, dict) else {}
        name = str(function.get("name", ""))
        if name:
            pieces.append((f"call {name}()", name))
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = None
        if isinstance(arguments, dict):
            for key, value in arguments.items():
                if isinstance(value, str) and value.strip() and "\\" not in json.dumps(value):
                    pieces.append((f"call {name}()'s {key} argument", value))
    return pieces


def token_view_html(card: RolloutCard, text: TokenText, budget: list[int]) -> str:
    """The card's token view, folded; ``budget`` is the page's tokens left (spent here)."""
    if card.tokens is None:
        return (
            '<p class="no-tokens">No token view: this record holds no tokens. Evaluation saves '
            "each rollout's conversation, not the token ids a trainer gets; the groups "
            "<code>process</code> writes hold them.</p>"
        )
    if len(card.tokens) > budget[0]:
        return (
            '<p class="no-tokens">Token view left out: this page already shows as many '
            "tokens as it can hold. Render from this rollout on with <code>hermes-envgen "
            "view FILE --tokens-from N</code>, N its number in the file.</p>"
        )
    budget[0] -= len(card.tokens)
    report = check_tokens(card, text)
    tokens = [int(t) for t in card.tokens]
    masks = [int(m) for m in card.masks or []]
    logprobs: Sequence[float] = card.logprobs or []
    trained = sum(1 for m in masks if m != MASKED)
    findings = "".join(f"<li>{escape(f)}</li>" for f in report.findings)
    warn = f" · {len(report.findings)} findings" if report.findings else " · lines up"
    stream = _stream(tokens, masks, logprobs, text)
    table = _alignment(card, report, text)
    no_text = (
        '<p class="note">Token ids only: give <code>--tokenizer</code> (the run\'s tokenizer) '
        "to see their text and line the spans up with the turns.</p>"
        if text.tokenizer is None
        else ""
    )
    return (
        f'<details class="tokens{" findings" * bool(report.findings)}"><summary>tokens · '
        f"{len(tokens)} ({trained} trained, {len(tokens) - trained} masked) · "
        f"{len(report.spans)} trained spans{escape(warn)}</summary>{no_text}"
        f'<ul class="findings">{findings}</ul>'
        '<p class="legend"><i class="t">trained</i> <i class="m">masked</i> '
        '<i class="m s">template token</i> (hover a token: its id and logprob)</p>'
        f'<div class="stream">{stream}</div>{table}</details>'
    )


def _stream(tokens: list[int], masks: list[int], logprobs: Sequence[float], text: TokenText) -> str:
    parts = []
    masked: dict[int, str] = {}  # a masked token's element depends on its id alone
    for index, token in enumerate(tokens):
        trained = index < len(masks) and masks[index] != MASKED
        if not trained and token in masked:
            parts.append(masked[token])
            continue
        css = ("t" if trained else "m") + (" s" * (token in text.special))
        title = f"id {token}"
        if trained:
            value = logprobs[index] if index < len(logprobs) else None
            if isinstance(value, (int, float)) and value != NO_LOGPROB:
                title += f" · logprob {value:.4f}"
        else:
            title += " · masked"
        element = f'<i class="{css}" title="{title}">{text.shown(token)}</i>'
        if not trained:
            masked[token] = element
        parts.append(element)
    return "".join(parts)


def _alignment(card: RolloutCard, report: TokenReport, text: TokenText) -> str:
    turns = [m for m in card.messages if m.get("role") == "assistant"]
    rows = []
    for number in range(max(len(turns), len(report.spans))):
        turn = turns[number] if number < len(turns) else None
        span = report.spans[number] if number < len(report.spans) else None
        said = "—" if turn is None else _turn_text(turn)
        if span is None:
            got = "— (no trained span)"
        elif span.text is None:
            got = f"{len(span.tokens)} tokens from #{span.start}"
        else:
            got = span.text
        rows.append(
            f"<tr><th>{number + 1}</th><td><pre>{escape(said)}</pre></td>"
            f"<td><pre>{escape(got)}</pre></td></tr>"
        )
    return (
        '<table class="align"><tr><th>turn</th><th>assistant turn (the conversation)</th>'
        f"<th>trained span (what is trained)</th></tr>{''.join(rows)}</table>"
    )


def _turn_text(turn: dict) -> str:
    lines = [_content(turn.get("content"))]
    for call in turn.get("tool_calls") or []:
        function = call.get("function", call) if isinstance(call, dict) else {}
        lines.append(f"→ {function.get('name', '?')}({function.get('arguments', '')})")
    return "\n".join(line for line in lines if line)


TOKEN_CSS = """
.no-tokens { margin: 0 14px 10px; color: var(--muted); font-size: 13px; }
details.tokens { margin: 0 14px 10px; }
details.tokens > summary { font-weight: 600; }
details.tokens.findings > summary { color: var(--bad); }
ul.findings { color: var(--bad); margin: 6px 0; padding-left: 20px; }
.legend { font-size: 12px; color: var(--muted); }
.stream { white-space: pre-wrap; overflow-wrap: anywhere; line-height: 1.9;
  font: 12px/1.9 ui-monospace, SFMono-Regular, Menlo, monospace; max-height: 520px;
  overflow: auto; border: 1px solid var(--line); border-radius: 6px; padding: 6px; }
.tokens i { font-style: normal; border-right: 1px solid rgba(0, 0, 0, .12); padding: 1px 0;
  font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
.tokens i.t { background: #c9f0d6; color: #0b4a27; }
.tokens i.m { background: #eef0f4; color: #98a2b3; }
.tokens i.s { background: #dfe3ff; color: #3b5bdb; font-weight: 700; }
.tokens i.t.s { background: #9fe3b8; color: #0b4a27; }
table.align { border-collapse: collapse; width: 100%; margin-top: 8px; table-layout: fixed; }
table.align th, table.align td { border-top: 1px solid var(--line); padding: 4px 6px;
  vertical-align: top; text-align: left; }
table.align th:first-child { width: 40px; }
"""
