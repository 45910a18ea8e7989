"""What the README and the docs pages state about the code, held against the code.

(Names of flags, settings, commands and API: test_names.py; the examples: test_examples.py.)
"""

from __future__ import annotations

import re

from helpers.markdown_blocks import REPO, pages, prose_lines, shown

README = REPO / "README.md"


def text_of(path: str) -> str:
    return " ".join((REPO / path).read_text(encoding="utf-8").split())  # sentences wrap


def test_the_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) < 150


def test_every_script_benchmark_and_variable_the_pages_name_exists():
    code = "\n".join(
        path.read_text(encoding="utf-8", errors="replace")
        for folder in ("src", "scripts", "tests", "hooks", "benchmarks")
        for path in (REPO / folder).rglob("*")
        if path.is_file()
        and path.suffix in (".py", ".sh")
        and "docs" not in path.relative_to(REPO).parts
    )
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for path in re.findall(
            r"\b((?:scripts|benchmarks|examples)/[\w-]+\.(?:sh|py|yaml))\b", text
        ):
            assert (REPO / path).is_file(), f"{shown(page)} names {path}, which does not exist"
        for variable in set(re.findall(r"\bHERMES_ENVGEN_[A-Z_]+\b", text)):
            assert variable in code, f"{shown(page)} names {variable}, which nothing reads"
    # The fast loop the pages offer is one scripts/test.sh knows.
    assert "bash scripts/test.sh --fast" in (REPO / "CONTRIBUTING.md").read_text()
    assert '"${1:-}" = --fast' in (REPO / "scripts" / "test.sh").read_text()


def test_the_defaults_the_pages_state_are_the_codes():
    from hermes_envgen.runtime.sandbox import DEFAULT_DOCKER_IMAGE
    from hermes_envgen.testing.thresholds import GOLD_THRESHOLD, NOOP_THRESHOLD

    sandboxes = text_of("docs/concepts/sandboxes.md")
    stated = re.search(r"`sandbox_image` \(default `([^`]+)`, pulled on first use\)", sandboxes)
    assert stated and stated.group(1) == DEFAULT_DOCKER_IMAGE
    check = text_of("docs/how-to/check.md")
    gold = re.search(r"at least `--gold-threshold` \(([\d.]+)\)", check)
    noop = re.search(r"at most `--noop-threshold` \(([\d.]+)\)", check)
    assert gold and float(gold.group(1)) == GOLD_THRESHOLD
    assert noop and float(noop.group(1)) == NOOP_THRESHOLD


# `name` ("text"), `name` (30), `--env.name` (0: why), `name`, 1.0: ... as the pages name a default
STATED_DEFAULT = re.compile(
    r"`(?:--env\.)?(\w+)`(?: \(|, )(\"[^\"]*\"|-?[\d.]*\d|true|false)[):,;]"
)


def stated_defaults(text: str) -> list[tuple[str, str]]:
    from hermes_envgen.runtime import HermesAgentEnvConfig

    fields = HermesAgentEnvConfig.model_fields
    return [(name, value) for name, value in STATED_DEFAULT.findall(text) if name in fields]


def wrong_defaults(named: list[tuple[str, str]]) -> list[str]:
    """The stated defaults that are not the setting's; a setting whose default is None is held
    against what its description says it means (``1.0 by default``)."""
    from hermes_envgen.runtime import HermesAgentEnvConfig

    wrong = []
    for name, value in named:
        field = HermesAgentEnvConfig.model_fields[name]
        default = field.default
        text = value.strip('"')
        if default is None:
            ok = f"{text} by default" in (field.description or "")
        elif isinstance(default, bool):
            ok = text == str(default).lower()
        elif isinstance(default, (int, float)):
            ok = not value.startswith('"') and float(text) == default
        else:
            ok = text == str(default)
        if not ok:
            wrong.append(f"{name}: stated {value}, default {default!r}")
    return wrong


def test_the_setting_defaults_the_pages_name_are_the_defaults():
    assert wrong_defaults(stated_defaults("`eval_size` (20) and `failure_score` (0: why)")) == []
    assert wrong_defaults(stated_defaults("`sandbox_cpus` (1.0)")) == []  # None: 1.0 by default
    assert wrong_defaults(stated_defaults('`eval_size` (21), `tool_call_parser` ("json")')) == [
        "eval_size: stated 21, default 20",
        "tool_call_parser: stated \"json\", default 'hermes'",
    ]
    named = []
    wrong = []
    for page in [README, *pages()]:
        found = stated_defaults(" ".join(page.read_text(encoding="utf-8").split()))
        named += found
        wrong += [f"{shown(page)}: {problem}" for problem in wrong_defaults(found)]
    assert wrong == []
    assert len(named) >= 10 and {"failure_score", "eval_size", "sandbox_cpus"} <= dict(named).keys()


def broken_code_spans(lines: list[tuple[int, str]]) -> list[str]:
    """Lines outside code blocks where an inline code span opens and closes on a later line.

    Markdown joins such a span with the next line through a space: ``benchmarks/`` and
    ``bench_x.py`` on two lines render as ``benchmarks/ bench_x.py``. Spans are matched as
    CommonMark does, a run of backticks closed by the next run of the same length, within a
    paragraph (a blank line ends an unclosed one: it was never a span).
    """
    broken = []
    opened: tuple[str, int, str] | None = None  # the open span's backticks, line number, line
    for number, line in lines:
        if not line.strip():
            opened = None
            continue
        for run in re.findall(r"`+", line):
            if opened is None:
                opened = (run, number, line)
            elif run == opened[0]:
                if opened[1] != number:
                    broken.append(f"{opened[1]}: {opened[2]}")
                opened = None
    return broken


def test_no_inline_code_span_is_broken_across_lines(tmp_path):
    sample = tmp_path / "sample.md"
    sample.write_text("a `one\ntwo` b\n```\n`open\n```\n``x ` y`` `z`\n")
    assert broken_code_spans(prose_lines(sample)) == ["1: a `one"]
    for page in pages():
        assert broken_code_spans(prose_lines(page)) == [], shown(page)


def site_pages() -> set[str]:
    """The site's page addresses, as their directory URLs name them (``how-to/check``)."""
    docs = REPO / "docs"
    names = {str(p.relative_to(docs).with_suffix("")) for p in docs.rglob("*.md")}
    return {name.removesuffix("/index") for name in names}


def test_the_links_into_the_site_name_its_pages():
    """The README's and the generated project's README's links lead to pages that exist."""
    template = (REPO / "template" / "README.md.jinja").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    site = r"https://hermes-envgen\.github\.io/hermes-envgen/(?:\{\{ docs_release \}\}/)?"
    linked = re.findall(site + r"([\w/-]*)", template) + re.findall(site + r"([\w/-]*)", readme)
    assert len(linked) >= 10
    missing = [link for link in linked if link.rstrip("/") not in site_pages() | {""}]
    assert missing == []
