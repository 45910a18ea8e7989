"""Any answer text renders safely: each reaches its file through a filter made for that file.

Hostile text (quotes, triple quotes, backslashes, Jinja, newlines, U+2028, emoji, CJK, YAML
words, 25 KB) goes into every free-text question. Whatever is rendered imports with no side
effect, is ruff-clean, and gives back exactly the text that was typed: in the env's Python
values, in configs/default.yaml, in pyproject.toml, in the README as Markdown reads it, and in
the shell lines of the README and the CI workflow (which must stay valid YAML). One hostile
project also runs its own tests (the stub model sees the emoji system prompt).
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml
from conftest import REPO
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from hermes_envgen.generate.bundle import template_paths

PIECES = [
    '"', "'", '"""', "'''", "\\", "\\n", "C:\\Users", "{{ x }}", "{% raw %}", "{% endraw %}",
    "{#", "${HOME}", "\u2028", "\u2029", "\x85", "😀", "🧪🚀", "中文", "日本語", "yes", "null",
    "~", "no", "- ", "# ", "1. ", "*x*", "<b>", "&amp;", "`", "[a](b)", "|", "\t", "\n", "\r\n",
]  # fmt: skip
BIG = "All work and no play. 😀 " * 1000  # about 25 KB

# Text on one line (descriptions, author names): no control characters, which they refuse.
ONE_LINE = st.characters(exclude_categories=("Cs", "Cc", "Zl", "Zp"))
# Where hermes-envgen is installed from: also no noncharacter, which YAML cannot hold.
SOURCE = st.characters(
    exclude_categories=("Cs", "Cc", "Zl", "Zp"), exclude_characters="\ufffe\uffff"
)
# System prompts: any text, line breaks and tabs included, but other control characters.
PROMPT = st.characters(exclude_categories=("Cs", "Cc")) | st.sampled_from("\t\n\r")
# Names (models, tokenizers, dataset fields): printable ASCII, no spaces or backticks.
NAME = st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="`")


def hostile(
    alphabet: st.SearchStrategy[str], pieces: list[str], *, big: bool = False, min_size: int = 0
) -> st.SearchStrategy[str]:
    """Text made of hostile pieces and random characters; with ``big``, now and then 25 KB."""
    chunks = st.lists(st.sampled_from(pieces) | st.text(alphabet, max_size=12), max_size=8)
    text = chunks.map("".join).filter(lambda value: len(value) >= min_size)
    if big:
        return st.one_of(text, text.map(lambda value: value + BIG), st.sampled_from(pieces))
    return text | st.sampled_from(pieces)


def _one_line(piece: str) -> bool:
    return all(ch.isprintable() or ch == " " for ch in piece) and "\u2028" not in piece


def _name(piece: str) -> bool:
    return piece.isascii() and piece.isprintable() and " " not in piece and "`" not in piece


PROMPT_PIECES = [piece for piece in PIECES if piece != "\x85"]
ONE_LINE_PIECES = [piece for piece in PIECES if _one_line(piece)]
NAME_PIECES = [piece for piece in PIECES if _name(piece)] + ["{{x}}", "{%raw%}", "org/model"]
ANSWERS = st.fixed_dictionaries(
    {
        "description": hostile(ONE_LINE, ONE_LINE_PIECES, big=True),
        "author_name": hostile(ONE_LINE, ONE_LINE_PIECES),
        "system_prompt": hostile(PROMPT, PROMPT_PIECES, big=True),
        "model_name": hostile(NAME, NAME_PIECES, min_size=1),
        "base_url": hostile(NAME, NAME_PIECES).map(lambda value: f"http://host:8000/v1/{value}"),
        "tokenizer_name": hostile(NAME, NAME_PIECES),
        "dataset_split": hostile(NAME, NAME_PIECES, min_size=1),
        "prompt_field": hostile(NAME, NAME_PIECES, min_size=1),
        "answer_field": hostile(NAME, NAME_PIECES, min_size=1),
        "judge_base_url": hostile(NAME, NAME_PIECES).map(lambda value: f"https://j:9/v1/{value}"),
        "judge_model": hostile(NAME, NAME_PIECES, min_size=1),
        "judge_api_key_env": st.from_regex(r"[A-Z_][A-Z0-9_]{0,20}", fullmatch=True) | st.just(""),
        # A wheel path or directory (CI cannot reach it), or a git+ URL (CI installs it).
        "hermes_envgen_source": st.one_of(
            hostile(SOURCE, ONE_LINE_PIECES),
            hostile(SOURCE, ONE_LINE_PIECES).map(lambda value: f"git+{value}"),
        ),
    }
)
FIXED = {
    "ci": True,  # a local source makes no workflow unless asked for: its install step is tested
    "provider": "vllm",
    "use_dataset": True,
    "dataset_name": "org/tasks",
    "reward_pattern": "judge",
    "judge_base_url": "policy",  # a self-hosted server has no other model to judge with
}
INSTALL_STEP = "Install hermes-envgen (on no package index)"
CONSTRAINED = ["uv", "pip", "install", "-c", "constraints.txt"]  # at the tested versions

