"""Parser registry: names, aliases, listing, errors, and the package's import hygiene."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hermes_envgen.runtime import parsers
from hermes_envgen.runtime.parsers import (
    ToolCallParser,
    UnknownParserError,
    get_parser,
    list_parsers,
    register_parser,
)
from hermes_envgen.runtime.parsers import base as parsers_base

REQUIRED = {
    "hermes",
    "qwen",
    "longcat",
    "mistral",
    "llama3_json",
    "llama4_json",
    "qwen3_coder",
    "deepseek_v3",
    "deepseek_v3_1",
    "deepseek_v31",
    "kimi_k2",
    "glm45",
    "glm47",
    "gpt_oss",
    "harmony",
    "auto",
}


def test_every_required_name_is_registered() -> None:
    names = {name for name, _ in list_parsers()}
    assert names == REQUIRED


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_get_parser_returns_a_parser_instance(name: str) -> None:
    parser = get_parser(name)
    assert isinstance(parser, ToolCallParser)
    assert parser.format and "\n" not in parser.format
    assert parser.parse("hello") == ("hello", None)


def test_instances_carry_their_own_name() -> None:
    for name, fmt in list_parsers():
        if not fmt.startswith("alias of"):
            assert get_parser(name).name == name


def test_alias_resolves_to_target() -> None:
    assert type(get_parser("deepseek_v31")) is type(get_parser("deepseek_v3_1"))
    assert get_parser("deepseek_v31").name == "deepseek_v3_1"
    assert ("deepseek_v31", "alias of deepseek_v3_1") in list_parsers()


def test_lookup_is_forgiving_about_case_and_dashes() -> None:
    assert get_parser(" DeepSeek-V3 ").name == "deepseek_v3"


def test_list_is_sorted_rows_of_strings() -> None:
    rows = list_parsers()
    assert rows == sorted(rows)
    assert all(isinstance(n, str) and isinstance(f, str) and f for n, f in rows)


@pytest.mark.parametrize("bad", ["nope", "", "hermes2", None])
def test_unknown_name_lists_valid_names(bad) -> None:
    with pytest.raises(UnknownParserError) as info:
        get_parser(bad)
    assert isinstance(info.value, ValueError)
    for name in REQUIRED:
        assert name in str(info.value)


def test_register_custom_parser_and_conflicts() -> None:
    @register_parser("test_echo_custom", "test_echo_alias")
    class Echo(ToolCallParser):
        """A parser that calls nothing, to exercise the registry."""

        format = "nothing"

        def _parse(self, text: str):
            return text, None

    try:
        assert get_parser("test_echo_custom").name == "test_echo_custom"
        assert isinstance(get_parser("test_echo_alias"), Echo)
        with pytest.raises(ValueError, match="already registered"):

            @register_parser("hermes")
            class Clash(Echo):
                """Reuses a taken name."""
    finally:
        parsers_base._PARSERS.pop("test_echo_custom", None)
        parsers_base._ALIASES.pop("test_echo_alias", None)


def test_internal_error_never_escapes() -> None:
    class Broken(ToolCallParser):
        """Raises from its implementation."""

        name = "broken"
        format = "x"

        def _parse(self, text: str):
            raise RuntimeError("bug")

    assert Broken().parse("abc") == ("abc", None)


def test_non_string_input_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        get_parser("hermes").parse(None)  # type: ignore[arg-type]


def test_public_api_exports() -> None:
    for name in parsers.__all__:
        assert hasattr(parsers, name)


def test_package_imports_only_the_standard_library() -> None:
    code = (
        "import sys; import hermes_envgen.runtime.parsers as p; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('atroposlib', 'transformers', 'openai', 'pydantic', 'aiohttp', 'yaml', 'tokenizers')"
        " or (m.startswith('hermes_envgen.runtime.') and not m.startswith("
        "('hermes_envgen.runtime.parsers', 'hermes_envgen.runtime.errors')))];"
        " print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
