"""HermesAgentBaseEnv's start-up: small named checks, run in order from two tables.

Each check sets up one thing or refuses, in one line, a setting that cannot work
(``EnvConfigError``, exit 2). ``SETTINGS_CHECKS`` see the settings alone, before atroposlib
makes the env; ``ENV_CHECKS`` run on the env it made (its tokenizer, its servers), and a refusal
there leaves no empty output file behind (the base env discards it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from hermes_envgen.runtime.chat.template_check import prepare_chat_template
from hermes_envgen.runtime.env.cli import check_api_key, wandb_configured
from hermes_envgen.runtime.errors import EnvConfigError
from hermes_envgen.runtime.inference import ModelClient
from hermes_envgen.runtime.loop.agent_loop import check_hooks
from hermes_envgen.runtime.parsers import UnknownParserError, get_parser
from hermes_envgen.runtime.sandbox.choice import choose_backend, hide_run_from_commands
from hermes_envgen.runtime.sandbox.docker.pool import check_hosts
from hermes_envgen.runtime.tools.extras import require_toolsets
from hermes_envgen.runtime.tools.mcp_tools import mcp_registry

if TYPE_CHECKING:
    from hermes_envgen.runtime.env.config import HermesAgentEnvConfig
    from hermes_envgen.runtime.sandbox import SandboxSettings
    from hermes_envgen.runtime.tools import Tool, ToolRegistry

logger = logging.getLogger(__name__)


class StartingEnv(Protocol):
    """What the checks read and set of the env being made (HermesAgentBaseEnv): a protocol, so
    that this module and the base env do not import each other."""

    name: str | None
    config: HermesAgentEnvConfig
    default_toolsets: ClassVar[list[str] | None]
    server: Any  # atroposlib's ServerManager
    tokenizer: Any
    policy: ModelClient
    judge: ModelClient | None
    tool_registry: ToolRegistry
    tool_services: dict[str, Any]
    _token_mode: bool
    _sandbox_settings: SandboxSettings

    def make_judge(self) -> ModelClient | None: ...

    def _resolve_tools(self) -> tuple[list[dict[str, Any]], set[str]]: ...

    def _offered_tools(self) -> list[Tool]: ...


# -- the settings alone, before atroposlib's BaseEnv.__init__ -----------------------------------


def name_the_run(env: StartingEnv, config: HermesAgentEnvConfig, _: Any) -> None:
    """wandb_name: the env's name when unset (run-api rejects a registration without one)."""
    if not config.wandb_name:
        config.wandb_name = env.name or type(env).__name__


def wandb_has_a_key(_: Any, config: HermesAgentEnvConfig, __: Any) -> None:
    """use_wandb without a W&B key or mode: logging turned off, said once."""
    if config.use_wandb and not wandb_configured():
        logger.warning(
            "W&B logging is off: no WANDB_API_KEY is set (set it, or WANDB_MODE, to log)"
        )
        config.use_wandb = False


def hooks_of_this_contract(env: StartingEnv, _: Any, __: Any) -> None:
    """Turn hooks of the earlier contract (is_done): one line naming the change."""
    check_hooks(env)


def tokenizer_named(_: Any, config: HermesAgentEnvConfig, __: Any) -> None:
    """tokenizer_name is set (the training data is the tokenizer's)."""
    if not config.tokenizer_name or config.tokenizer_name == "none":
        raise EnvConfigError(
            "tokenizer_name is not set: pass --env.tokenizer_name with the Hugging Face "
            "repo id (or local directory) of the model's tokenizer"
        )


def servers_have_keys(_: Any, config: HermesAgentEnvConfig, server_configs: Any) -> None:
    """Each model server: an API key unless it is local, and the env's tokenizer by default."""
    for server_config in server_configs if isinstance(server_configs, list) else []:
        check_api_key(server_config)
        if getattr(server_config, "tokenizer_name", None) == "none":
            # vllm/sglang servers load a tokenizer too: the env's is the model's.
            server_config.tokenizer_name = config.tokenizer_name


