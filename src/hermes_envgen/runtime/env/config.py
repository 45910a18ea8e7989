"""HermesAgentEnvConfig: the settings every tool-using env shares, each one a ``--env.`` flag."""

from __future__ import annotations

import json
from typing import Any, Literal

from atroposlib.envs.base import BaseEnvConfig
from atroposlib.envs.server_handling.server_baseline import (
    APIServerConfig as AtroposServerConfig,
)
from pydantic import Field, Json, field_validator, model_validator

from hermes_envgen.runtime.env.datasets import DataSettings
from hermes_envgen.runtime.errors import EnvConfigError
from hermes_envgen.runtime.loop.agent_loop import LoopSettings
from hermes_envgen.runtime.rollouts.evaluation.settings import EvalSettings
from hermes_envgen.runtime.sandbox import DEFAULT_DOCKER_IMAGE, SandboxSettings
from hermes_envgen.runtime.sandbox.docker.pool import SCHEMES as DOCKER_HOST_SCHEMES
from hermes_envgen.runtime.sandbox.manager import DEFAULT_IDLE_LIFETIME
from hermes_envgen.runtime.tools.mcp_tools import McpServerSettings
from hermes_envgen.runtime.tools.settings import ToolSettings

# The Hermes skill's name of a setting this runtime calls otherwise: it works for good, in
# config files, config_init and --env. flags, without a warning.
SKILL_SETTINGS = {"terminal_backend": "sandbox_backend"}
# Names of 0.1 that this project renamed: refused at start-up with the new name (``hermes-envgen
# update`` rewrites them in a project's config files and code).
RENAMED_SETTINGS = {
    "terminal_timeout": "sandbox_command_timeout",
    "terminal_lifetime": "sandbox_idle_lifetime",
}


def renamed_setting(old: str) -> str:
    """The one line that refuses a renamed setting's old name."""
    return (
        f"{old} is now called {RENAMED_SETTINGS[old]}: rename it (`hermes-envgen update` "
        "rewrites it in the project's config files and code)"
    )


def skill_flags(args: list[str]) -> list[str]:
    """The command line with the skill's ``--env.`` names given this runtime's.

    Raises EnvConfigError for a renamed setting's old name.
    """
    renamed = []
    for arg in args:
        flag, sep, value = arg.partition("=")
        name = flag.removeprefix("--env.")
        if flag.startswith("--env.") and name in RENAMED_SETTINGS:
            raise EnvConfigError(f"--env.{renamed_setting(name)}")
        if flag.startswith("--env.") and name in SKILL_SETTINGS:
            arg = f"--env.{SKILL_SETTINGS[name]}{sep}{value}"
        renamed.append(arg)
    return renamed


class APIServerConfig(AtroposServerConfig):  # type: ignore[misc]  # atroposlib: no types
    """One model server the rollouts ask: base_url, model_name, server_type, api_key, timeout.

    atroposlib's own settings class, importable from ``hermes_envgen.runtime`` for
    ``config_init``: an env imports nothing from atroposlib's deep paths.
    """


