"""Rollouts as one self-contained HTML page: ``hermes-envgen view``, and ``process`` beside its
groups (the reason this renderer is part of the runtime).

Reads an evaluation's samples.jsonl or failures.jsonl (a rollout per line) or atroposlib's
``process`` JSONL (a group per line, with ``messages`` and ``scores`` lists) and writes a page
with one card per rollout: the conversation, tool calls and their results folded, reward,
turns and errors, and client-side filters by reward and by error. Inline CSS and JS, nothing
fetched: it opens from disk, offline, and can be mailed around.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from hermes_envgen.errors import ViewError
from hermes_envgen.runtime.records import TOOL_ERROR_PREFIX as ERROR_PREFIX

logger = logging.getLogger(__name__)


@dataclass
class RolloutCard:
    """One rollout as the page shows it."""

    title: str
    messages: list[dict]
    reward: float | None
    turns: int
    tool_calls: int
    tool_errors: int
    failure: str | None = None
    facts: dict[str, str] = field(default_factory=dict)  # small extras: item key, task id, ...


def load_rollouts(path: str | Path) -> list[RolloutCard]:
    """The rollouts of a samples/failures JSONL or a ``process`` JSONL file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ViewError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ViewError(f"{path} is a directory: give the JSONL file inside it") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ViewError(f"cannot read {path}: {exc}") from None
    cards: list[RolloutCard] = []
    for number, line in enumerate(text.split("\n"), start=1):  # not at U+2028 in a string
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise ViewError(f"{path}, line {number}: not JSON (is this a JSONL file?)") from None
        if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
            raise ViewError(
                f"{path}, line {number}: neither a rollout nor a group (no 'messages' list)"
            )
        messages = record["messages"]
        if messages and isinstance(messages[0], list):
            cards += _group_cards(record, number)
        else:
            cards.append(_sample_card(record, len(cards) + 1))
    if not cards:
        raise ViewError(f"{path}: no rollouts in it")
    return cards


def _sample_card(record: dict, number: int) -> RolloutCard:
    """A card from one evaluation record (``Rollout.record()`` plus its key)."""
    messages = [m for m in record["messages"] if isinstance(m, dict)]
    reward = record.get("reward")
    facts = {
        name: str(record[name])
        for name in ("item_key", "sample_index", "task_id")
        if record.get(name) is not None
    }
    errors = record.get("tool_errors")
    return RolloutCard(
        title=f"#{number} {_first_user_text(messages)}",
        messages=messages,
        reward=float(reward) if isinstance(reward, (int, float)) else None,
        turns=int(record.get("turns_used") or _count(messages, "assistant")),
        tool_calls=int(record.get("tool_calls") or _count_calls(messages)),
        tool_errors=len(errors) if isinstance(errors, list) else _count_error_results(messages),
        failure=record.get("failure") or record.get("rollout_error"),
        facts=facts,
    )


def _group_cards(record: dict, line: int) -> list[RolloutCard]:
    """Cards from one ``process`` group: a conversation and a score per rollout."""
    scores = record.get("scores") or []
    cards = []
    for index, conversation in enumerate(record["messages"]):
        messages = [m for m in conversation if isinstance(m, dict)]
        score = scores[index] if index < len(scores) else None
        cards.append(
            RolloutCard(
                title=f"group {line} · rollout {index + 1} {_first_user_text(messages)}",
                messages=messages,
                reward=float(score) if isinstance(score, (int, float)) else None,
                turns=_count(messages, "assistant"),
                tool_calls=_count_calls(messages),
                tool_errors=_count_error_results(messages),
            )
        )
    return cards


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _first_user_text(messages: list[dict]) -> str:
    text = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    text = " ".join(text.split())
    return f"· {text[:120]}{'…' if len(text) > 120 else ''}" if text else ""


def _count(messages: list[dict], role: str) -> int:
    return sum(1 for m in messages if m.get("role") == role)


def _count_calls(messages: list[dict]) -> int:
    return sum(len(m.get("tool_calls") or []) for m in messages)


