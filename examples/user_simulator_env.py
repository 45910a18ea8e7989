"""An example env with a simulated user: the agent must ask before it can help.

Each task is a customer with a vague complaint. The customer (a scripted simulator, no model)
answers the agent's questions about what it knows, tells the agent when its advice is wrong,
and leaves when the problem is solved or its patience runs out. The turn hooks carry it:
``env_response`` is the customer's reply, ``is_done`` ends the rollout when the customer
leaves; the customer's state lives in ``state.metadata``. No tools: the agent only talks.

Run it offline against the scripted stub model::

    hermes-envgen stub-server --script examples/user_simulator_script.yaml --port 8000 &
    hermes-envgen offline-tokenizer /tmp/tok
    python examples/user_simulator_env.py process --openai.base_url http://127.0.0.1:8000/v1 \
        --env.tokenizer_name /tmp/tok --env.total_steps 2 --env.use_wandb false
"""

from __future__ import annotations

from hermes_envgen.runtime import (
    AgentResult,
    APIServerConfig,
    HermesAgentBaseEnv,
    HermesAgentEnvConfig,
    RolloutState,
    ToolContext,
)

# What each customer knows (told when the agent's question names a key) and the word that
# the right advice contains.
TASKS = [
    {
        "prompt": "Hi. I can't log in to my account any more.",
        "facts": {
            "error": "It says: 'account locked after too many attempts'.",
            "email": "It's ana@example.com.",
        },
        "fix": "unlock",
    },
    {
        "prompt": "My parcel never arrived.",
        "facts": {
            "address": "Oh. I moved last month, to 12 Elm Street.",
            "order": "The order number is 4417.",
        },
        "fix": "reship",
    },
]
PATIENCE = 3  # replies the customer gives without progress before leaving


class Customer:
    """The simulated user: what it answers to the agent's last message."""

    def __init__(self, task: dict, memory: dict) -> None:
        self.task = task
        self.memory = memory  # state.metadata: kept between turns, read by the reward

    def reply(self, said: str) -> str:
        said = said.lower()
        if self.task["fix"] in said:
            self.memory["solved"] = True
            return "That did it, thank you!"
        told = self.memory.setdefault("told", [])
        for key, fact in self.task["facts"].items():
            if key in said and key not in told:
                told.append(key)
                return fact
        self.memory["unhelpful"] = self.memory.get("unhelpful", 0) + 1
        if self.memory["unhelpful"] >= PATIENCE:
            self.memory["gave_up"] = True
            return "This is going nowhere. Bye."
        return "I don't know what you mean. Can you help me or not?"


class UserSimulatorEnv(HermesAgentBaseEnv):
    """Support conversations with a simulated customer; solved or not is the reward."""

    name = "user_simulator"
    env_config_cls = HermesAgentEnvConfig

    @classmethod
    def config_init(cls) -> tuple[HermesAgentEnvConfig, list[APIServerConfig]]:
        config = HermesAgentEnvConfig(
            group_size=4,
            total_steps=2,
            max_agent_turns=6,
            enabled_toolsets=[],  # the agent only talks
            system_prompt="You are a support agent. Ask what you need to know, then advise.",
            tokenizer_name="NousResearch/Hermes-3-Llama-3.1-8B",
            use_wandb=False,
            data_dir_to_save_evals="eval_results/user_simulator",
        )
        server = APIServerConfig(
            base_url="http://localhost:8000/v1", model_name="stub-model", health_check=False
        )
        return config, [server]

    async def setup(self) -> None:
        self.items = list(TASKS)
        self.index = 0

    # This env's items are its own dicts, not the runtime's Task (the base's item type).
    async def get_next_item(self) -> dict:
        item = self.items[self.index % len(self.items)]
        self.index += 1
        return item

    def format_prompt(self, item: dict) -> str:
        return item["prompt"]

    # -- the turn hooks ---------------------------------------------------------------------

    async def env_response(self, state: RolloutState) -> list[dict]:
        """The customer answers each reply of the agent."""
        customer = Customer(state.task, state.metadata)
        return [{"role": "user", "content": customer.reply(state.last_reply.get("content", ""))}]

    async def is_done(self, state: RolloutState) -> bool:
        """The customer has left: helped, or out of patience."""
        return bool(state.metadata.get("solved") or state.metadata.get("gave_up"))

    async def compute_reward(self, item: dict, result: AgentResult, ctx: ToolContext) -> float:
        # The customer's own verdict, from the state the hooks kept.
        return 1.0 if result.metadata.get("solved") else 0.0

    async def evaluate(self, *args, **kwargs) -> None:
        await self.run_eval(self.items)


if __name__ == "__main__":
    UserSimulatorEnv.cli()
