"""An env written the way the Hermes Atropos skill shows it, its evaluate verbatim.

Its own task lists (``self._items``, ``self._eval_items``), its own ``get_next_item``, a binary
reward that reads ``ctx.terminal(...)`` without ``await``, an ``evaluate`` that builds
``HermesAgentLoop`` itself and calls ``ctx.cleanup()`` without ``await``, and a ``wandb_log``
with its own buffer. tests/template/test_skill_env.py runs it in process, evaluate and serve mode
against the stub model of examples/stub_script.yaml.
"""

from __future__ import annotations

import random
import sys

from pydantic import Field

from hermes_envgen.runtime import (
    AgentResult,
    APIServerConfig,
    HermesAgentBaseEnv,
    HermesAgentEnvConfig,
    ToolContext,
)

BUILTIN_SAMPLES = [
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
]  # fmt: skip


class SkillEnvConfig(HermesAgentEnvConfig):
    check_timeout: float = Field(default=10.0, description="Seconds the check may run.")


class SkillEnv(HermesAgentBaseEnv):
    name = "skill-env"
    env_config_cls = SkillEnvConfig
    # The skill's hint beside the enabled_toolsets setting (which decides).
    default_toolsets = ["terminal", "file"]  # noqa: RUF012

    @classmethod
    def config_init(cls):
        config = SkillEnvConfig(
            enabled_toolsets=["terminal", "file"],
            max_agent_turns=6,
            agent_temperature=1.0,
            system_prompt="You are a careful agent. Use the tools to complete the task.",
            terminal_backend="local",
            group_size=2,
            steps_per_eval=1000,
            total_steps=2,
            eval_size=1,
            max_token_length=2048,
            extra_body=None,
            tokenizer_name="NousResearch/Hermes-3-Llama-3.1-8B",
            use_wandb=False,
            data_dir_to_save_evals="eval_results/skill_env",
        )
        server = APIServerConfig(
            base_url="http://localhost:8000/v1",
            model_name="stub-model",
            server_type="openai",
            health_check=False,
        )
        return config, [server]

    async def setup(self):
        self._items = list(BUILTIN_SAMPLES)
        random.shuffle(self._items)
        eval_size = 1
        self._eval_items = self._items[:eval_size]
        self._items = self._items[eval_size:]
        self._index = 0
        self._reward_buffer = []

    async def get_next_item(self):
        item = self._items[self._index % len(self._items)]
        self._index += 1
        return item

    def format_prompt(self, item):
        return item["prompt"]

    async def prepare_sandbox(self, item, ctx: ToolContext):
        for path, content in item.get("files", {}).items():
            await ctx.write_file(path, content)

    async def compute_reward(self, item, result: AgentResult, ctx: ToolContext) -> float:
        # The skill's binary verification: no await on ctx.terminal.
        check = ctx.terminal(item["check"])
        reward = 1.0 if check["exit_code"] == 0 else 0.0
        self._reward_buffer.append(reward)
        assert isinstance(result.messages, list) and result.turns_used >= 1
        assert isinstance(result.finished_naturally, bool) and isinstance(result.tool_errors, list)
        return reward

    async def evaluate(self, *args, **kwargs) -> None:
        import time
        import uuid

        from hermes_envgen.runtime import HermesAgentLoop, ToolContext

        start_time = time.time()
        tools, valid_names = self._resolve_tools_for_group()
        samples = []

        for item in self._eval_items[: self.config.eval_size]:
            task_id = str(uuid.uuid4())
            messages = []
            if self.config.system_prompt:
                messages.append({"role": "system", "content": self.config.system_prompt})
            messages.append({"role": "user", "content": self.format_prompt(item)})

            agent = HermesAgentLoop(
                server=self.server,
                tool_schemas=tools,
                valid_tool_names=valid_names,
                max_turns=self.config.max_agent_turns,
                task_id=task_id,
                temperature=0.0,  # Deterministic for eval
                max_tokens=self.config.max_token_length,
                extra_body=self.config.extra_body,
            )
            result = await agent.run(messages)

            ctx = ToolContext(task_id)
            try:
                reward = await self.compute_reward(item, result, ctx)
            finally:
                ctx.cleanup()

            samples.append(
                {"prompt": item["prompt"], "response": result.final_response, "reward": reward}
            )

        eval_metrics = {"eval/mean_reward": sum(s["reward"] for s in samples) / len(samples)}
        await self.evaluate_log(
            metrics=eval_metrics, samples=samples, start_time=start_time, end_time=time.time()
        )
        # What compute_reward appended while evaluating is seen here, and by training never.
        print(f"SKILL_ENV eval buffer {len(self._reward_buffer)}", file=sys.stderr)

    async def wandb_log(self, wandb_metrics=None):
        if wandb_metrics is None:
            wandb_metrics = {}
        if self._reward_buffer:
            n = len(self._reward_buffer)
            wandb_metrics["train/mean_reward"] = sum(self._reward_buffer) / n
            print(f"SKILL_ENV train buffer {n}", file=sys.stderr)
            self._reward_buffer.clear()
        await super().wandb_log(wandb_metrics)  # MUST call super


if __name__ == "__main__":
    SkillEnv.cli()
