"""``hermes-envgen view``: rollouts as one self-contained HTML page, checked in a real browser.

The browser test needs Debian's ``chromium`` package (``apt-get install -y chromium``) and
skips without it. Set ``HERMES_ENVGEN_ARTIFACTS=DIR`` to keep its screenshot in DIR.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hermes_envgen.cli import app
from hermes_envgen.devtools.view import load_rollouts, render_html, write_view

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


# -- in a real browser -----------------------------------------------------------------------


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("chromium is not installed (Debian/Ubuntu: apt-get install -y chromium)")


def browse(page: Path, profile: Path, *args: str, fragment: str = "") -> str:
    """Run headless Chromium on the page with ``args``; its stdout."""
    completed = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            *args,
            page.as_uri() + fragment,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout


@pytest.mark.slow
def test_the_page_renders_and_filters_in_chromium(tmp_path):
    page = write_view(write_jsonl(tmp_path / "samples.jsonl", [*SAMPLES, FAILURE]))
    profile = tmp_path / "profile"

    dom = browse(page, profile, "--dump-dom")
    cards = re.findall(r'<article class="card"[^>]*>', dom)
    assert len(cards) == 4 and not any("hidden" in c for c in cards)
    assert "4 of 4 shown" in dom, "the page's script did not run"

    # Filters come in the address too: only the rollout with a tool error is left.
    dom = browse(page, profile, "--dump-dom", fragment="#errors=with")
    shown = [c for c in re.findall(r'<article class="card"[^>]*>', dom) if "hidden" not in c]
    assert len(shown) == 1 and 'data-errors="1"' in shown[0]
    assert "1 of 4 shown" in dom
    dom = browse(page, profile, "--dump-dom", fragment="#min=0.5")
    assert "3 of 4 shown" in dom  # rewards 1 and 0.5, and the failure (it has no reward)

    screenshot = tmp_path / "view.png"
    browse(page, profile, f"--screenshot={screenshot}", "--window-size=1280,1400")
    assert screenshot.stat().st_size > 10_000
    keep = os.environ.get("HERMES_ENVGEN_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, Path(keep) / "view.png")
