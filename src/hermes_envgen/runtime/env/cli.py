"""The env's command line: Atropos's serve / process / evaluate CLI, and the checks of its
settings that stop a run at start-up with one line saying what to change.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_envgen.errors import HermesEnvgenError, report
from hermes_envgen.runtime.env.config import skill_flags
from hermes_envgen.runtime.errors import EnvConfigError
from hermes_envgen.runtime.sandbox.runs import exit_on_termination
from hermes_envgen.runtime.urls import is_local, same_server


def run_env_cli(atropos_cli: Callable[[], None]) -> None:
    """Run ``atropos_cli`` (atroposlib's ``BaseEnv.cli``) with user mistakes in one line."""
    exit_on_termination()  # SIGTERM exits normally: the run's sandboxes are removed

    from pydantic import ValidationError

    try:
        sys.argv[1:] = joined_list_flags(skill_flags(sys.argv[1:]))
        atropos_cli()
    except HermesEnvgenError as exc:  # configuration mistakes exit 2, the model server's too
        sys.exit(report(exc))
    except ValidationError as exc:  # a flag's value: a configuration mistake like the others
        sys.exit(report(EnvConfigError(validation_line(exc))))


# Settings that take a list on the command line, comma-separated.
LIST_FLAGS = ("--env.sandbox_docker_hosts",)


def joined_list_flags(args: list[str]) -> list[str]:
    """``--env.sandbox_docker_hosts A B`` as ``A,B``: atroposlib takes one value per flag
    (it would drop ``B`` without a word)."""
    joined: list[str] = []
    index = 0
    while index < len(args):
        joined.append(args[index])
        if args[index] in LIST_FLAGS:
            values = []
            while index + 1 < len(args) and not args[index + 1].startswith("-"):
                values.append(args[index + 1])
                index += 1
            if values:
                joined.append(",".join(values))
        index += 1
    return joined


def check_not_rollout_server(server_config: Any, rollout_server_url: str | None) -> None:
    """Refuse a model URL that is the rollout server's (run-api): it answers 404 to every turn."""
    base_url = getattr(server_config, "base_url", None)
    if base_url and rollout_server_url and same_server(base_url, rollout_server_url):
        raise EnvConfigError(
            f"the model server URL {base_url} is the rollout server's (run-api, "
            f"{rollout_server_url}): point --openai.base_url at the inference server "
            "(Atropos's convention: http://localhost:9001/v1)"
        )


def validation_line(exc: Any) -> str:
    """A pydantic ValidationError in one line: the field and what is wrong with it.

    A field of several types fails once per type; the most telling failure is kept (a JSON
    string's parse error rather than 'not a dictionary').
    """
    by_field: dict[str, list[dict]] = {}
    for error in exc.errors():
        # Union members show up in the location as type names: leave them out.
        parts = [str(p) for p in error.get("loc", ()) if not any(c in str(p) for c in "[]-")]
        by_field.setdefault(".".join(parts) or exc.title, []).append(error)
    if not by_field:
        return str(exc).splitlines()[0]
    where, errors = next(iter(by_field.items()))
    plain_type = ("dict_type", "model_type", "string_type", "none_required")
    first = next((e for e in errors if e.get("type") not in plain_type), errors[0])
    message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    more = f" (+{len(by_field) - 1} more)" if len(by_field) > 1 else ""
    return f"{where}: {message}{more}"


def check_api_key(server_config: Any) -> None:
    """Give local servers a placeholder key; refuse a remote server without one."""
    if not hasattr(server_config, "api_key") or server_config.api_key:
        return
    base_url = server_config.base_url or ""
    if not base_url or is_local(base_url):
        server_config.api_key = "EMPTY"  # the OpenAI client refuses to start without a key
        return
    raise EnvConfigError(
        f"no API key for {base_url}: set the environment variable the env reads it from "
        "(see .env.example) or pass --openai.api_key"
    )


def wandb_configured() -> bool:
    """Whether W&B can log: a key or mode in the environment, or a login in ~/.netrc."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE"):
        return True
    netrc = Path.home() / ".netrc"
    try:
        return "api.wandb.ai" in netrc.read_text()
    except OSError:
        return False
