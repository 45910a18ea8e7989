"""``hermes-envgen view``: rollouts as one self-contained HTML page, checked in a real browser.

The browser tests need Debian's ``chromium`` package (``apt-get install -y chromium``) and
skip without it; one browser serves the module. Set ``HERMES_ENVGEN_ARTIFACTS=DIR`` to keep
their screenshots (a run at a glance, a token view) in DIR.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from helpers.browser import Browser, chromium_path
from typer.testing import CliRunner

from hermes_envgen.cli import app
from hermes_envgen.devtools.view import load_rollouts, render_html, write_view
from hermes_envgen.runtime.chat.trajectory import tokenize_conversation
from hermes_envgen.runtime.rollouts.rollout_view import group_cards, read_run
from hermes_envgen.runtime.rollouts.token_view import TokenText, check_tokens

SYSTEM = {"role": "system", "content": "You are a careful agent working in a sandbox."}


def call(name: str, arguments: dict, call_id: str) -> dict:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def sample(
    prompt: str,
    turns: list[tuple[dict | None, str | None]],
    answer: str,
    reward: float | None,
    failure: str | None = None,
    index: int = 0,
) -> dict:
    """An evaluation record as ``run_eval`` saves it; ``turns`` are (tool call, its result)."""
    messages = [SYSTEM, {"role": "user", "content": prompt}]
    tool_errors = []
    for number, (tool_call, result) in enumerate(turns, start=1):
        messages.append({"role": "assistant", "content": None, "tool_calls": [tool_call]})
        messages.append({"role": "tool", "tool_call_id": tool_call["id"], "content": result})
        if result.startswith("Error:"):
            function = tool_call["function"]
            tool_errors.append(
                {
                    "turn": number,
                    "tool_name": function["name"],
                    "arguments": function["arguments"],
                    "error": result[7:],
                    "tool_result": result,
                }
            )
    messages.append({"role": "assistant", "content": answer})
    return {
        "item": {"prompt": prompt},
        "task_id": f"eval-{index:016x}",
        "reward": reward,
        "failure": failure,
        "turns_used": len(turns) + 1,
        "finished_naturally": True,
        "tool_calls": len(turns),
        "tools_used": sorted({t["function"]["name"] for t, _ in turns}),
        "tool_errors": tool_errors,
        "reward_error": None,
        "reward_counts": {},
        "reward_signals": {},
        "rollout_error": None,
        "final_response": answer,
        "messages": messages,
        "key": f"{index:016x}#0",
        "item_key": f"{index:016x}",
        "sample_index": 0,
    }


COUNT = "Count the lines of numbers.txt and write the count into count.txt."
SAMPLES = [
    sample(
        COUNT,
        [
            (
                call("terminal", {"command": "wc -l < numbers.txt"}, "c1"),
                '{"output": "6\\n", "exit_code": 0}',
            ),
            (
                call("write_file", {"path": "count.txt", "content": "6\n"}, "c2"),
                "Wrote 2 bytes to count.txt",
            ),
        ],
        "numbers.txt has 6 lines; the count is in count.txt.",
        1.0,
        index=1,
    ),
    sample(
        "Sort the lines of names.txt alphabetically into sorted.txt.",
        [
            (
                call("shell", {"cmd": "sort names.txt"}, "c3"),
                "Error: unknown tool 'shell'. Valid tools: read_file, terminal, write_file",
            ),
            (
                call("terminal", {"command": "sort -r names.txt > sorted.txt"}, "c4"),
                '{"output": "", "exit_code": 0}',
            ),
        ],
        "Sorted. <script>alert('not run')</script>",
        0.0,
        index=2,
    ),
    sample(
        "Name the capital of France.",
        [],
        "Probably Paris.",
        0.5,
        index=3,
    ),
]
FAILURE = sample(
    "Write the word hello into greeting.txt.",
    [(call("terminal", {"command": "echo hello > greeting.txt"}, "c5"), "{}")],
    "Done.",
    None,
    failure="judge failed: judge reply is not strict JSON with a score in [0, 1]: 'Score: 1'",
    index=4,
)


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_samples_become_one_card_each_with_what_happened(tmp_path):
    cards = load_rollouts(write_jsonl(tmp_path / "samples.jsonl", [*SAMPLES, FAILURE]))
    assert [c.reward for c in cards] == [1.0, 0.0, 0.5, None]
    assert [c.turns for c in cards] == [3, 3, 1, 2]
    assert [c.tool_calls for c in cards] == [2, 2, 0, 1]
    assert [c.tool_errors for c in cards] == [0, 1, 0, 0]
    assert cards[3].failure.startswith("judge failed")
    assert "Count the lines" in cards[0].title


def test_process_groups_become_a_card_per_rollout(tmp_path):
    conversations = [s["messages"] for s in SAMPLES]
    group = {"tokens": [[1]] * 3, "masks": [[1]] * 3, "scores": [1.0, 0.0, 0.5]}
    path = write_jsonl(
        tmp_path / "groups.jsonl",
        [group | {"messages": conversations}, group | {"messages": conversations[:2]}],
    )
    cards = load_rollouts(path)
    assert len(cards) == 5
    assert [c.reward for c in cards] == [1.0, 0.0, 0.5, 1.0, 0.0]
    assert cards[1].tool_errors == 1  # found from the tool result that reports the error
    assert cards[3].title.startswith("group 2 · rollout 1")


def test_the_page_is_self_contained_and_escapes_the_conversation(tmp_path):
    html = render_html(load_rollouts(write_jsonl(tmp_path / "s.jsonl", SAMPLES)), "s.jsonl")
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), "something is fetched"
    assert "<link" not in html and "@import" not in html
    assert html.count('<article class="card"') == 3
    assert html.count("<details") >= 2 * 4  # tool calls and results are folded


def test_calls_of_the_python_web_and_mcp_toolsets_show_like_terminal_calls(tmp_path):
    code = "import math\nprint(math.pi)"
    record = sample(
        "Research and compute.",
        [
            (call("python", {"code": code}, "p1"), '{"stdout": "3.14159\\n"}'),
            (call("web_search", {"query": "bm25 <b>"}, "w1"), '[{"url": "corpus://a"}]'),
            (call("notes_add", {"title": "t", "body": "b"}, "m1"), "Error: mcp server died"),
        ],
        "Done.",
        1.0,
    )
    cards = load_rollouts(write_jsonl(tmp_path / "s.jsonl", [record]))
    assert cards[0].tool_calls == 3 and cards[0].tool_errors == 1
    html = render_html(cards, "s.jsonl")
    # Code is shown as written, with its line breaks, not as an escaped JSON string.
    assert "<pre>import math\nprint(math.pi)</pre>" in html
    assert "web_search(" in html and "bm25 &lt;b&gt;" in html
    assert "notes_add(" in html and "Error: mcp server died" in html


def test_view_command_writes_path_html_and_prints_it(tmp_path):
    path = write_jsonl(tmp_path / "samples.jsonl", SAMPLES)
    result = CliRunner().invoke(app, ["view", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(tmp_path / "samples.jsonl.html")
    assert (tmp_path / "samples.jsonl.html").read_text().count('<article class="card"') == 3
    out = tmp_path / "elsewhere.html"
    result = CliRunner().invoke(app, ["view", str(path), "--output", str(out)])
    assert result.exit_code == 0 and out.exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("this is not json\n", "line 1: not JSON"),
        ('{"a": 1}\n', "line 1: neither a rollout nor a group"),
        ("[1, 2]\n", "line 1: neither a rollout nor a group"),
        ("\n\n", "no rollouts in it"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, message):
    path = tmp_path / "input.jsonl"
    if content is not None:
        path.write_text(content)
    result = CliRunner().invoke(app, ["view", str(path)])
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "input.jsonl.html").exists()


def test_a_directory_is_refused(tmp_path):
    result = CliRunner().invoke(app, ["view", str(tmp_path)])
    assert result.exit_code == 2 and "is a directory" in result.output


# -- a run at a glance -----------------------------------------------------------------------


def evaluation(rewards_by_item: list[list[float]], signals: bool = True) -> list[dict]:
    """Evaluation records, k per item, with the reward's named signals."""
    records = []
    for item, rewards in enumerate(rewards_by_item):
        for index, reward in enumerate(rewards):
            record = sample(f"Task number {item}.", [], "Done.", reward, index=item)
            record |= {"key": f"{item:016x}#{index}", "sample_index": index}
            if signals:
                record["reward_signals"] = {"file_ok": reward, "format": 1.0}
            records.append(record)
    return records


