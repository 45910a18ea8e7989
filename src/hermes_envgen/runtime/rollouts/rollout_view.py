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
import re
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from hermes_envgen.errors import ViewError
from hermes_envgen.runtime.rollout import TOOL_ERROR_PREFIX as ERROR_PREFIX
from hermes_envgen.runtime.rollouts.evaluation.journal import summary
from hermes_envgen.runtime.rollouts.rollout_card import RolloutCard
from hermes_envgen.runtime.rollouts.run_glance import GLANCE_CSS, glance_html, group_spreads
from hermes_envgen.runtime.rollouts.token_view import (
    TOKEN_BUDGET,
    TOKEN_CSS,
    TokenText,
    token_view_html,
)

logger = logging.getLogger(__name__)


@dataclass
class LoadedRun:
    """The rollouts of one file, and the lines that held none (each with why)."""

    path: Path
    cards: list[RolloutCard]
    skipped: list[str] = field(default_factory=list)  # "line 7: not JSON (cut short?)"


def load_rollouts(path: str | Path) -> list[RolloutCard]:
    """The rollouts of a samples/failures JSONL or a ``process`` JSONL file."""
    return read_run(path).cards


def read_run(path: str | Path) -> LoadedRun:
    """The rollouts of a samples/failures JSONL or a ``process`` JSONL file.

    Lines that hold no rollout (not JSON, cut short, another tool's records) are skipped and
    named in ``skipped``; a file with no rollout at all is a :class:`ViewError` naming the
    first such line, so that no page is ever blank.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise ViewError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ViewError(f"{path} is a directory: give the JSONL file inside it") from None
    except OSError as exc:
        raise ViewError(f"cannot read {path}: {exc}") from None
    cards: list[RolloutCard] = []
    skipped: list[str] = []
    lines = text.split("\n")  # not at U+2028 in a string
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            last = all(not rest.strip() for rest in lines[number:])
            why = "not JSON" + (" (cut short: the last line, still being written?)" * last)
            skipped.append(f"line {number}: {why}")
            continue
        if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
            skipped.append(f"line {number}: neither a rollout nor a group (no 'messages' list)")
            continue
        messages = record["messages"]
        if messages and isinstance(messages[0], list):
            cards += group_cards(record, number)
        else:
            cards.append(_sample_card(record, len(cards) + 1))
    if not cards:
        if skipped:
            raise ViewError(f"{path}, {skipped[0]} (is this a JSONL file of rollouts?)")
        raise ViewError(f"{path}: no rollouts in it")
    return LoadedRun(path, cards, skipped)


def _number_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _signals(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    return {str(k): float(v) for k, v in value.items() if _number_or_none(v) is not None}


def _sample_card(record: dict, number: int) -> RolloutCard:
    """A card from one evaluation record (``Rollout.record()`` plus its key)."""
    messages = [m for m in record["messages"] if isinstance(m, dict)]
    facts = {
        name: str(record[name])
        for name in ("item_key", "sample_index", "task_id")
        if record.get(name) is not None
    }
    errors = record.get("tool_errors")
    item = record.get("item_key")
    has_key = isinstance(record.get("key"), str) and isinstance(item, str)
    return RolloutCard(
        title=f"#{number} {_first_user_text(messages)}",
        messages=messages,
        reward=_number_or_none(record.get("reward")),
        turns=_int(record.get("turns_used")) or _count(messages, "assistant"),
        tool_calls=_int(record.get("tool_calls")) or _count_calls(messages),
        tool_errors=len(errors) if isinstance(errors, list) else _count_error_results(messages),
        failure=_str_or_none(record.get("failure") or record.get("rollout_error")),
        facts=facts,
        group=item if isinstance(item, str) else None,
        task=item if isinstance(item, str) else _task_of(messages),
        signals=_signals(record.get("reward_signals")),
        summary=summary(record) if has_key else None,
    )


def group_cards(record: dict, line: int) -> list[RolloutCard]:
    """Cards from one ``process`` group: a conversation, a score and its tokens per rollout."""
    scores = record.get("scores") or []
    tokens = _lists(record.get("tokens"), "q")
    masks = _lists(record.get("masks"), "q")
    logprobs = _lists(record.get("inference_logprobs"), "d")
    cards = []
    for index, conversation in enumerate(record["messages"]):
        messages = [m for m in conversation if isinstance(m, dict)]
        score = scores[index] if index < len(scores) else None
        cards.append(
            RolloutCard(
                title=f"group {line} · rollout {index + 1} {_first_user_text(messages)}",
                messages=messages,
                reward=_number_or_none(score),
                turns=_count(messages, "assistant"),
                tool_calls=_count_calls(messages),
                tool_errors=_count_error_results(messages),
                group=f"group {line}",
                task=_task_of(messages),
                tokens=tokens[index] if index < len(tokens) else None,
                masks=masks[index] if index < len(masks) else None,
                logprobs=logprobs[index] if index < len(logprobs) else None,
            )
        )
    return cards


def _lists(value: Any, kind: str) -> list[Sequence[Any] | None]:
    """Each rollout's numbers as a compact array: a run's millions of tokens held as Python
    objects made the collector crawl; a list that is not all numbers is None."""
    if not isinstance(value, list):
        return []
    arrays: list[Sequence[Any] | None] = []
    for numbers in value:
        try:
            arrays.append(array(kind, numbers) if isinstance(numbers, list) else None)
        except (TypeError, OverflowError):
            arrays.append(None)
    return arrays


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _task_of(messages: list[dict]) -> str | None:
    """A task's identity across runs when records carry no item key: its first user message."""
    return first_user_text(messages) or None