# Prints, as JSON, every answer value as the generated packages see it.
PROBE = """
import importlib, json, sys
out = {}
for package in sys.argv[1:]:
    env = importlib.import_module(package + ".env")
    cls = next(
        v for k, v in vars(env).items() if k.endswith("Env") and v.__module__ == env.__name__
    )
    config, (server,) = cls.config_init()
    out[package] = {
        "system_prompt": config.system_prompt, "model_name": server.model_name,
        "base_url": server.base_url, "tokenizer_name": config.tokenizer_name,
        "dataset_split": config.dataset_split, "prompt_field": config.prompt_field,
        "answer_field": config.answer_field, "doc": importlib.import_module(package).__doc__,
        "judge_base_url": config.judge_base_url, "judge_model": config.judge_model,
        "judge_api_key_env": config.judge_api_key_env or "",
    }
sys.stdout.write("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def template_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """copier.yml + template/ of the working tree in a plain folder: copier renders it directly."""
    target = tmp_path_factory.mktemp("template")
    for relpath in template_paths(REPO):
        (target / relpath).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / relpath, target / relpath)
    return target


def render(template: Path, target: Path, data: dict[str, Any]) -> Path:
    """Render the template into ``target`` with ``data`` and the defaults for the rest."""
    import copier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        copier.run_copy(str(template), str(target), data=data, defaults=True, quiet=True)
    return target


def readme_description(readme: str) -> str:
    """The text of the README's first paragraph (the description), as Markdown reads it."""
    tokens = MarkdownIt("commonmark").parse(readme)
    index = next(i for i, token in enumerate(tokens) if token.type == "paragraph_open")
    inline = tokens[index + 1]
    assert all(child.type == "text" for child in inline.children), inline.children
    return "".join(child.content for child in inline.children)


def check_files(project: Path, answers: dict[str, Any]) -> None:
    """The data files and the README hold exactly the answers."""
    meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert meta["description"] == answers["description"]
    assert meta["authors"] == [{"name": answers["author_name"]}]
    config = yaml.safe_load((project / "configs" / "default.yaml").read_text(encoding="utf-8"))
    assert config["openai"]["model_name"] == answers["model_name"]
    assert config["openai"]["base_url"] == answers["base_url"]
    recorded = yaml.safe_load((project / ".copier-answers.yml").read_text(encoding="utf-8"))
    assert {key: recorded[key] for key in answers} == answers
    readme = (project / "README.md").read_text(encoding="utf-8")
    assert readme_description(readme) == answers["description"].strip().rstrip(".") + "."
    check_install_source(project, readme, answers["hermes_envgen_source"])


def shell_words(block: str, start: str) -> list[list[str]]:
    """The words of each shell line of ``block`` that begins with ``start``, comments dropped."""
    return [
        shlex.split(line, comments=True) for line in block.splitlines() if line.startswith(start)
    ]


def check_install_source(project: Path, readme: str, source: str) -> None:
    """The README and CI workflow install hermes-envgen from exactly ``source``, in shell words."""
    blocks = [
        token.content
        for token in MarkdownIt("commonmark").parse(readme)
        if token.type == "fence" and token.info == "bash"
    ]
    (setup,) = [block for block in blocks if block.startswith("uv venv")]
    (upgrade,) = [block for block in blocks if "--no-deps" in block]
    if source:
        assert shell_words(setup, "uv pip install ")[0] == [*CONSTRAINED, source]
        assert shell_words(upgrade, "uv pip install ")[0][-1] == source
    else:
        assert shell_words(setup, "uv pip install ")[0] == [*CONSTRAINED, "-e", ".[dev]"]
    workflow = yaml.safe_load((project / ".github" / "workflows" / "tests.yml").read_text())
    steps = {step.get("name"): step.get("run", "") for step in workflow["jobs"]["test"]["steps"]}
    if source.startswith(("git+", "https://")):
        assert shell_words(steps[INSTALL_STEP], "uv pip install ") == [
            ["uv", "pip", "install", "--system", "-c", "constraints.txt", source]
        ]
    elif source:  # a local path, and no release to fetch from the public repository
        assert "exit 1" in steps[INSTALL_STEP]
    else:
        assert INSTALL_STEP not in steps


def run(command: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, encoding="utf-8", timeout=timeout
    )