def test_the_glance_flags_zero_variance_groups_with_their_share(tmp_path):
    # 4 items x 2 samples: two items whose samples earned one reward (1.0 and 0.0).
    records = evaluation([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0], [0.5, 1.0]])
    html = render_html(load_rollouts(write_jsonl(tmp_path / "s.jsonl", records)), "s.jsonl")
    assert "2 of 4 groups (50%) have zero variance: 4 of 8 rollouts (50%)" in html
    assert html.count('class="flat"') == 2  # the two drawn red in the spread plot
    assert html.count("group: zero variance") == 4  # each of their rollouts' cards says so
    assert 'href="#r0" class="flat-group"' in html and 'href="#r4" class="flat-group"' in html
    # pass@1 = mean of (1, .5, 0, .5) with the default threshold 1.0; pass@2 = (1, 1, 0, 1)
    assert "<tr><th>pass@1</th><td>0.500</td>" in html
    assert "<tr><th>pass@2</th><td>0.750</td>" in html
    assert "<th>file_ok</th><td>8</td><td>0.562</td>" in html  # the named signals


def test_pass_threshold_comes_from_the_runs_metrics(tmp_path):
    records = evaluation([[0.5, 0.5], [0.0, 0.5]])
    metrics = {"config_general": {"evaluation": {"pass_threshold": 0.5}}}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    page = write_view(write_jsonl(tmp_path / "samples.jsonl", records)).read_text()
    assert "<tr><th>pass@1</th><td>0.750</td>" in page
    assert "passed at reward ≥ 0.5 (the run&#x27;s, from metrics.json)" in page