def _count_error_results(messages: list[dict]) -> int:
    return sum(
        1
        for m in messages
        if m.get("role") == "tool" and _text(m.get("content")).startswith(ERROR_PREFIX)
    )


# -- rendering ------------------------------------------------------------------------------


def render_html(cards: list[RolloutCard], title: str) -> str:
    """The whole page: summary, filters, and a card per rollout."""
    rewards = [c.reward for c in cards if c.reward is not None]
    low, high = (min(rewards), max(rewards)) if rewards else (0.0, 1.0)
    summary = [f"{len(cards)} rollouts"]
    if rewards:
        summary.append(f"mean reward {sum(rewards) / len(rewards):.3f}")
    summary.append(f"{sum(1 for c in cards if c.tool_errors)} with tool errors")
    failures = sum(1 for c in cards if c.failure)
    if failures:
        summary.append(f"{failures} failed")
    body = "\n".join(_card_html(card, low, high) for card in cards)
    return (
        PAGE.replace("{title}", escape(title))
        .replace("{summary}", escape(" · ".join(summary)))
        .replace("{low}", _number(low))
        .replace("{high}", _number(high))
        .replace("{count}", str(len(cards)))
        .replace("{cards}", body)
    )


def write_view(path: str | Path, output: str | Path | None = None) -> Path:
    """Render ``path`` into ``output`` (default: ``PATH.html`` beside it); returns where."""
    path = Path(path)
    cards = load_rollouts(path)
    target = Path(output) if output is not None else path.with_name(f"{path.name}.html")
    try:
        target.write_text(render_html(cards, path.name), encoding="utf-8")
    except OSError as exc:
        raise ViewError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target


def write_groups_page(groups: Path) -> None:
    """Process mode's page of its groups file, ``groups`` with ``.html`` (Atropos's name).

    It replaces the page Atropos writes there, which shows tool calls blank; no groups to
    show is a warning: the run itself says why.
    """
    try:
        page = write_view(groups, groups.with_suffix(".html"))
    except ViewError as exc:
        logger.warning("no HTML view of %s: %s", groups, exc)
    else:
        logger.info("HTML view of the groups: %s", page)


def _number(value: float) -> str:
    return f"{value:.6g}"


def _reward_class(reward: float | None, low: float, high: float) -> str:
    if reward is None:
        return "none"
    if high <= low:
        return "good" if reward > 0 else "bad"
    share = (reward - low) / (high - low)
    return "good" if share >= 0.999 else "bad" if share <= 0.001 else "mid"


def _card_html(card: RolloutCard, low: float, high: float) -> str:
    if card.failure:
        reward = "not scored"
    else:
        reward = "reward —" if card.reward is None else f"reward {_number(card.reward)}"
    badges = [
        f'<span class="badge reward {_reward_class(card.reward, low, high)}">'
        f"{escape(reward)}</span>",
        f'<span class="badge">{card.turns} turn{"s" * (card.turns != 1)}</span>',
        f'<span class="badge">{card.tool_calls} tool call{"s" * (card.tool_calls != 1)}</span>',
    ]
    if card.tool_errors:
        badges.append(
            f'<span class="badge error">{card.tool_errors} tool '
            f"error{'s' * (card.tool_errors != 1)}</span>"
        )
    facts = " · ".join(f"{escape(k)} {escape(v)}" for k, v in card.facts.items())
    failure = (
        f'<div class="failure"><b>Failure:</b> {escape(card.failure)}</div>' if card.failure else ""
    )
    messages = "\n".join(_message_html(m) for m in card.messages)
    data_reward = "" if card.reward is None else _number(card.reward)
    return (
        f'<article class="card" data-reward="{data_reward}" data-errors="{card.tool_errors}" '
        f'data-failed="{int(bool(card.failure))}">'
        f'<header><h2>{escape(card.title)}</h2><div class="badges">{"".join(badges)}</div>'
        f'<div class="facts">{facts}</div></header>{failure}'
        f'<div class="conversation">{messages}</div></article>'
    )


