"""Reference pages generated from the code, so that they change when the code does.

An mkdocs hook (``hooks:`` in mkdocs.yml): a page that holds a line ``<!-- generated: NAME -->``
gets that line replaced by the Markdown of ``GENERATORS[NAME]``, made from the code itself:

- ``settings``: every field of ``HermesAgentEnvConfig`` (its ``--env.`` flag, type, default and
  ``Field`` description), then atroposlib's ``APIServerConfig`` (the ``--openai.`` flags);
- ``cli``: every ``hermes-envgen`` command from the Typer app (its help, arguments, options);
- ``errors``: every error class on ``HermesEnvgenError`` with its exit code and meaning.

The API pages need no hook: mkdocstrings renders them from the docstrings (``::: module``).
tests/docs imports this module to check the names pages mention against the same sources.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Iterator
from typing import Any

MARKER = re.compile(r"^<!-- generated: ([a-z]+) -->$", re.MULTILINE)


def cell(text: object) -> str:
    """Text fit for one Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(text: object) -> str:
    """An inline code span that holds ``text`` whatever backticks it has."""
    value = cell(text)
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


# -- settings ----------------------------------------------------------------------------------


def type_name(annotation: Any) -> str:
    """A field's type as a reader writes it: ``list[str] | None``, ``int``, ``Literal[...]``."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    text = str(annotation)
    text = re.sub(r"\btyping\.", "", text)
    text = re.sub(r"<class '([\w.]+)'>", r"\1", text)
    text = re.sub(r"\b(?:[a-z_]+\.)+([A-Z]\w*)", r"\1", text)  # module paths off class names
    return text.replace("NoneType", "None")


def default_text(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        try:
            return repr(field.default_factory())
        except TypeError:  # a factory that takes the validated data
            return "(computed)"
    if field.default is PydanticUndefined:
        return "(required)"
    return repr(field.default)


def setting_fields(model: type) -> Iterator[tuple[str, Any]]:
    """The model's fields in declaration order, each with its own field info."""
    yield from model.model_fields.items()  # type: ignore[attr-defined]


def settings_table(model: type, prefix: str, only_own: bool) -> str:
    """A table of ``model``'s fields: flag, type, default, description."""
    inherited: set[str] = set()
    if only_own:
        for base in model.__mro__[1:]:
            inherited |= set(getattr(base, "model_fields", {}))
    rows = ["| setting | type | default | what it does |", "|---|---|---|---|"]
    for name, field in setting_fields(model):
        if name in inherited:
            continue
        rows.append(
            f"| {code(prefix + name)} | {code(type_name(field.annotation))} "
            f"| {code(default_text(field))} | {cell(field.description or '')} |"
        )
    return "\n".join(rows)


def settings_markdown() -> str:
    from atroposlib.envs.base import BaseEnvConfig
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    from hermes_envgen.runtime import HermesAgentEnvConfig

    return "\n\n".join(
        [
            "## The env's settings (`--env.NAME`)",
            "What `HermesAgentEnvConfig` adds to Atropos's `BaseEnvConfig`, in the order the "
            "class declares them. Each is a `--env.NAME` flag of `serve`, `process` and "
            "`evaluate`, a key under `env:` in a `--config` YAML file, and an argument of "
            "`HermesAgentEnvConfig(...)` in `config_init`.",
            settings_table(HermesAgentEnvConfig, "--env.", only_own=True),
            "## Atropos's own settings (`--env.NAME`)",
            "Inherited from `atroposlib.envs.base.BaseEnvConfig` (atroposlib 0.4.0).",
            settings_table(BaseEnvConfig, "--env.", only_own=False),
            "## The model server (`--openai.NAME`)",
            "atroposlib's `APIServerConfig`: one inference server. For several, list them "
            "under `openai:` in a `--config` YAML file (see "
            "[Scaling out](../how-to/scaling-out.md#several-inference-servers)).",
            settings_table(APIServerConfig, "--openai.", only_own=False),
        ]
    )


def setting_names() -> dict[str, set[str]]:
    """The names each flag prefix takes: ``{"env": {...}, "openai": {...}}``."""
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    from hermes_envgen.runtime import HermesAgentEnvConfig

    return {
        "env": set(HermesAgentEnvConfig.model_fields),
        "openai": set(APIServerConfig.model_fields),
    }