@pytest.mark.slow
@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking renders for many minutes
)
@given(batch=st.lists(ANSWERS, min_size=4, max_size=4))
def test_hostile_answers_render_exactly_and_import_without_side_effects(
    batch: list[dict[str, Any]], template_dir: Path, tmp_path_factory: pytest.TempPathFactory
):
    work = tmp_path_factory.mktemp("hostile")
    packages = []
    for index, answers in enumerate(batch):
        name = f"hostile-{index}"
        project = render(template_dir, work / name, {**FIXED, "project_name": name, **answers})
        check_files(project, answers)
        packages.append(f"hostile_{index}")
    for args in (["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]):
        result = run([sys.executable, "-m", "ruff", *args], work)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]

    # Import from an empty directory: nothing may be printed or written by the import.
    empty = work / "cwd"
    empty.mkdir()
    paths = ":".join(str(work / f"hostile-{index}" / "src") for index in range(len(batch)))
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, *packages],
        cwd=empty,
        env={**os.environ, "PYTHONPATH": f"{paths}:{os.environ.get('PYTHONPATH', '')}"},
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=180,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert probe.stdout.startswith("RESULT"), probe.stdout[:2000]
    assert list(empty.iterdir()) == []
    seen = json.loads(probe.stdout.removeprefix("RESULT"))
    for package, answers in zip(packages, batch, strict=True):
        values = seen[package]
        assert values.pop("doc").startswith(package.replace("_", "-"))
        assert values == {key: answers[key] for key in values}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("description", "two\nlines"),
        ("author_name", "tab\there"),
        ("model_name", "has space"),
        ("model_name", "emoji😀"),
        ("tokenizer_name", "back`tick"),
        ("base_url", "http://host/a b"),
        ("dataset_split", "中文"),
        ("system_prompt", "bell\x07"),
        ("system_prompt", "next line\x85"),
        ("hermes_envgen_source", "/wheels\nrm -rf ~"),
        ("hermes_envgen_source", "git+https://host/x\ufffe"),  # the CI workflow's YAML refuses it
    ],
)
def test_text_a_file_cannot_hold_is_refused_with_a_reason(
    template_dir: Path, tmp_path: Path, key: str, value: str
):
    with pytest.raises(ValueError, match=f"Validation error for question '{key}'"):
        data = {**FIXED, "project_name": "refused", "model_name": "m", key: value}
        render(template_dir, tmp_path / "refused", data)
    assert not (tmp_path / "refused").exists()


# The one free text rendered into Python source (env.py): up to 300 characters, any quotes,
# backslashes and CJK; a URL is printable ASCII.
MCP_SERVERS = [
    "npx -y @example/files-server --root .",
    """python -c "print('x')" C:\\path 'it''s' \\" {{ x }} 中文 é""" * 5,
    "node server.js " + "x" * 285,
    "https://mcp.example.com/" + "a/" * 138,
]


@pytest.mark.slow  # four renders
def test_an_mcp_server_of_any_allowed_text_renders_ruff_clean_and_exact(
    template_dir: Path, tmp_path: Path
):
    for index, server in enumerate(MCP_SERVERS):
        assert len(server) <= 300
        name = f"mcp-server-{index}"
        data = {"project_name": name, "toolsets": ["terminal", "mcp"], "mcp_server": server}
        render(template_dir, tmp_path / name, data)
    for args in (["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]):
        result = run([sys.executable, "-m", "ruff", *args], tmp_path)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    for index, server in enumerate(MCP_SERVERS):
        source = (tmp_path / f"mcp-server-{index}/src/mcp_server_{index}/env.py").read_text()
        values = {
            node.targets[0].id: node.value
            for node in ast.parse(source).body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        }
        if server.startswith("http"):
            assert ast.literal_eval(values["MCP_SERVERS"])[0]["url"] == server
        else:
            assert ast.literal_eval(values["MCP_COMMAND"].args[0]) == server


HOSTILE_PROJECT = {
    **FIXED,
    "use_dataset": False,
    "provider": "atropos",
    "model_name": "yes",
    "description": 'Ends """ a docstring; C:\\Users 😀 中文 {{ x }} {% raw %}',
    "author_name": 'Zoë "🧪" \\ 日本語',
    "system_prompt": 'You are 😀 an agent.\n"""\\ {{ x }}\u2028 中文\r\nAnswer briefly.  ',
}


@pytest.mark.slow
def test_a_hostile_project_passes_its_own_tests(template_dir: Path, tmp_path: Path):
    data = {**HOSTILE_PROJECT, "project_name": "hostile-env"}
    project = render(template_dir, tmp_path / "hostile-env", data)
    result = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], project, timeout=600
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout
