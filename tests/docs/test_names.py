"""Every flag, setting, command and API name the docs and the README mention exists.

Read from the code itself, as the generated reference pages are (docs/_hooks/reference.py):
``--env.NAME`` and ``--openai.NAME`` flags against the settings classes (and the settings a
generated env adds in template/), ``hermes-envgen COMMAND --option`` against the command line,
``hermes_envgen.`` paths and ``Name.attribute`` of the runtime's and test kit's API against
the modules. A name that does not exist fails with its page and line.
"""

from __future__ import annotations

import importlib
import importlib.util
import re

from helpers.markdown_blocks import REPO, all_lines, blocks, pages, prose_lines, shown
from helpers.reference_names import reference, spec

assert spec and spec.loader
spec.loader.exec_module(reference)

TEMPLATE_ENV = REPO / "template" / "src" / "{{ package_name }}" / "env.py.jinja"
FLAG = re.compile(r"--(env|openai)\.([A-Za-z_]\w*)")
COMMAND = re.compile(r"(?:^|[\s(;&|])(?:\.venv/bin/)?hermes-envgen ([a-z][a-z-]*)([^;&|]*)")
OPTION = re.compile(r"(?<![\w.-])(--[a-z][a-z-]*)")
DOTTED = re.compile(r"\bhermes_envgen(?:\.\w+)+")
MEMBER = re.compile(r"`([A-Z]\w+)\.([a-z_]\w*)")


def template_settings() -> set[str]:
    """The settings a generated env's config class adds (the judge's, say)."""
    text = TEMPLATE_ENV.read_text(encoding="utf-8")
    return set(re.findall(r"^    (\w+): [^=\n]+= Field\(", text, re.MULTILINE))


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    try:  # a module that needs an optional dependency (torch) to import still exists
        if importlib.util.find_spec(dotted) is not None:
            return True
    except ImportError:
        pass
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(value, name):
                return False
            value = getattr(value, name)
        return True
    return False


def unknown_names(page, settings, options) -> list[str]:
    from hermes_envgen import runtime, testing

    api = {name: getattr(module, name) for module in (runtime, testing) for name in module.__all__}
    problems = []
    lines = all_lines(page)
    for number, line in lines:
        where = f"{shown(page)}:{number}"
        for prefix, name in FLAG.findall(line):
            if name not in settings[prefix] and name not in ("NAME", "name"):
                problems.append(f"{where}: --{prefix}.{name} is no setting")
        for dotted in DOTTED.findall(line):
            if not resolves(dotted):
                problems.append(f"{where}: {dotted} does not exist")
        for owner, member in MEMBER.findall(line):
            if owner in api and not hasattr(api[owner], member):
                problems.append(f"{where}: {owner}.{member} does not exist")
    # Commands and their options, in code only: blocks (a command's continuation lines joined)
    # and inline spans.
    code: list[tuple[int, str]] = []
    for block in blocks(page):
        number, joined = block.line + 1, ""
        for offset, command_line in enumerate(block.text.splitlines()):
            if not joined:
                number = block.line + 1 + offset
            joined += command_line
            if joined.endswith("\\"):
                joined = joined[:-1] + " "
                continue
            code.append((number, joined))
            joined = ""
    for number, line in prose_lines(page):
        code += [(number, span) for span in re.findall(r"`([^`]+)`", line)]
    for number, fragment in code:
        where = f"{shown(page)}:{number}"
        for match in COMMAND.finditer(fragment):
            command, rest = match.group(1), match.group(2).split("#", 1)[0]
            if command not in options:
                problems.append(f"{where}: hermes-envgen {command} is no command")
                continue
            for option in OPTION.findall(rest):
                if option not in options[command]:
                    problems.append(f"{where}: hermes-envgen {command} has no option {option}")
    return problems


def test_every_name_the_docs_use_exists():
    settings = reference.setting_names()
    settings["env"] |= template_settings()
    options = reference.cli_options()
    problems = [p for page in pages() for p in unknown_names(page, settings, options)]
    assert problems == []


def test_a_wrong_name_is_found_with_its_page_and_line(tmp_path):
    settings = reference.setting_names()
    options = reference.cli_options()
    bad = tmp_path / "bad.md"
    bad.write_text(
        "Fine: `--env.max_agent_turns`, `hermes-envgen check --gold-threshold 0.9`.\n"
        "Wrong: `--env.max_agent_turn` and `--openai.base_uri`;\n"
        "```bash\nhermes-envgen chek my-env\nhermes-envgen check my-env \\\n    --gold 0.9\n```\n"
        "`hermes_envgen.runtime.NoSuchName` and `ToolContext.no_such_method`.\n"
    )
    problems = unknown_names(bad, settings, options)
    names = [p.split(": ", 1)[1] for p in problems]
    lines = [int(p.split(": ", 1)[0].rsplit(":", 1)[1]) for p in problems]
    assert names == [
        "--env.max_agent_turn is no setting",
        "--openai.base_uri is no setting",
        "hermes_envgen.runtime.NoSuchName does not exist",
        "ToolContext.no_such_method does not exist",
        "hermes-envgen chek is no command",
        "hermes-envgen check has no option --gold",
    ]
    assert lines == [2, 2, 8, 8, 4, 5]


def test_the_template_settings_are_read():
    # The judge's settings that a generated judge env adds, which the tutorial names.
    assert {"judge_base_url", "judge_model", "judge_api_key_env"} <= template_settings()