def test_lines_that_hold_no_rollout_are_named_on_the_page(tmp_path):
    path = tmp_path / "samples.jsonl"
    good = [json.dumps(r) for r in SAMPLES]
    # Another tool's record, then a line cut short at the end (a run still writing).
    path.write_text("\n".join([good[0], '{"event": "start"}', good[1], good[2][:40]]))
    run = read_run(path)
    assert len(run.cards) == 2
    assert run.skipped == [
        "line 2: neither a rollout nor a group (no 'messages' list)",
        "line 4: not JSON (cut short: the last line, still being written?)",
    ]
    result = CliRunner().invoke(app, ["view", str(path)])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "samples.jsonl.html").read_text()
    assert "2 lines of the file could not be shown" in page and "line 4: not JSON" in page
    assert "No token view:</b> these records hold no tokens" in page


# -- the token view --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from hermes_envgen.testing.tokenizer import build_offline_tokenizer

    return AutoTokenizer.from_pretrained(
        str(build_offline_tokenizer(tmp_path_factory.mktemp("tokenizer")))
    )


def group_of(tokenizer, conversations: list[list[dict]], scores: list[float]) -> dict:
    """A process group as the base env writes it in chat mode (the real tokenisation)."""
    sequences = [tokenize_conversation(tokenizer, c) for c in conversations]
    return {
        "tokens": [s.tokens for s in sequences],
        "masks": [s.masks for s in sequences],
        "scores": scores,
        "messages": conversations,
    }


def card_of(group: dict, index: int = 0):
    return group_cards(group, 1)[index]


def test_chat_mode_tokens_line_up_with_the_turns(tokenizer):
    card = card_of(group_of(tokenizer, [SAMPLES[0]["messages"]], [1.0]))
    report = check_tokens(card, TokenText(tokenizer))
    assert report.findings == []
    assert len(report.spans) == 3  # two calls and the answer
    assert '"name": "write_file"' in report.spans[1].text


def test_a_template_that_drops_a_call_is_reported(tokenizer):
    messages = SAMPLES[0]["messages"]
    group = group_of(tokenizer, [messages], [1.0])
    # What a template that renders no tool calls trains: the turns without their calls.
    dropped = [
        {k: v for k, v in m.items() if k != "tool_calls"} | {"content": m["content"] or ""}
        if m["role"] == "assistant"
        else m
        for m in messages
    ]
    bad = tokenize_conversation(tokenizer, dropped)
    group["tokens"], group["masks"] = [bad.tokens], [bad.masks]
    findings = check_tokens(card_of(group), TokenText(tokenizer)).findings
    assert "turn 1: its call terminal() is not in trained span 1" in findings
    assert "turn 2: its call write_file() is not in trained span 2" in findings


def test_a_mask_that_covers_the_prompt_is_reported(tokenizer):
    group = group_of(tokenizer, [SAMPLES[2]["messages"]], [0.5])
    group["masks"] = [list(group["tokens"][0])]  # every token trained
    findings = check_tokens(card_of(group), TokenText(tokenizer)).findings
    assert "1 trained spans for 1 assistant turns" not in " ".join(findings)
    assert any("holds the user message “Name the capital of France.”" in f for f in findings)
    assert any("holds the system message" in f for f in findings)