def _message_html(message: dict) -> str:
    role = str(message.get("role", "?"))
    text = _text(message.get("content"))
    parts = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        parts.append(_fold("reasoning", _text(reasoning), "reasoning"))
    if role == "system":
        return f'<div class="msg system">{_fold("system prompt", text, "system")}</div>'
    if role == "tool":
        is_error = text.startswith(ERROR_PREFIX)
        label = f"{'error' if is_error else 'result'} · {_size(text)}"
        kind = "tool-result error" if is_error else "tool-result"
        return f'<div class="msg tool">{_fold(label, text, kind)}</div>'
    if text:
        parts.append(f'<div class="text">{escape(text)}</div>')
    for call in message.get("tool_calls") or []:
        function = call.get("function", call) if isinstance(call, dict) else {}
        name = str(function.get("name", "?"))
        arguments = function.get("arguments", "")
        shown = _pretty_arguments(arguments)
        preview = " ".join(shown.split())[:90]
        parts.append(_fold(f"{name}({preview})", shown, "tool-call"))
    is_error_note = role == "user" and text.startswith(ERROR_PREFIX)  # an unparsed tool call
    css = f"msg {escape(role)}{' error' if is_error_note else ''}"
    return f'<div class="{css}"><div class="role">{escape(role)}</div>{"".join(parts)}</div>'


def _fold(summary: str, content: str, kind: str) -> str:
    return (
        f'<details class="{kind}"><summary>{escape(summary)}</summary>'
        f"<pre>{escape(content)}</pre></details>"
    )


def _pretty_arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments  # shown as the model wrote it
    if isinstance(arguments, dict) and len(arguments) == 1:
        (value,) = arguments.values()
        if isinstance(value, str) and "\n" in value:  # python's code, a script: as written
            return value
    return json.dumps(arguments, indent=2, ensure_ascii=False)


def _size(text: str) -> str:
    lines = text.count("\n") + 1 if text else 0
    return f"{lines} line{'s' * (lines != 1)}, {len(text)} chars"


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · rollouts</title>
<style>
:root { --bg: #f6f7f9; --card: #fff; --ink: #1d2330; --muted: #667085; --line: #e3e6eb;
  --good: #127a43; --good-bg: #e3f6ea; --mid: #8a5a00; --mid-bg: #fff2d6; --bad: #b42318;
  --bad-bg: #fde8e6; --accent: #3b5bdb; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
.top { position: sticky; top: 0; z-index: 1; background: var(--card);
  border-bottom: 1px solid var(--line); padding: 12px 24px; }
.top h1 { margin: 0 0 2px; font-size: 18px; }
.summary { color: var(--muted); }
.filters { display: flex; flex-wrap: wrap; gap: 14px; align-items: center; margin-top: 10px; }
.filters label { color: var(--muted); }
.filters input, .filters select { font: inherit; padding: 3px 6px; border: 1px solid var(--line);
  border-radius: 6px; background: #fff; }
.filters input[type=number] { width: 80px; }
.filters input[type=search] { width: 240px; }
#shown { margin-left: auto; font-weight: 600; }
main { max-width: 1100px; margin: 0 auto; padding: 18px 24px 60px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px;
  margin-bottom: 16px; overflow: hidden; box-shadow: 0 1px 2px rgba(16, 24, 40, .04); }
.card[hidden] { display: none; }
.card header { padding: 10px 14px; border-bottom: 1px solid var(--line); background: #fbfbfc; }
.card h2 { font-size: 14px; margin: 0 0 6px; font-weight: 600; overflow-wrap: anywhere; }
.badges { display: flex; flex-wrap: wrap; gap: 6px; }
.badge { font-size: 12px; padding: 1px 8px; border-radius: 999px; background: #eef0f4;
  color: var(--muted); }
.badge.reward { font-weight: 700; }
.badge.good { background: var(--good-bg); color: var(--good); }
.badge.mid { background: var(--mid-bg); color: var(--mid); }
.badge.bad, .badge.none, .badge.error { background: var(--bad-bg); color: var(--bad); }
.facts { margin-top: 4px; font-size: 12px; color: var(--muted); }
.failure { margin: 10px 14px 0; padding: 8px 10px; border-radius: 8px; background: var(--bad-bg);
  color: var(--bad); overflow-wrap: anywhere; }
.conversation { padding: 8px 14px 12px; }
.msg { margin: 6px 0; padding: 6px 10px; border-left: 3px solid var(--line); }
.msg .role { font-size: 11px; text-transform: uppercase; letter-spacing: .05em;
  color: var(--muted); margin-bottom: 2px; }
.msg.user { border-color: #8da2fb; }
.msg.assistant { border-color: #4cb782; background: #f7fcf9; }
.msg.tool, .msg.system { border-color: #d0d5dd; padding-top: 2px; padding-bottom: 2px; }
.msg.error { border-color: var(--bad); }
.text { white-space: pre-wrap; overflow-wrap: anywhere; }
details { margin: 4px 0; }
summary { cursor: pointer; color: var(--muted); font-size: 13px; overflow-wrap: anywhere; }
details.tool-call summary { color: var(--accent); font-family: ui-monospace, monospace; }
details.tool-result.error summary { color: var(--bad); font-weight: 600; }
pre { margin: 4px 0; padding: 8px; background: #f2f4f7; border-radius: 6px; max-height: 420px;
  overflow: auto; white-space: pre-wrap; overflow-wrap: anywhere;
  font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; }
.empty { color: var(--muted); text-align: center; padding: 40px; }
</style>
</head>
<body>
<div class="top">
  <h1>{title}</h1>
  <div class="summary">{summary}</div>
  <form class="filters" onsubmit="return false">
    <label>reward from <input id="min" type="number" step="any" value="{low}"></label>
    <label>to <input id="max" type="number" step="any" value="{high}"></label>
    <label>errors <select id="errors">
      <option value="">any</option>
      <option value="with">with tool errors</option>
      <option value="without">without tool errors</option>
      <option value="failed">failed rollouts</option>
      <option value="ok">no error, no failure</option>
    </select></label>
    <label>text <input id="q" type="search" placeholder="search the conversations"></label>
    <span id="shown">{count} of {count} shown</span>
  </form>
</div>
<main>
{cards}
<p class="empty" id="empty" hidden>No rollout matches the filters.</p>
</main>
<script>
(function () {
  const cards = Array.from(document.querySelectorAll(".card"));
  const $ = (id) => document.getElementById(id);
  const fields = ["min", "max", "errors", "q"];
  const texts = new Map();  // each card's text, lower-cased once, for the search
  function keep(card) {
    const min = parseFloat($("min").value), max = parseFloat($("max").value);
    const errors = parseInt(card.dataset.errors, 10), failed = card.dataset.failed === "1";
    const reward = card.dataset.reward === "" ? null : parseFloat(card.dataset.reward);
    if (reward !== null && ((!isNaN(min) && reward < min) || (!isNaN(max) && reward > max))) {
      return false;
    }
    const mode = $("errors").value;
    if (mode === "with" && errors === 0) return false;
    if (mode === "without" && errors > 0) return false;
    if (mode === "failed" && !failed) return false;
    if (mode === "ok" && (errors > 0 || failed)) return false;
    const q = $("q").value.trim().toLowerCase();
    if (!q) return true;
    if (!texts.has(card)) texts.set(card, card.textContent.toLowerCase());
    return texts.get(card).includes(q);
  }
  function apply() {
    let shown = 0;
    for (const card of cards) {
      card.hidden = !keep(card);
      if (!card.hidden) shown += 1;
    }
    $("shown").textContent = shown + " of " + cards.length + " shown";
    $("empty").hidden = shown > 0;
    const state = new URLSearchParams();
    for (const f of fields) if ($(f).value !== $(f).defaultValue) state.set(f, $(f).value);
    try {
      history.replaceState(null, "", state.toString() ? "#" + state : location.pathname);
    } catch (e) { /* some browsers refuse it for file:// pages: the filters still work */ }
  }
  // Filters can come in the address (#errors=with&min=0.5): a filtered view is a link.
  const wanted = new URLSearchParams(location.hash.slice(1));
  for (const f of fields) if (wanted.has(f)) $(f).value = wanted.get(f);
  for (const f of fields) $(f).addEventListener("input", apply);
  apply();
})();
</script>
</body>
</html>
"""
