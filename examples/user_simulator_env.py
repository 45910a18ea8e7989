"""An example env with a simulated user: the agent must ask before it can help.

Each task is a customer with a vague complaint. The customer (a scripted simulator, no model)
answers the agent's questions about what it knows, takes advice only once it has been asked
something (advice thrown at it unasked, or a list of every fix there is, does not help), and
leaves when the problem is solved or its patience runs out. The turn hooks carry it:
``new_state`` is the customer's memory of the conversation, ``env_response`` its reply, and
``state.finish()`` makes its thanks or its goodbye the conversation's last message. No tools:
the agent only talks, and its tasks have no ``prompt``: ``format_prompt`` makes it of the
customer's opening words. Each task carries a scripted ``player`` (a support agent that asks,
then advises), which ``hermes-envgen check`` replays.

Run it offline against the scripted stub model::

    hermes-envgen stub-server --script examples/user_simulator_script.yaml --port 8000 &
    hermes-envgen offline-tokenizer /tmp/tok
    python examples/user_simulator_env.py process --openai.base_url http://127.0.0.1:8000/v1 \
        --env.tokenizer_name /tmp/tok --env.total_steps 2 --env.use_wandb false
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

from hermes_envgen.runtime import (
    AgentResult,
    APIServerConfig,
    HermesAgentBaseEnv,
    HermesAgentEnvConfig,
    RolloutState,
    ToolContext,
)


class Customer(TypedDict):
    """What a customer says first, what it knows (told when a question names a key), the word
    the right advice contains, and a support agent that helps it (``check``'s gold play)."""

    opening: str
    facts: dict[str, str]
    fix: str
    player: list[str]


SAMPLES: list[Customer] = [
    {
        "opening": "Hi. I can't log in to my account any more.",
        "facts": {
            "error": "It says: 'account locked after too many attempts'.",
            "email": "It's ana@example.com.",
        },
        "fix": "unlock",
        "player": [
            "Sorry to hear that. What error do you see when you try?",
            "Your account was locked for safety. I will unlock it now; try again.",
        ],
    },
    {
        "opening": "My parcel never arrived.",
        "facts": {
            "address": "Oh. I moved last month, to 12 Elm Street.",
            "order": "The order number is 4417.",
        },
        "fix": "reship",
        "player": [
            "Let me check. What is your order number?",
            "Thanks. Did your address change recently?",
            "That explains it: I will reship the parcel to 12 Elm Street today.",
        ],
    },
]
PATIENCE = 3  # replies the customer gives without progress before leaving


@dataclass
class Memory:
    """What the customer remembers of the conversation."""

    told: list[str] = field(default_factory=list)  # the facts it has given
    unhelpful: int = 0  # replies of the agent that got it nowhere
    solved: bool = False


Turn = RolloutState[Customer, Memory]


def reply(customer: Customer, memory: Memory, said: str) -> str:
    """The customer's answer to the agent's last message (``memory`` updated)."""
    said = said.lower()
    if customer["fix"] in said and memory.told:  # advice, after it was asked something
        memory.solved = True
        return "That did it, thank you!"
    for key, fact in customer["facts"].items():
        if key in said and key not in memory.told:
            memory.told.append(key)
            return fact
    memory.unhelpful += 1
    if memory.unhelpful >= PATIENCE:
        return "This is going nowhere. Bye."
    return "I don't know what you mean. Can you help me or not?"


class UserSimulatorEnv(HermesAgentBaseEnv[Customer, Memory]):
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
        self.items = list(SAMPLES)
        self.index = 0

    async def get_next_item(self) -> Customer:
        item = self.items[self.index % len(self.items)]
        self.index += 1
        return item

    def format_prompt(self, item: Customer) -> str:
        return item["opening"]

    # -- the turn hooks ---------------------------------------------------------------------

    def new_state(self, task: Customer) -> Memory:
        return Memory()

    def env_response(self, state: Turn) -> list[dict[str, Any]]:
        """The customer answers each reply of the agent; helped or out of patience, it leaves."""
        said = state.last_reply.get("content")
        answer = reply(state.task, state.data, said if isinstance(said, str) else "")
        if state.data.solved or state.data.unhelpful >= PATIENCE:
            state.finish()  # its thanks, or its goodbye, is the last word
        return [{"role": "user", "content": answer}]

    async def compute_reward(
        self, item: Customer, result: AgentResult[Memory], ctx: ToolContext
    ) -> float:
        # The customer's own verdict, from the memory the hooks kept.
        return 1.0 if result.data.solved else 0.0

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        await self.run_eval(self.items)


if __name__ == "__main__":
    UserSimulatorEnv.cli()