def test_sampled_ids_that_re_tokenise_otherwise_are_reported(tokenizer):
    # Token mode: the model sampled <|im_end|> spelled out in bytes; its text re-tokenises
    # to the one special token.
    group = group_of(tokenizer, [SAMPLES[2]["messages"]], [0.5])
    tokens, masks = group["tokens"][0], group["masks"][0]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    last_trained = max(i for i, m in enumerate(masks) if m != -100)
    assert tokens[last_trained] == end
    spelled = tokenizer.encode("<|im_end|>", add_special_tokens=False, split_special_tokens=True)
    assert len(spelled) == 10
    tokens[last_trained : last_trained + 1] = spelled
    masks[last_trained : last_trained + 1] = spelled
    group["inference_logprobs"] = [[1.0 if m == -100 else -0.25 for m in masks]]
    card = card_of(group)
    findings = check_tokens(card, TokenText(tokenizer)).findings
    assert any("trained span 1: its text re-tokenises to other ids" in f for f in findings)
    html = render_html([card], "g.jsonl", tokenizer=tokenizer)
    assert f'title="id {spelled[0]} · logprob -0.2500">&lt;</i>' in html  # '<' as sampled


def test_records_without_tokens_say_so_and_the_token_budget_holds(tokenizer):
    group = group_of(tokenizer, [s["messages"] for s in SAMPLES], [1.0, 0.0, 0.5])
    del group["tokens"][2], group["masks"][2]  # a rollout the group holds no tokens of
    first = len(group["tokens"][0])
    cards = group_cards(group, 1)
    html = render_html(cards, "g.jsonl", tokenizer=tokenizer, token_budget=first + 1)
    assert html.count('<details class="tokens') == 1  # the budget held only the first
    assert "Token view left out" in html
    assert "No token view: this record holds no tokens" in html


# -- two runs side by side ------------------------------------------------------------------


def test_two_runs_side_by_side_name_what_changed(tmp_path):
    before = write_jsonl(
        tmp_path / "before.jsonl", evaluation([[0.0, 0.0], [1.0, 1.0], [0.5, 0.5], [1.0, 0.0]])
    )
    # Item 0 improved, item 1 regressed, item 2 unchanged; item 3 only in A, item 4 only in B.
    after = evaluation([[1.0, 0.5], [0.0, 1.0], [0.5, 0.5], [1.0, 1.0], [0.2, 0.2]])
    after = [r for r in after if r["item_key"] != f"{3:016x}"]
    after_path = write_jsonl(tmp_path / "after.jsonl", after)
    result = CliRunner().invoke(app, ["view", str(before), str(after_path)])
    assert result.exit_code == 0, result.output
    page = Path(result.output.strip())
    assert page == tmp_path / "after.jsonl.vs-before.jsonl.html"
    html = page.read_text()
    assert "3 tasks in both runs; 1 only in before.jsonl, 1 only in after.jsonl." in html
    assert "Mean reward over those tasks: 0.500 → 0.583 (+0.083)." in html
    assert "1 improved, 1 regressed, 1 with the same mean." in html
    assert "Tasks whose rollouts all earned one reward: 3 → 1." in html
    rows = re.findall(r'<tr class="(up|down|same)"><td>([^<]*)</td>', html)
    assert rows == [("up", "Task number 0."), ("down", "Task number 1.")]
    assert html.count('<circle class="') == 3  # one point per shared task