def first_user_text(messages: list[dict]) -> str:
    """The first user message, its whitespace collapsed."""
    text = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    return " ".join(text.split())


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


def render_html(
    cards: list[RolloutCard],
    title: str,
    *,
    skipped: list[str] | None = None,
    source: Path | None = None,
    tokenizer: Any | None = None,
    tokens_from: int = 0,
    token_budget: int = TOKEN_BUDGET,
) -> str:
    """The whole page: the run at a glance, filters, and a card per rollout.

    ``skipped`` names the file's lines that held no rollout; ``tokenizer`` (the run's) turns
    token ids into text in the token views, drawn from rollout ``tokens_from`` on until the
    page's ``token_budget`` is spent.
    """
    rewards = [c.reward for c in cards if c.reward is not None]
    low, high = (min(rewards), max(rewards)) if rewards else (0.0, 1.0)
    summary = [f"{len(cards)} rollouts"]
    if rewards:
        summary.append(f"mean reward {sum(rewards) / len(rewards):.3f}")
    summary.append(f"{sum(1 for c in cards if c.tool_errors)} with tool errors")
    failures = sum(1 for c in cards if c.failure)
    if failures:
        summary.append(f"{failures} failed")
    flat = {g.name for g in group_spreads(cards) if g.zero_variance}
    text = TokenText(tokenizer)
    budget = [token_budget]
    any_tokens = any(c.tokens is not None for c in cards)
    body = "\n".join(
        _card_html(
            card,
            index,
            low,
            high,
            flat=card.group in flat,
            tokens=(
                token_view_html(card, text, budget if index >= tokens_from else [0])
                if any_tokens
                else ""
            ),
        )
        for index, card in enumerate(cards)
    )
    notices = _notices(skipped or [], any_tokens)
    return _fill(
        PAGE,
        title=escape(title),
        summary=escape(" · ".join(summary)),
        low=_number(low),
        high=_number(high),
        count=str(len(cards)),
        notices=notices,
        glance=glance_html(cards, source),
        cards=body,
    )


def _fill(page: str, **parts: str) -> str:
    """The page with each ``{name}`` replaced in one pass (a part's own text is left as is)."""
    return re.sub(r"\{(" + "|".join(parts) + r")\}", lambda m: parts[m.group(1)], page)


MAX_LISTED_LINES = 20


