"""An example game env with state: guess the secret number, told "higher" or "lower".

The game lives in the turn hooks. ``env_response`` reads the agent's guess and answers it;
the game's state (the range still possible, the guesses so far) lives in ``state.metadata``;
``turn_reward`` pays each guess that was still possible (a guess outside the range the hints
left is wasted); ``is_done`` ends the game at the right guess. The final reward weighs winning
with the per-turn rewards, which ``compute_reward`` finds in ``result.turn_rewards``. No tools.

Run it offline against the scripted stub model::

    hermes-envgen stub-server --script examples/guess_number_script.yaml --port 8000 &
    hermes-envgen offline-tokenizer /tmp/tok
    python examples/guess_number_env.py process --openai.base_url http://127.0.0.1:8000/v1 \
        --env.tokenizer_name /tmp/tok --env.total_steps 2 --env.use_wandb false
"""

from __future__ import annotations

import re

from hermes_envgen.runtime import (
    AgentResult,
    APIServerConfig,
    HermesAgentBaseEnv,
    HermesAgentEnvConfig,
    RolloutState,
    ToolContext,
)

TASKS = [{"secret": 37, "low": 1, "high": 100}, {"secret": 6, "low": 1, "high": 20}]
NUMBER = re.compile(r"-?\d+")


class GuessNumberEnv(HermesAgentBaseEnv):
    """Guess-the-number games; winning and guessing well are the reward."""

    name = "guess_number"
    env_config_cls = HermesAgentEnvConfig

    @classmethod
    def config_init(cls) -> tuple[HermesAgentEnvConfig, list[APIServerConfig]]:
        config = HermesAgentEnvConfig(
            group_size=4,
            total_steps=2,
            max_agent_turns=7,  # enough for 1..100 by halving
            enabled_toolsets=[],  # the agent answers in words: one number per reply
            system_prompt="You play a guessing game. Reply with one number and nothing else.",
            tokenizer_name="NousResearch/Hermes-3-Llama-3.1-8B",
            use_wandb=False,
            data_dir_to_save_evals="eval_results/guess_number",
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
        return f"I am thinking of a whole number from {item['low']} to {item['high']}. Guess it."

    # -- the game, in the turn hooks ---------------------------------------------------------

    async def env_response(self, state: RolloutState) -> list[dict]:
        """Read the guess, update the board, and say higher, lower or right."""
        board = state.metadata.setdefault(
            "board", {"low": state.task["low"], "high": state.task["high"], "guesses": []}
        )
        found = NUMBER.search(state.last_reply.get("content") or "")
        if found is None:
            board["last"] = None
            return [{"role": "user", "content": "That is not a number. Guess again."}]
        guess = int(found.group())
        board["last"] = {"guess": guess, "possible": board["low"] <= guess <= board["high"]}
        board["guesses"].append(guess)
        secret = state.task["secret"]
        if guess == secret:
            board["won"] = True
            return []  # nothing more to say: is_done ends the game
        if guess < secret:
            board["low"] = max(board["low"], guess + 1)
            return [{"role": "user", "content": f"Higher than {guess}."}]
        board["high"] = min(board["high"], guess - 1)
        return [{"role": "user", "content": f"Lower than {guess}."}]

    async def turn_reward(self, state: RolloutState) -> float:
        """1.0 for a guess the hints still allowed, 0.0 for a wasted one (or no number)."""
        last = state.metadata["board"]["last"]
        return 1.0 if last is not None and last["possible"] else 0.0

    async def is_done(self, state: RolloutState) -> bool:
        return state.metadata["board"].get("won", False)

    async def compute_reward(self, item: dict, result: AgentResult, ctx: ToolContext) -> float:
        won = 1.0 if result.metadata.get("board", {}).get("won") else 0.0
        turns = [r for r in result.turn_rewards if r is not None]
        guessed_well = sum(turns) / len(turns) if turns else 0.0
        return 0.8 * won + 0.2 * guessed_well

    async def evaluate(self, *args, **kwargs) -> None:
        await self.run_eval(self.items)


if __name__ == "__main__":
    GuessNumberEnv.cli()