def test_runs_with_no_task_in_common_say_so(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", evaluation([[1.0]]))
    b = write_jsonl(tmp_path / "b.jsonl", SAMPLES)
    result = CliRunner().invoke(app, ["view", str(a), str(b), "-o", str(tmp_path / "c.html")])
    assert result.exit_code == 0, result.output
    assert "No task is in both runs" in (tmp_path / "c.html").read_text()


def test_three_files_are_refused(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", SAMPLES)
    result = CliRunner().invoke(app, ["view", str(a), str(a), str(a)])
    assert result.exit_code == 2 and "one run or two" in result.output


def test_view_with_the_runs_tokenizer_shows_token_text(tmp_path, tokenizer):
    tokenizer.save_pretrained(tmp_path / "tok")
    group = group_of(tokenizer, [SAMPLES[0]["messages"]], [1.0])
    path = write_jsonl(tmp_path / "groups.jsonl", [group])
    result = CliRunner().invoke(app, ["view", str(path), "--tokenizer", str(tmp_path / "tok")])
    assert result.exit_code == 0, result.output
    html = (tmp_path / "groups.jsonl.html").read_text()
    assert "3 trained spans · lines up" in html and "&lt;|im_start|&gt;" in html
    without = render_html(load_rollouts(path), "groups.jsonl")
    assert "Token ids only: give <code>--tokenizer</code>" in without
    result = CliRunner().invoke(app, ["view", str(path), "--tokenizer", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "cannot load the tokenizer" in result.output


# -- in a real browser -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    if chromium_path() is None:
        pytest.skip("chromium is not installed (Debian/Ubuntu: apt-get install -y chromium)")
    with Browser() as started:
        yield started


def keep_screenshot(path: Path) -> None:
    keep = os.environ.get("HERMES_ENVGEN_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / path.name)


def shown_cards(browser) -> int:
    return browser.js("document.querySelectorAll('.card:not([hidden])').length")


@pytest.mark.slow
def test_the_page_renders_and_filters_in_chromium(tmp_path, browser):
    page = write_view(write_jsonl(tmp_path / "samples.jsonl", [*SAMPLES, FAILURE]))
    browser.open(page.as_uri())
    assert shown_cards(browser) == 4
    assert browser.js("document.getElementById('shown').textContent") == "4 of 4 shown"
    # Filters come in the address too: only the rollout with a tool error is left.
    browser.open(page.as_uri() + "#errors=with")
    assert shown_cards(browser) == 1
    assert browser.js("document.querySelector('.card:not([hidden])').dataset.errors") == "1"
    browser.open(page.as_uri() + "#min=0.5")
    assert shown_cards(browser) == 3  # rewards 1 and 0.5, and the failure (it has no reward)


@pytest.mark.slow
def test_a_run_at_a_glance_as_a_person_sees_it(tmp_path, browser):
    records = evaluation([[1.0, 1.0, 1.0], [0.0, 1.0, 0.5], [0.0, 0.0, 0.0], [0.25, 1.0, 0.75]])
    page = write_view(write_jsonl(tmp_path / "samples.jsonl", records))
    browser.open(page.as_uri(), height=1100)
    # The plots are drawn: bars with a size on screen, above the first rollout.
    bars = browser.js(
        "Array.from(document.querySelectorAll('.glance svg.hist rect'))"
        ".map(r => r.getBoundingClientRect()).filter(b => b.width > 0 && b.height > 0).length"
    )
    assert bars >= 6
    assert browser.js(
        "document.querySelector('.glance').getBoundingClientRect().bottom"
        " <= document.querySelector('.card').getBoundingClientRect().top"
    )
    # The zero-variance groups are flagged in red, in words and in the plot.
    verdict = browser.js(
        "(() => { const v = document.querySelector('.verdict.flat');"
        " return [v.innerText, getComputedStyle(v).color]; })()"
    )
    assert verdict[0].startswith("2 of 4 groups (50%) have zero variance")
    assert verdict[1] == "rgb(180, 35, 24)"
    assert browser.js("document.querySelectorAll('svg.spread circle.flat').length") == 2
    assert browser.js("getComputedStyle(document.querySelector('circle.flat')).fill") == (
        "rgb(180, 35, 24)"
    )
    assert "pass@3" in browser.js("document.querySelector('table.pass').innerText")
    keep_screenshot(browser.screenshot(tmp_path / "view-glance.png"))


@pytest.mark.slow
def test_a_token_view_as_a_person_sees_it(tmp_path, browser, tokenizer):
    conversations = [s["messages"] for s in SAMPLES]
    group = group_of(tokenizer, conversations, [1.0, 0.0, 0.5])
    path = write_jsonl(tmp_path / "groups.jsonl", [group])
    page = write_view(path, tokenizer=tokenizer)
    browser.open(page.as_uri() + "#r1", height=1300)  # a link opens that rollout's tokens
    assert browser.js("document.querySelector('#r1 details.tokens').open")
    assert not browser.js("document.querySelector('#r0 details.tokens').open")
    styles = browser.js(
        "(() => { const s = (q) => getComputedStyle(document.querySelector('#r1 .stream ' + q));"
        " return [s('i.m:not(.s)').backgroundColor, s('i.t:not(.s)').backgroundColor,"
        " s('i.m:not(.s)').color,"
        " s('i.s').fontWeight]; })()"
    )
    masked, trained, masked_ink, boundary_weight = styles
    assert masked != trained and masked == "rgb(238, 240, 244)" and trained == "rgb(201, 240, 214)"
    assert masked_ink == "rgb(152, 162, 179)" and boundary_weight == "700"
    # The system prompt is masked, the answer trained, each token titled with its id.
    first_masked = browser.js("document.querySelector('#r1 .stream i.m').title")
    assert first_masked.startswith("id ") and first_masked.endswith("· masked")
    rows = browser.js("document.querySelectorAll('#r1 table.align tr').length")
    assert rows == 1 + 3  # a header and a row per assistant turn
    browser.js("document.querySelector('#r1 details.tokens').scrollIntoView()")
    keep_screenshot(browser.screenshot(tmp_path / "view-tokens.png"))
