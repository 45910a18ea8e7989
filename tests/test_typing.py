"""What an env author's type checker sees of the runtime: the package's own annotations
(``py.typed``), so that a task missing its prompt or a misused helper is caught before a run.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# An env's own module, as its author's mypy reads it (the package found where it is installed).
ENV_CODE = """\
from hermes_envgen.runtime import ModelClient, Task, ask_judge, split_train_eval, tool

tasks: list[Task] = [Task(prompt="What is 3 + 4?", answer="7")]
train, evaluation = split_train_eval(tasks, 1, seed=0)
reveal_type(train)
missing = Task(answer="7")


@tool(toolset="math")
def add(a: int, b: int) -> int:
    return a + b


reveal_type(add)
total: str = add(1, 2)


async def grade(client: ModelClient, task: Task) -> float | None:
    verdict = await ask_judge(client, task, "7")
    await ask_judge("http://judge", task, "7")
    return verdict.score
"""

# Only the runtime is under test: the big typed dependencies are read as Any, for speed.
CONFIG = """\
[mypy]
ignore_missing_imports = True
[mypy-openai.*,transformers.*,torch.*,aiohttp.*,mcp.*,pydantic.*,httpx.*,rich.*,numpy.*]
follow_imports = skip
"""


def test_an_env_authors_type_checker_reads_the_runtimes_types(tmp_path):
    (tmp_path / "env.py").write_text(ENV_CODE)
    (tmp_path / "mypy.ini").write_text(CONFIG)
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "env.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = out.stdout
    assert out.returncode == 1, said + out.stderr  # the mistakes, no crash
    assert "missing library stubs or py.typed marker" not in said
    # a split keeps the items' type, a tool keeps its function's
    (split,) = [line for line in said.splitlines() if line.startswith("env.py:5: note")]
    assert 'Revealed type is "list[TypedDict({' in split and "'prompt': str" in split
    assert 'env.py:14: note: Revealed type is "def (a: int, b: int) -> int"' in said
    assert 'env.py:6: error: Missing key "prompt" for TypedDict "Task"' in said
    assert "env.py:15: error: Incompatible types in assignment" in said
    # the judge is asked through a chat server (a ModelClient is one), not a URL
    assert 'env.py:20: error: Argument 1 to "ask_judge" has incompatible type "str"' in said
    assert said.count("error:") == 3, said


# An env whose tasks and per-rollout state are typed: hooks of either form (def, async def),
# and two mistakes the types must catch (a stop rule returning a str, a field the state lacks).
TYPED_STATE_ENV = """\
from dataclasses import dataclass
from typing import Any, TypedDict

from hermes_envgen.runtime import AgentResult, HermesAgentBaseEnv, RolloutState, ToolContext


class Game(TypedDict):
    secret: int


@dataclass
class Board:
    guesses: int = 0


class GameEnv(HermesAgentBaseEnv[Game, Board]):
    def format_prompt(self, item: Game) -> str:
        return "Guess."

    def new_state(self, task: Game) -> Board:
        return Board()

    async def should_stop(self, state: RolloutState[Game, Board]) -> bool:
        return state.data.guesses > state.task["secret"]

    def env_response(self, state: RolloutState[Game, Board]) -> list[dict[str, Any]]:
        state.data.guesses += 1
        state.finish()
        return [{"role": "user", "content": "Again."}]

    async def compute_reward(
        self, item: Game, result: AgentResult[Board], ctx: ToolContext
    ) -> float:
        reveal_type(result.data)
        return 1.0 / (1 + result.data.guesses)


class WrongEnv(HermesAgentBaseEnv[Game, Board]):
    def should_stop(self, state: RolloutState[Game, Board]) -> str:
        return "yes"

    def turn_reward(self, state: RolloutState[Game, Board]) -> float:
        return float(state.data.won)
"""

STRICT = CONFIG.replace("[mypy]\n", "[mypy]\nstrict = True\n")


@pytest.mark.slow
def test_strict_mypy_passes_the_examples_and_types_an_envs_own_state(tmp_path):
    from conftest import EXAMPLES

    (tmp_path / "game_env.py").write_text(TYPED_STATE_ENV)
    (tmp_path / "mypy.ini").write_text(STRICT)
    examples = sorted(str(path) for path in EXAMPLES.glob("*.py"))
    mypy = [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")]
    out = subprocess.run(
        [*mypy, "game_env.py", *examples],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = out.stdout
    assert out.returncode == 1, said + out.stderr
    assert "examples" not in said, said  # every example passes strict mypy
    assert 'game_env.py:34: note: Revealed type is "game_env.Board"' in said
    assert (
        'game_env.py:39: error: Return type "str" of "should_stop" incompatible with return '
        'type "bool | Awaitable[bool]" in supertype '
        '"hermes_envgen.runtime.loop.agent_loop.TurnHooks"' in said
    )
    assert 'game_env.py:43: error: "Board" has no attribute "won"' in said
    assert said.count("error:") == 2, said
