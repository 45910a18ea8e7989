"""An example env: small file tasks in a terminal, checked in the agent's sandbox.

Run it offline against the scripted stub model that solves these tasks::

    hermes-envgen stub-server --script examples/stub_script.yaml --port 8000 &
    hermes-envgen offline-tokenizer /tmp/tok
    python examples/terminal_env.py process --openai.base_url http://127.0.0.1:8000/v1 \
        --env.tokenizer_name /tmp/tok --env.total_steps 2 --env.use_wandb false

or against a real model: ``python examples/terminal_env.py process --openai.base_url URL
--openai.model_name M``.
"""

from __future__ import annotations

import random
from typing import Any

from hermes_envgen.runtime import (
    AgentResult,
    APIServerConfig,
    HermesAgentBaseEnv,
    HermesAgentEnvConfig,
    ToolContext,
)

TASKS: list[dict[str, Any]] = [
    {
        "prompt": "Write the word hello into a file named greeting.txt.",
        "check": "grep -qx hello greeting.txt",
    },
    {
        "prompt": "Count the lines of numbers.txt and write the count into count.txt.",
        "files": {"numbers.txt": "4\n8\n15\n16\n23\n42\n"},
        "check": "grep -qx 6 count.txt",
    },
    {
        "prompt": "Sort the lines of names.txt alphabetically into sorted.txt.",
        "files": {"names.txt": "carol\nalice\nbob\n"},
        "check": "printf 'alice\\nbob\\ncarol\\n' | cmp -s - sorted.txt",
    },
]


class TerminalTaskEnv(HermesAgentBaseEnv):
    """File tasks solved with a terminal; the reward runs a check command in the sandbox."""

    name = "terminal_tasks"
    env_config_cls = HermesAgentEnvConfig

    @classmethod
    def config_init(cls) -> tuple[HermesAgentEnvConfig, list[APIServerConfig]]:
        config = HermesAgentEnvConfig(
            group_size=4,
            total_steps=3,
            max_agent_turns=6,
            enabled_toolsets=["terminal", "file"],
            system_prompt="You are a careful agent. Use the tools to complete the task.",
            tokenizer_name="NousResearch/Hermes-3-Llama-3.1-8B",
            use_wandb=False,
            data_dir_to_save_evals="eval_results/terminal_tasks",
        )
        server = APIServerConfig(
            base_url="http://localhost:8000/v1", model_name="stub-model", health_check=False
        )
        return config, [server]

    async def setup(self) -> None:
        self.items = list(TASKS)
        random.Random(0).shuffle(self.items)
        self.index = 0

    # This env's items are its own dicts, not the runtime's Task (the base's item type).
    async def get_next_item(self) -> dict[str, Any]:
        item = self.items[self.index % len(self.items)]
        self.index += 1
        return item

    def format_prompt(self, item: dict[str, Any]) -> str:
        return str(item["prompt"])

    async def prepare_sandbox(self, item: dict[str, Any], ctx: ToolContext) -> None:
        for path, content in item.get("files", {}).items():
            await ctx.write_file(path, content)

    async def compute_reward(
        self, item: dict[str, Any], result: AgentResult, ctx: ToolContext
    ) -> float:
        check = await ctx.terminal(item["check"], timeout=10)
        return 1.0 if check["exit_code"] == 0 else 0.0

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        await self.run_eval(self.items)  # every task, with the full agent loop; always saved

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        wandb_metrics = {**(wandb_metrics or {}), "train/tasks": float(len(self.items))}
        await super().wandb_log(wandb_metrics)  # always: the base's metrics, and the logging


if __name__ == "__main__":
    TerminalTaskEnv.cli()