class HermesAgentEnvConfig(BaseEnvConfig):  # type: ignore[misc]  # atroposlib: no types
    """Settings of a multi-turn, tool-using agent environment."""

    enabled_toolsets: list[str] | None = Field(
        default=None,
        description="Toolsets (or single tools) the agent may use; None means every registered "
        "tool. Built in: 'terminal' (terminal), 'file' (read_file, write_file, patch, "
        "search_files), 'python' (python: a persistent interpreter in the sandbox), 'web' "
        "(web_search, web_fetch: run on the host, see web_backend) and 'mcp' (the tools of "
        "mcp_servers, named <server>_<tool>).",
    )
    disabled_toolsets: list[str] = Field(
        default_factory=list,
        description="Toolsets or tools to take away, applied after enabled_toolsets.",
    )
    max_agent_turns: int = Field(
        default=30, ge=1, description="Most model turns in one rollout before it is cut off."
    )
    system_prompt: str | None = Field(
        default=None, description="System message put before every task prompt."
    )
    agent_temperature: float = Field(
        default=1.0, ge=0.0, description="Sampling temperature of training rollouts."
    )
    eval_temperature: float = Field(
        default=0.0, ge=0.0, description="Sampling temperature of evaluation rollouts."
    )
    max_tokens_per_turn: int | None = Field(
        default=None, ge=1, description="Most tokens the model may generate per turn."
    )
    sandbox_backend: str = Field(
        default="auto",
        description="Where tool commands run: 'auto' (bwrap where it works on this host, else "
        "local with a warning), 'bwrap' (bubblewrap: read-only system, private workspace, no "
        "network, resource limits), 'docker' (a container per rollout) or 'local' (a "
        "directory on the host, no isolation; for development; as root only with "
        "sandbox_allow_unsafe_local).",
    )
    sandbox_allow_unsafe_local: bool = Field(
        default=False,
        description="Let the local backend run as root, where the agent's commands can read "
        "and change the whole host, the run's secrets included. Unsafe: only on a machine "
        "you can lose.",
    )
    sandbox_network: bool = Field(
        default=False, description="Let bwrap/docker sandboxes reach the network."
    )
    sandbox_image: str = Field(
        default=DEFAULT_DOCKER_IMAGE, description="Image of the docker backend's containers."
    )
    sandbox_docker_hosts: list[str] = Field(
        default_factory=list,
        description="The docker backend's engines, as Docker host URLs (unix:///path, "
        "tcp://host:2376 with DOCKER_TLS_VERIFY/DOCKER_CERT_PATH applying, ssh://user@host): "
        "each sandbox starts on the one with the fewest open, and one that fails is out for "
        "30 s. Empty: the engine of DOCKER_HOST. On the command line comma-separated: "
        "--env.sandbox_docker_hosts unix:///run/docker.sock,tcp://10.0.0.3:2376",
    )
    sandbox_cpu_seconds: int | None = Field(
        default=None, ge=1, description="CPU seconds per command (bwrap/docker; None: default)."
    )
    sandbox_memory_mb: int | None = Field(
        default=None,
        ge=16,
        description="Memory per sandbox in MiB (bwrap/docker: 2048 by default).",
    )
    sandbox_max_processes: int | None = Field(
        default=None, ge=8, description="Processes per sandbox (bwrap/docker: 256 by default)."
    )
    sandbox_max_file_mb: int | None = Field(
        default=None, ge=1, description="Largest file a command may write, in MiB."
    )
    sandbox_workspace_mb: int | None = Field(
        default=None,
        ge=1,
        description="Size of a sandbox's workspace in MiB, 64 files per MiB (docker, and bwrap "
        "as root: a tmpfs, 1024 by default).",
    )
    sandbox_cpus: float | None = Field(
        default=None,
        gt=0,
        description="CPUs a sandbox's processes may use together (docker: --cpus; bwrap as "
        "root: a cgroup; 1.0 by default).",
    )
    sandbox_pool: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="bwrap sandboxes kept started ahead of demand, so that a rollout takes one "
        "instead of starting its own. Each is fresh (an empty workspace, nothing run in it), "
        "serves one rollout and is then closed; each holds some 2-5 MB while it waits. 0: "
        "none (other backends ignore it).",
    )
    sandbox_command_timeout: float = Field(
        default=60.0,
        gt=0,
        description="Seconds before a tool command is killed (exit 124); the agent's own "
        "timeout may be shorter, never longer.",
    )
    max_rollout_seconds: float | None = Field(
        default=1800.0,
        gt=0,
        description="Seconds the agent's part of a rollout (its model turns and tool calls) "
        "may take: past it the rollout is ended where it stands (its record says timed_out), "
        "scored, and its sandbox removed. None: no limit.",
    )
    sandbox_idle_lifetime: float = Field(
        default=DEFAULT_IDLE_LIFETIME,
        gt=0,
        description="Seconds a sandbox may sit idle before it is reaped.",
    )
    sandbox_root: str | None = Field(
        default=None,
        description="Directory that holds the rollouts' workspaces (default: the temp dir).",
    )
    chat_template: str | None = Field(
        default=None,
        description="Chat template that renders the training data (and token-mode prompts) in "
        "place of the tokenizer's: a built-in ('hermes', 'qwen': Hermes/Qwen <tool_call> tags; "
        "'chatml-tools': the same calls, results in 'tool' turns) or a path to a Jinja file. "
        "Needed when the tokenizer's template drops tool calls, as plain ChatML does.",
    )
    tool_call_parser: str = Field(
        default="hermes",
        description="How tool calls are read from raw model text (token-mode APIs).",
    )
    inference_api: Literal["auto", "chat", "completions", "generate"] = Field(
        default="auto",
        description="How the policy is sampled. 'chat': /v1/chat/completions, the server "
        "parses tool calls. 'completions': token ids through /v1/completions (stock `vllm "
        "serve`), tool calls parsed here. 'generate': token ids through /generate (Atropos's "
        "vLLM server, SGLang). 'auto': chat for server_type openai, generate for sglang, and "
        "for vllm whichever the server has.",
    )
    tool_choice: str | None = Field(
        default=None,
        description="Sent as tool_choice with chat requests that offer tools ('auto', "
        "'required'); some servers (llama.cpp) ignore the tools without it. None: not sent.",
    )
    request_retries: int = Field(
        default=3,
        ge=0,
        description="Extra tries of a model request after a fault that may pass (refused, "
        "timeout, HTTP 408/429/5xx); a request that cannot succeed (other 4xx) is not retried.",
    )
    startup_wait: float = Field(
        default=30.0,
        ge=0,
        description="Seconds the start-up check waits for a model server that refuses or "
        "times out (it may be loading) before the run stops with exit code 2.",
    )
    delivery_retry_seconds: float = Field(
        default=120.0,
        ge=0,
        description="Serve: seconds a scored group is posted again, backing off, while run-api "
        "refuses the connection or answers HTTP 408/429/5xx, before it is logged and dropped.",
    )
    delivery_request_timeout: float = Field(
        default=60.0,
        gt=0,
        description="Serve: seconds one post of a scored group to run-api may take. A post "
        "that went out and got no answer in time may have landed: it is recorded as "
        "answer_lost and never sent again.",
    )
    python_timeout: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a python tool call may run before it is interrupted "
        "(KeyboardInterrupt, state kept); an interpreter that does not stop is killed.",
    )
    python_max_output_bytes: int = Field(
        default=32_000, ge=1000, description="Bytes of stdout, and of stderr, per python call."
    )
    python_command: str = Field(
        default="python3", description="The sandbox's Python that the python tool runs."
    )
    web_backend: Literal["corpus", "tavily"] = Field(
        default="corpus",
        description="Where web_search and web_fetch look: 'corpus' (the offline pages of "
        "web_corpus, ranked with BM25; no network) or 'tavily' (Tavily's search API, key from "
        "web_api_key_env; pages fetched over HTTP by the host, never from the sandbox).",
    )
    web_corpus: str | None = Field(
        default=None,
        description="The corpus backend's pages: a folder of .txt/.md/.html files or a JSONL "
        "file of {url, title, text} lines.",
    )
    web_api_key_env: str = Field(
        default="TAVILY_API_KEY",
        description="Environment variable that holds the hosted search API's key.",
    )
    web_search_url: str = Field(
        default="https://api.tavily.com/search",
        description="The hosted search API's endpoint (a Tavily-compatible POST /search).",
    )
    web_allow_private: bool = Field(
        default=False,
        description="Let web_fetch reach private, loopback and link-local addresses.",
    )
    web_max_page_bytes: int = Field(
        default=2_000_000, ge=1000, description="web_fetch refuses a larger body."
    )
    web_max_page_chars: int = Field(
        default=20_000, ge=100, description="Characters of a page's text; the rest is cut."
    )
    web_timeout: float = Field(
        default=20.0, gt=0, description="Seconds a web search or fetch may take."
    )
    # Json: the command line hands over a string.
    mcp_servers: list[McpServerSettings] | Json[list[McpServerSettings]] = Field(
        default_factory=list,
        description="MCP servers whose tools the agent gets (toolset 'mcp'), listed at start-up: "
        "each {name, command, args, env} for a stdio server run in each rollout's sandbox (it "
        "needs python3 there), or {name, url} for a shared streamable-HTTP server reached from "
        "the host; 'tools' names the ones to offer, 'timeout' the seconds per call.",
    )
    max_tool_output_chars: int = Field(
        default=20_000, ge=100, description="Longer tool output is cut, with a notice."
    )
    max_parallel_tools: int = Field(
        default=8, ge=1, description="Tool calls of one message run concurrently, up to this."
    )
    eval_size: int = Field(
        default=20,
        ge=0,
        description="Items held out for evaluation: this many or a tenth of the data, whichever "
        "is more, but at most a quarter of it (at least one, except that a single task is kept "
        "for training), leaving most for training.",
    )
    # Where the tasks come from (EnvTasks.load_tasks) and the seeds of their split and order.
    dataset_name: str | None = Field(
        default=None,
        description="Hugging Face dataset with the tasks; None (or empty) uses the env's "
        "built-in tasks. One that cannot be loaded stops the run, unless dataset_fallback.",
    )
    dataset_split: str = Field(default="train", description="Split of the dataset to use.")
    prompt_field: str = Field(default="prompt", description="Dataset field with the task.")
    answer_field: str = Field(
        default="answer", description="Dataset field with the reference answer."
    )
    dataset_fallback: bool = Field(
        default=False,
        description="Use the built-in tasks when dataset_name cannot be loaded (said at "
        "start-up), instead of stopping: a mistyped name then trains on the built-in tasks.",
    )
    split_seed: int = Field(
        default=0,
        description="Seed of the train/eval split: the same on every worker of a run, or some "
        "train on tasks others hold out.",
    )
    seed: int = Field(
        default=0, description="Seed of the order training tasks are drawn in: one per worker."
    )
    # Json: the command line hands over a string (atroposlib's CLI model keeps no validators).
    extra_body: dict[str, Any] | Json[dict[str, Any]] | None = Field(
        default=None,
        description="Extra JSON fields sent with every model request (provider-specific); "
        "on the command line as JSON: --env.extra_body '{\"top_k\": 20}'.",
    )
    eval_samples_per_item: int = Field(
        default=1,
        ge=1,
        description="Rollouts per evaluation item (k): pass@k and pass^k need k > 1, and "
        "eval_temperature > 0 for the samples to differ.",
    )
    eval_pass_threshold: float = Field(
        default=1.0,
        description="Reward at or above which an evaluation rollout counts as passed, for "
        "pass@1, pass@k and pass^k (1.0: only a full score passes). A shaped reward (a game "
        "that pays fewer guesses more) sets it to what a solved task earns at least.",
    )
    failure_score: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="The score of a rollout that failed (its judge, a turn hook, compute_reward, "
        "its sandbox or the model server gave out), in training and in every evaluation metric: "
        "never more than a no-op earns, or breaking something pays.",
    )
    resume: bool = Field(
        default=False,
        description="Evaluate: continue the run saved in data_dir_to_save_evals, skipping the "
        "rollouts its samples.jsonl and failures.jsonl already hold. Off: start afresh (the "
        "earlier run's files are moved to earlier-runs/<n>/, a new n each run).",
    )

    @field_validator("sandbox_docker_hosts", mode="before")
    @classmethod
    def _docker_hosts_from_text(cls, value: Any) -> Any:
        """The command line's one string: comma-separated URLs, or a JSON list."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("sandbox_docker_hosts")
    @classmethod
    def _docker_hosts_are_urls(cls, value: list[str]) -> list[str]:
        for host in value:
            if not host.startswith(DOCKER_HOST_SCHEMES):
                raise ValueError(
                    f"{host!r} is not a Docker host URL (unix:///path, tcp://host:port, "
                    "ssh://user@host)"
                )
        return value

    @field_validator("system_prompt")
    @classmethod
    def _system_prompt_is_sendable(cls, value: str | None) -> str | None:
        """Refuse at start-up a prompt no request can carry (lone surrogates such as \\ud83d)."""
        if value is not None:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(
                    f"system_prompt has a lone surrogate at character {exc.start} "
                    "(half of an escaped emoji?): write the character itself"
                ) from None
        return value

    @model_validator(mode="before")
    @classmethod
    def _accept_skill_names(cls, data: Any) -> Any:
        """Take the skill's name of a setting (a config file, config_init) as this runtime's."""
        if not isinstance(data, dict):
            return data
        for old in RENAMED_SETTINGS.keys() & data.keys():
            raise ValueError(renamed_setting(old))
        if not SKILL_SETTINGS.keys() & data.keys():
            return data
        data = dict(data)
        for old, new in SKILL_SETTINGS.items():
            if old not in data:
                continue
            value = data.pop(old)
            # atroposlib merges defaults < config file < flags into one dict: a new name off
            # its default was set on purpose, by a flag over a config file of the old name.
            if value is not None and data.get(new, cls.model_fields[new].default) == (
                cls.model_fields[new].default
            ):
                data[new] = value
        return data

    @property
    def terminal_backend(self) -> str:
        """sandbox_backend, by the Hermes skill's name for it."""
        return self.sandbox_backend

    def loop_settings(self, split: str = "train") -> LoopSettings:
        """The agent loop's settings for a rollout of ``split`` (its temperature is the
        split's: agent_temperature for training, eval_temperature for evaluation)."""
        return LoopSettings(
            max_turns=self.max_agent_turns,
            temperature=self.agent_temperature if split == "train" else self.eval_temperature,
            max_tokens=self.max_tokens_per_turn,
            extra_body=self.extra_body,
            max_tool_output_chars=self.max_tool_output_chars,
            max_parallel_tools=self.max_parallel_tools,
            request_retries=0,  # the policy's ModelClient retries (request_retries), by kind
            tool_choice=self.tool_choice,
            max_seconds=self.max_rollout_seconds,
        )

    def data_settings(self) -> DataSettings:
        """Where the tasks come from and how they are split and ordered (``dataset_*``,
        ``eval_size``, ``split_seed``, ``seed``)."""
        return DataSettings(
            dataset_name=self.dataset_name,
            dataset_split=self.dataset_split,
            prompt_field=self.prompt_field,
            answer_field=self.answer_field,
            fallback=self.dataset_fallback,
            eval_size=self.eval_size,
            split_seed=self.split_seed,
            seed=self.seed,
        )

    def evaluation_settings(self) -> EvalSettings:
        """How evaluation runs and is scored (``eval_*``, ``data_dir_to_save_evals``,
        ``resume``, ``max_eval_workers``, ``failure_score``)."""
        return EvalSettings(
            save_dir=self.data_dir_to_save_evals,
            samples_per_item=self.eval_samples_per_item,
            pass_threshold=self.eval_pass_threshold,
            temperature=self.eval_temperature,
            failure_score=self.failure_score,
            resume=self.resume,
            workers=max(1, self.max_eval_workers),
        )

    def tool_settings(self) -> ToolSettings:
        """The tools' settings: toolsets offered and taken away, MCP servers, and the
        ``python_*`` and ``web_*`` settings of those toolsets."""
        from hermes_envgen.runtime.tools.interpreter import PythonSettings
        from hermes_envgen.runtime.tools.web import WebSettings

        return ToolSettings(
            python=PythonSettings(
                timeout=self.python_timeout,
                max_output_bytes=self.python_max_output_bytes,
                command=self.python_command,
            ),
            web=WebSettings(
                backend=self.web_backend,
                corpus=self.web_corpus,
                api_key_env=self.web_api_key_env,
                search_url=self.web_search_url,
                allow_private=self.web_allow_private,
                max_page_bytes=self.web_max_page_bytes,
                max_page_chars=self.web_max_page_chars,
                timeout=self.web_timeout,
            ),
            enabled_toolsets=self.enabled_toolsets,
            disabled_toolsets=list(self.disabled_toolsets),
            mcp_servers=list(self.mcp_servers),
        )

    def sandbox_settings(self) -> SandboxSettings:
        """The settings of the rollouts' sandboxes (the ``sandbox_*`` fields)."""
        return SandboxSettings(
            backend=self.sandbox_backend,
            root=self.sandbox_root,
            command_timeout=self.sandbox_command_timeout,
            network=self.sandbox_network,
            cpu_seconds=self.sandbox_cpu_seconds,
            memory_mb=self.sandbox_memory_mb,
            max_processes=self.sandbox_max_processes,
            max_file_mb=self.sandbox_max_file_mb,
            workspace_mb=self.sandbox_workspace_mb,
            cpus=self.sandbox_cpus,
            pool=self.sandbox_pool,
            docker_image=self.sandbox_image,
            docker_hosts=list(self.sandbox_docker_hosts),
        )
