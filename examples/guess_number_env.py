"""An example game env with state: guess the secret number, told "higher" or "lower".

The game lives in the turn hooks, on a ``Board`` of its own (``new_state``): ``turn_reward``
pays each guess the hints still allowed (a guess outside that range is wasted), ``should_stop``
ends the game at the right guess (no hint after it), ``env_response`` narrows the board and
says higher or lower. The reward pays a win, the more the fewer guesses it took; a lost game
earns nothing. No tools, and no ``prompt`` in its tasks: ``format_prompt`` writes it. Each
task carries a scripted ``player`` (its gold play), which ``hermes-envgen check`` replays.

Run it offline against the scripted stub model::

    hermes-envgen stub-server --script examples/guess_number_script.yaml --port 8000 &
    hermes-envgen offline-tokenizer /tmp/tok
    python examples/guess_number_env.py process --openai.base_url http://127.0.0.1:8000/v1 \
        --env.tokenizer_name /tmp/tok --env.total_steps 2 --env.use_wandb false
"""

from __future__ import annotations

import re
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


class Game(TypedDict):
    """One game: the secret, its range, and a scripted player that wins it (``check``'s)."""

    secret: int
    low: int
    high: int
    player: list[str]


SAMPLES: list[Game] = [
    {"secret": 37, "low": 1, "high": 100, "player": ["50", "37"]},
    {"secret": 6, "low": 1, "high": 20, "player": ["10", "6"]},
]
MAX_GUESSES = 7  # enough for 1..100 by halving
# A guess is a whole number of at most 12 digits: a longer one is no guess (and Python refuses
# to parse one of more than 4,300 digits, which an agent can send).
NUMBER = re.compile(r"-?\d+")
MAX_DIGITS = 12


@dataclass
class Board:
    """What the hints have told the player so far."""

    low: int
    high: int
    guesses: list[int] = field(default_factory=list)


Turn = RolloutState[Game, Board]


def read_guess(reply: Any) -> int | None:
    """The first whole number of the reply, or None (no number, or too long to be a guess)."""
    found = NUMBER.search(reply) if isinstance(reply, str) else None
    if found is None or len(found.group().lstrip("-")) > MAX_DIGITS:
        return None
    return int(found.group())


class GuessNumberEnv(HermesAgentBaseEnv[Game, Board]):
    """Guess-the-number games; a win pays, the more the fewer guesses it took."""

    name = "guess_number"
    env_config_cls = HermesAgentEnvConfig

    @classmethod
    def config_init(cls) -> tuple[HermesAgentEnvConfig, list[APIServerConfig]]:
        config = HermesAgentEnvConfig(
            group_size=4,
            total_steps=2,
            max_agent_turns=MAX_GUESSES,
            enabled_toolsets=[],  # the agent answers in words: one number per reply
            system_prompt="You play a guessing game. Reply with one number and nothing else.",
            tokenizer_name="NousResearch/Hermes-3-Llama-3.1-8B",
            use_wandb=False,
            data_dir_to_save_evals="eval_results/guess_number",
            eval_pass_threshold=0.5,  # a win in any number of guesses earns more; a loss 0
        )
        server = APIServerConfig(
            base_url="http://localhost:8000/v1", model_name="stub-model", health_check=False
        )
        return config, [server]

    async def setup(self) -> None:
        self.items = list(SAMPLES)
        self.index = 0

    async def get_next_item(self) -> Game:
        item = self.items[self.index % len(self.items)]
        self.index += 1
        return item

    def format_prompt(self, item: Game) -> str:
        return f"I am thinking of a whole number from {item['low']} to {item['high']}. Guess it."

    # -- the game, in the turn hooks ---------------------------------------------------------

    def new_state(self, task: Game) -> Board:
        return Board(task["low"], task["high"])

    def turn_reward(self, state: Turn) -> float:
        """1.0 for a guess the hints still allowed, 0.0 for a wasted one (or no number)."""
        guess = read_guess(state.last_reply.get("content"))
        board = state.data
        return 1.0 if guess is not None and board.low <= guess <= board.high else 0.0

    def should_stop(self, state: Turn) -> bool:
        """The right guess ends the game, before any hint."""
        return read_guess(state.last_reply.get("content")) == state.task["secret"]

    def env_response(self, state: Turn) -> list[dict[str, Any]]:
        """Narrow the board and say higher or lower."""
        guess = read_guess(state.last_reply.get("content"))
        if guess is None:
            return [{"role": "user", "content": "That is not a number. Guess again."}]
        board = state.data
        board.guesses.append(guess)
        if guess < state.task["secret"]:
            board.low = max(board.low, guess + 1)
            return [{"role": "user", "content": f"Higher than {guess}."}]
        board.high = min(board.high, guess - 1)
        return [{"role": "user", "content": f"Lower than {guess}."}]

    async def compute_reward(
        self, item: Game, result: AgentResult[Board], ctx: ToolContext
    ) -> float:
        won = result.finished_naturally and read_guess(result.final_response) == item["secret"]
        if not won:
            return 0.0
        # 1.0 for a win at the first guess, down to 0.5 (and a bit) at the last one.
        return 1.0 - 0.5 * (result.turns_used - 1) / MAX_GUESSES

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        await self.run_eval(self.items)


if __name__ == "__main__":
    GuessNumberEnv.cli()