# -- the command line --------------------------------------------------------------------------


def cli_root() -> Any:
    from typer.main import get_command

    from hermes_envgen.cli import app

    return get_command(app)


def commands(group: Any, path: str = "hermes-envgen") -> Iterator[tuple[str, Any]]:
    """Every command under ``group``, as ``(full name, click command)``, sorted by name."""
    for name in sorted(group.commands):
        command = group.commands[name]
        if getattr(command, "hidden", False):
            continue
        yield f"{path} {name}", command
        if hasattr(command, "commands"):
            yield from commands(command, f"{path} {name}")


def option_default(param: Any) -> str:
    if getattr(param, "is_flag", False) and not param.default:
        return ""
    if param.default is None or callable(param.default):
        return ""
    if isinstance(param.default, (list, tuple)) and not param.default:
        return ""
    value = getattr(param.default, "value", param.default)  # an Enum's value
    return code(value)


def command_markdown(full_name: str, command: Any) -> str:
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    options = [p for p in command.params if p.param_type_name == "option" and not p.hidden]
    usage = " ".join(
        [
            full_name,
            *(f"[{a.name.upper()}]" if not a.required else a.name.upper() for a in arguments),
        ]
    )
    parts = [
        f"## `{full_name}`",
        f"```text\n{usage} [OPTIONS]\n```",
        inspect.cleandoc(command.help or ""),
    ]
    if arguments:
        rows = ["| argument | what it is |", "|---|---|"]
        for argument in arguments:
            rows.append(
                f"| {code(argument.name.upper())} | {cell(getattr(argument, 'help', '') or '')} |"
            )
        parts.append("\n".join(rows))
    if options:
        rows = ["| option | default | what it does |", "|---|---|---|"]
        for option in options:
            names = ", ".join(code(o) for o in [*option.opts, *option.secondary_opts])
            rows.append(f"| {names} | {option_default(option)} | {cell(option.help or '')} |")
        parts.append("\n".join(rows))
    return "\n\n".join(parts)


def cli_markdown() -> str:
    return "\n\n".join(command_markdown(name, command) for name, command in commands(cli_root()))


def cli_options() -> dict[str, set[str]]:
    """Each command's name (``check``, ``trainer``) with the option names it takes."""
    return {
        name.removeprefix("hermes-envgen "): {
            opt
            for p in command.params
            if p.param_type_name == "option"
            for opt in [*p.opts, *p.secondary_opts]
        }
        | {"--help"}
        for name, command in commands(cli_root())
    }


# -- errors ------------------------------------------------------------------------------------


def error_classes() -> list[type]:
    """Every error class of ``hermes_envgen.errors`` and ``hermes_envgen.runtime.errors``."""
    from hermes_envgen import errors
    from hermes_envgen.runtime import errors as runtime_errors

    found = []
    for module in (errors, runtime_errors):
        for _, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, errors.HermesEnvgenError)
                and value.__module__ == module.__name__
            ):
                found.append(value)
    return found


def errors_markdown() -> str:
    rows = ["| error | exit code | on | what it means |", "|---|---|---|---|"]
    for error in error_classes():
        parents = ", ".join(
            code(base.__name__) for base in error.__bases__ if base is not Exception
        )
        doc = inspect.cleandoc(error.__doc__ or "").split("\n\n")[0]
        rows.append(
            f"| {code(error.__module__ + '.' + error.__name__)} | {error.exit_code} "  # type: ignore[attr-defined]
            f"| {parents} | {cell(doc)} |"
        )
    return "\n".join(rows)


GENERATORS: dict[str, Callable[[], str]] = {
    "settings": settings_markdown,
    "cli": cli_markdown,
    "errors": errors_markdown,
}


def expand(markdown: str) -> str:
    """``markdown`` with each marker line replaced by its generated Markdown."""

    def generated(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(
                f"<!-- generated: {name} -->: no such generator ({', '.join(GENERATORS)})"
            )
        return GENERATORS[name]()

    return MARKER.sub(generated, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs hook: fill in the generated parts of a page."""
    return expand(markdown)
