"""One env's ``process`` and ``evaluate`` modes run offline as subprocesses, and what they wrote.

The single place for the flags every such run needs (the model's URL, the tokenizer, where
sandboxes and outputs go): ``hermes-envgen check``, ``demo`` and every generated project's
tests run their envs through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_envgen.runtime.rollout import RolloutRecord
from hermes_envgen.testing.envs import read_eval_results, validate_groups
from hermes_envgen.testing.runner import run_env_mode
from hermes_envgen.testing.tokenizer import build_offline_tokenizer


@dataclass
class OfflineRun:
    """How to run one env against one model server, bounded, with outputs below ``workdir``.

    ``target`` is the env's module (``my_env`` or ``my_env.env``) or its file. ``tokenizer``
    None keeps the env's own; ``server_flags`` adds ``openai.*`` settings (model name, server
    type) and ``env_flags`` ``env.*`` ones (extra_body, tool_choice); ``health_check`` None
    keeps the env's own setting (the stub needs none).
    """

    target: str | Path
    base_url: str
    tokenizer: str | Path | None
    workdir: Path
    cwd: Path | None = None
    timeout: float = 180.0
    health_check: bool | None = False
    server_flags: dict[str, Any] = field(default_factory=dict)
    env_flags: dict[str, Any] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def against_stub(
        cls, target: str | Path, base_url: str, workdir: Path, **options: Any
    ) -> OfflineRun:
        """A run against a stub model: the offline tokenizer, written to ``workdir/tokenizer``."""
        tokenizer = build_offline_tokenizer(Path(workdir) / "tokenizer")
        return cls(target, base_url, tokenizer, Path(workdir), **options)

    @property
    def sandbox_root(self) -> Path:
        """Where the runs' sandboxes live (check looks there for leftovers)."""
        return Path(self.workdir) / "sandboxes"

    def flags(self) -> dict[str, Any]:
        """The flags every mode of this run gets."""
        flags: dict[str, Any] = {"openai.base_url": self.base_url}
        if self.health_check is not None:
            flags["openai.health_check"] = self.health_check
        flags |= {f"openai.{name}": value for name, value in self.server_flags.items()}
        if self.tokenizer is not None:
            flags["env.tokenizer_name"] = self.tokenizer
        flags["env.web_backend"] = "corpus"  # offline: the env's own pages, no search API
        flags |= {f"env.{name}": value for name, value in self.env_flags.items()}
        flags["env.sandbox_root"] = self.sandbox_root
        return flags

    def run(self, mode: str, **flags: Any) -> None:
        """Run ``mode`` with this run's flags plus ``flags`` (``env__total_steps=1``)."""
        extra = {name.replace("__", "."): value for name, value in flags.items()}
        run_env_mode(
            self.target,
            mode,
            flags=self.flags() | extra,
            cwd=self.cwd or self.workdir,
            timeout=self.timeout,
            extra_env=self.extra_env,
        )

    def process(
        self,
        *,
        groups: int = 1,
        group_size: int | None = None,
        output: Path | None = None,
        **flags: Any,
    ) -> list[dict]:
        """Run ``process`` for ``groups`` groups; the groups it wrote, validated."""
        output = output or Path(self.workdir) / "groups.jsonl"
        if group_size is not None:
            flags["env__group_size"] = group_size
        self.run("process", env__total_steps=groups, env__data_path_to_save_groups=output, **flags)
        return validate_groups(output, group_size)

    def evaluate(
        self, *, directory: Path | None = None, **flags: Any
    ) -> tuple[dict, list[RolloutRecord]]:
        """Run ``evaluate``; the metrics and the scored samples it saved."""
        directory = directory or Path(self.workdir) / "eval"
        self.run("evaluate", env__data_dir_to_save_evals=directory, **flags)
        return read_eval_results(directory)
