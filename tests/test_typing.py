"""What an env author's type checker sees of the runtime: the package's own annotations
(``py.typed``), so that a task missing its prompt or a misused helper is caught before a run.
"""

from __future__ import annotations

import subprocess
import sys

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
