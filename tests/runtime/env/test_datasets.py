"""Tasks from a dataset or the built-in tasks, the train/eval split (most of a small task set
is left for training) and the training order."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hermes_envgen.runtime.env.datasets import (
    DataSettings,
    configured_tasks,
    split_train_eval,
    training_order,
)
from hermes_envgen.runtime.rollout import Task


@pytest.mark.parametrize(
    ("tasks", "held_out"),
    [(1, 0), (2, 1), (3, 1), (8, 2), (24, 6), (79, 19), (100, 20), (1000, 100)],
)
def test_the_default_eval_size_leaves_most_tasks_for_training(tasks: int, held_out: int):
    # A user's 3 tasks once became 1 for training and 2 for evaluation; the 24 built-in ones 4/20.
    train, evaluation = split_train_eval(list(range(tasks)), eval_size=20, seed=0)
    assert len(evaluation) == held_out and len(train) == tasks - held_out
    assert sorted(train + evaluation) == list(range(tasks))


def test_the_eval_size_help_says_what_a_single_task_gets():
    # It once promised "at least one item" held out, which one task cannot give.
    from hermes_envgen.runtime.env.config import HermesAgentEnvConfig

    description = HermesAgentEnvConfig.model_fields["eval_size"].description or ""
    assert "a single task is kept for training" in description


def test_the_training_order_is_a_shuffle_of_its_own_seed_and_leaves_the_split_alone():
    # Serve workers with their own --env.seed share one split (split_seed) and differ in order.
    train, _ = split_train_eval(list(range(40)), eval_size=4, seed=0)
    orders = [training_order(train, seed) for seed in (0, 1, 1)]
    assert all(sorted(order) == sorted(train) for order in orders)
    assert orders[1] == orders[2] and orders[0] != orders[1]
    assert train == split_train_eval(list(range(40)), eval_size=4, seed=0)[0]  # left as it was


def test_a_dataset_folder_loads_as_tasks_of_its_prompt_and_answer_fields(tmp_path):
    # A local folder is what load_dataset reads offline; a fresh process keeps its cache in
    # tmp_path (datasets reads HF_HOME once, at import).
    folder = tmp_path / "tasks"
    folder.mkdir()
    rows = [
        {"question": "What is 3 + 4?", "solution": 7, "id": 1},
        {"question": "Sky?", "solution": "blue"},
    ]
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    code = (
        "import json, sys\n"
        "from hermes_envgen.runtime.env.datasets import DataSettings, configured_tasks\n"
        "data = DataSettings(sys.argv[1], 'train', 'question', 'solution')\n"
        "items, source = configured_tasks(data, samples=[])\n"
        "print(json.dumps([items, source]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(folder)],
        env={**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    items, source = json.loads(out.stdout.strip().splitlines()[-1])
    # Task's shape: the two fields as strings, nothing else of the row's
    assert items == [
        Task(prompt="What is 3 + 4?", answer="7"),
        Task(prompt="Sky?", answer="blue"),
    ]
    assert source == f"{folder}[train]"


def test_no_dataset_gives_a_copy_of_the_built_in_tasks():
    samples = [Task(prompt="What is 3 + 4?", answer="7")]
    items, source = configured_tasks(DataSettings(), samples=samples)
    assert items == samples and items is not samples and source == "built-in tasks"