def _notices(skipped: list[str], any_tokens: bool) -> str:
    notes = []
    if skipped:
        listed = "".join(f"<li>{escape(s)}</li>" for s in skipped[:MAX_LISTED_LINES])
        more = len(skipped) - MAX_LISTED_LINES
        if more > 0:
            listed += f"<li>and {more} more</li>"
        notes.append(
            f'<div class="notice"><b>{len(skipped)} line{"s" * (len(skipped) != 1)} of the '
            "file could not be shown</b> (not a rollout of an evaluation, nor a group of "
            f"<code>process</code>):<ul>{listed}</ul></div>"
        )
    if not any_tokens:
        notes.append(
            '<div class="notice"><b>No token view:</b> these records hold no tokens. '
            "Evaluation saves each rollout's conversation, not the token ids a trainer gets; "
            "the groups <code>process</code> writes hold them (ids, masks and, in token mode, "
            "logprobs).</div>"
        )
    return "".join(notes)


def write_view(
    path: str | Path,
    output: str | Path | None = None,
    *,
    tokenizer: Any | None = None,
    tokens_from: int = 0,
) -> Path:
    """Render ``path`` into ``output`` (default: ``PATH.html`` beside it); returns where."""
    path = Path(path)
    run = read_run(path)
    target = Path(output) if output is not None else path.with_name(f"{path.name}.html")
    page = render_html(
        run.cards,
        path.name,
        skipped=run.skipped,
        source=path,
        tokenizer=tokenizer,
        tokens_from=tokens_from,
    )
    try:
        target.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ViewError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target


def write_groups_page(groups: Path, tokenizer: Any | None = None) -> None:
    """Process mode's page of its groups file, ``groups`` with ``.html`` (Atropos's name).

    It replaces the page Atropos writes there, which shows tool calls blank; no groups to
    show is a warning: the run itself says why. ``tokenizer`` (the env's) gives the token
    views their text.
    """
    try:
        page = write_view(groups, groups.with_suffix(".html"), tokenizer=tokenizer)
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


def _card_html(
    card: RolloutCard, index: int, low: float, high: float, *, flat: bool, tokens: str
) -> str:
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
    if flat:
        badges.append('<span class="badge error flat">group: zero variance</span>')
    facts = " · ".join(f"{escape(k)} {escape(v)}" for k, v in card.facts.items())
    failure = (
        f'<div class="failure"><b>Failure:</b> {escape(card.failure)}</div>' if card.failure else ""
    )
    messages = "\n".join(_message_html(m) for m in card.messages)
    data_reward = "" if card.reward is None else _number(card.reward)
    return (
        f'<article class="card" id="r{index}" data-reward="{data_reward}" '
        f'data-errors="{card.tool_errors}" data-failed="{int(bool(card.failure))}">'
        f'<header><h2>{escape(card.title)}</h2><div class="badges">{"".join(badges)}</div>'
        f'<div class="facts">{facts}</div></header>{failure}'
        f'<div class="conversation">{messages}</div>{tokens}</article>'
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
/*css*/
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
{notices}
{glance}
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
  // A rollout can be linked (#r17): its card is shown with its token view open.
  const linked = /^#r[0-9]+$/.test(location.hash) && document.querySelector(location.hash);
  apply();
  if (linked) {
    const tokens = linked.querySelector("details.tokens");
    if (tokens) tokens.open = true;
    linked.scrollIntoView();
  }
})();
</script>
</body>
</html>
"""
PAGE_CSS = """
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
/* Cards off screen are not laid out until scrolled to: a page of 10,000 opens at once. */
.card { content-visibility: auto; contain-intrinsic-size: auto 320px; }
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
.notice { background: var(--mid-bg); color: var(--mid); border-radius: 8px; padding: 8px 12px;
  margin-bottom: 12px; }
.notice ul { margin: 4px 0 0; }
"""
PAGE = PAGE.replace("/*css*/", PAGE_CSS + GLANCE_CSS + TOKEN_CSS)