SettingsCheck = Callable[["StartingEnv", "HermesAgentEnvConfig", Any], None]
SETTINGS_CHECKS: tuple[SettingsCheck, ...] = (
    name_the_run,
    wandb_has_a_key,
    hooks_of_this_contract,
    tokenizer_named,
    servers_have_keys,
)


# -- the env atroposlib made: its tokenizer, its servers ----------------------------------------


def sandbox_backend_chosen(env: StartingEnv) -> None:
    """auto: bwrap where it works; local as root only when opted in (said, either way)."""
    settings = env._sandbox_settings
    settings.backend = choose_backend(settings.backend, env.config.sandbox_allow_unsafe_local)


def docker_hosts_answer(env: StartingEnv) -> None:
    """docker with a pool of engines: every engine answers, or the run stops here."""
    settings = env._sandbox_settings
    if settings.backend == "docker" and settings.docker_hosts:
        check_hosts(settings.docker_hosts)


def local_commands_cannot_read_keys(env: StartingEnv) -> None:
    """local: the agent's commands, this user's, cannot read the run's keys."""
    if env._sandbox_settings.backend == "local":
        hide_run_from_commands()


def mcp_servers_listed(env: StartingEnv) -> None:
    """mcp_servers: their tools listed now, in a sandbox of the rollouts' backend (a server
    that cannot start stops here), with the MCP SDK installed (hermes-envgen[mcp])."""
    servers = env.config.tool_settings().mcp_servers
    if servers:
        require_toolsets(["mcp"])
        env.tool_registry = mcp_registry(env.tool_registry, servers, env._sandbox_settings)


def toolsets_installed(env: StartingEnv) -> None:
    """Every offered toolset is known and its library installed (the extra named if not)."""
    require_toolsets(tool.toolset for tool in env._offered_tools())


def policy_client(env: StartingEnv) -> None:
    """The one client of every request to the policy (its retries, its errors), and whether
    it samples exact tokens (token mode)."""
    env.policy = ModelClient.of(
        [s.config for s in env.server.servers],
        api=env.config.inference_api,
        retries=env.config.request_retries,
    )
    env._token_mode = env.policy.token_mode


def tool_call_parser_known(env: StartingEnv) -> None:
    """Token mode: tool_call_parser names a parser."""
    if env._token_mode:
        try:
            get_parser(env.config.tool_call_parser)
        except UnknownParserError as exc:
            raise EnvConfigError(str(exc)) from None


def chat_template_keeps_tools(env: StartingEnv) -> None:
    """The chat template keeps tool calls and results (the training data would drop them)."""
    config = env.config
    prepare_chat_template(
        env.tokenizer,
        config.chat_template,
        config.tokenizer_name,
        token_mode=env._token_mode,
        system_prompt=config.system_prompt,
        template_variables=(config.extra_body or {}).get("chat_template_kwargs"),
        server_type=env.policy.endpoints[0].server_type,
    )


def judge_made(env: StartingEnv) -> None:
    """The reward's judge (make_judge); one that is the policy's own server is warned of."""
    env.judge = env.make_judge()
    if env.judge is not None and env.judge is env.policy:
        logger.warning(
            "warning: the judge is the policy's own server: the policy grades its own "
            "answers, and an answer can try to talk it into a high score; set "
            "judge_base_url to a separate judge"
        )


def tool_services_ready(env: StartingEnv) -> None:
    """The toolsets' settings and clients, for every rollout's ToolContext; those the env
    names (enabled_toolsets, default_toolsets) are checked now."""
    settings = env.config.tool_settings()
    names = settings.enabled_toolsets or env.default_toolsets
    env.tool_services = settings.services(env._resolve_tools()[1] if names else set())


EnvCheck = Callable[["StartingEnv"], None]
ENV_CHECKS: tuple[EnvCheck, ...] = (
    sandbox_backend_chosen,
    docker_hosts_answer,
    local_commands_cannot_read_keys,
    mcp_servers_listed,
    toolsets_installed,
    policy_client,
    tool_call_parser_known,
    chat_template_keeps_tools,
    judge_made,
    tool_services_ready,
)
