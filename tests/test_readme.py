"""What the README promises a new user, where a test elsewhere cannot show it."""

from __future__ import annotations

import re

from conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_quick_start_says_how_to_reach_hermes_envgen():
    # The quick start installs into .venv, which is not on PATH.
    assert ".venv/bin/hermes-envgen" in README and ". .venv/bin/activate" in README


def test_releases_and_template_sources_are_documented():
    assert "bash scripts/release.sh 0.2.0" in README
    assert (REPO / "scripts" / "release.sh").is_file()
    assert "HERMES_ENVGEN_TEMPLATE_SOURCE=PATH" in README
    # A plain copier update: the redirection it needs, and its exit code on conflicts.
    assert re.search(r"GIT_CONFIG_KEY_0=\S+insteadOf", README)
    assert "exits 0 even when it leaves conflicts" in README


def test_every_command_in_the_readme_exists():
    from typer.main import get_command

    from hermes_envgen.cli import app

    commands = set(get_command(app).commands)
    blocks = "\n".join(re.findall(r"```bash\n(.*?)```", README, re.DOTALL))
    used = set(re.findall(r"^(?:\.venv/bin/)?hermes-envgen ([a-z-]+)", blocks, re.MULTILINE))
    assert used and used <= commands, used - commands
    assert "trainer" in used


def test_the_docker_image_the_readme_names_is_the_default():
    from hermes_envgen.runtime.sandbox import DEFAULT_DOCKER_IMAGE

    assert f"(default `{DEFAULT_DOCKER_IMAGE}`, pulled on first use)" in README


def test_the_check_thresholds_the_readme_names_are_the_defaults():
    from hermes_envgen.testing.thresholds import GOLD_THRESHOLD, NOOP_THRESHOLD

    text = " ".join(README.split())  # the sentence wraps
    assert f"`--gold-threshold` ({GOLD_THRESHOLD})" in text
    assert f"`--noop-threshold` ({NOOP_THRESHOLD})" in text


def test_every_script_and_benchmark_the_readme_names_exists():
    named = set(re.findall(r"\b((?:scripts|benchmarks)/[\w-]+\.(?:sh|py))\b", README))
    assert {"scripts/setup.sh", "scripts/lock.sh", "benchmarks/bench_setup.py"} <= named
    assert [path for path in sorted(named) if not (REPO / path).is_file()] == []
    # The fast loop the README offers is one scripts/test.sh knows.
    assert "bash scripts/test.sh --fast" in README
    assert '"${1:-}" = --fast' in (REPO / "scripts" / "test.sh").read_text()


def broken_code_spans(text: str) -> list[str]:
    """Lines outside code blocks where an inline code span opens and closes on a later line.

    Markdown joins such a span with the next line through a space: ``benchmarks/`` and
    ``bench_x.py`` on two lines render as ``benchmarks/ bench_x.py``. Spans are matched as
    CommonMark does, a run of backticks closed by the next run of the same length, within a
    paragraph (a blank line ends an unclosed one: it was never a span).
    """
    broken = []
    in_fence = False
    opened: tuple[str, int] | None = None  # the open span's backticks and its line's number
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            in_fence, opened = not in_fence, None
            continue
        if in_fence or not line.strip():
            opened = None
            continue
        for run in re.findall(r"`+", line):
            if opened is None:
                opened = (run, number)
            elif run == opened[0]:
                if opened[1] != number:
                    broken.append(lines[opened[1]])
                opened = None
    return broken


def test_no_inline_code_span_is_broken_across_lines():
    assert broken_code_spans("a `one\ntwo` b\n```\n`open\n```\n``x ` y`` `z`") == ["a `one"]
    assert broken_code_spans(README) == []


def test_the_config_defaults_the_readme_names_are_the_defaults():
    from hermes_envgen.runtime.config import HermesAgentEnvConfig

    start = README.index("`HermesAgentEnvConfig` adds to Atropos's `BaseEnvConfig`")
    paragraph = " ".join(README[start : README.index("\n\n", start)].split())
    # `name` ("text") or `name` (30) or `name` (1800: why), the value the README gives
    named = re.findall(r"`(\w+)` \((\"[^\"]*\"|[\w.]+)[):]", paragraph)
    assert len(named) >= 10 and "sandbox_backend" in dict(named)
    wrong = []
    for name, value in named:
        default = HermesAgentEnvConfig.model_fields[name].default
        text = value.strip('"') if value.startswith('"') else value
        expected = str(default).lower() if isinstance(default, bool) else str(default)
        if text != expected and not (isinstance(default, float) and float(text) == default):
            wrong.append(f"{name}: README {value}, default {default!r}")
    assert wrong == []
