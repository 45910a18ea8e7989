"""Task data for envs: a Hugging Face dataset or the env's built-in tasks, and their splits."""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from hermes_envgen.runtime.errors import DatasetError
from hermes_envgen.runtime.rollout import Task

logger = logging.getLogger(__name__)

# Splits and orders keep whatever items they are given: Tasks, or an env's own dicts.
Item = TypeVar("Item")


@dataclass(frozen=True)
class DataSettings:
    """Where an env's tasks come from, and how they are split and ordered (its ``dataset_*``,
    ``eval_size`` and seed settings: ``config.data_settings()``)."""

    dataset_name: str | None = None  # a hub dataset; None (or empty): the built-in tasks
    dataset_split: str = "train"
    prompt_field: str = "prompt"  # the dataset's field with the task
    answer_field: str = "answer"  # the dataset's field with the reference answer
    fallback: bool = False  # the built-in tasks when the dataset cannot be loaded (said)
    eval_size: int = 20  # tasks held out for evaluation (see split_train_eval)
    split_seed: int = 0  # of the train/eval split: the same on every worker of a run
    seed: int = 0  # of the order this worker draws training tasks in


def load_hub_items(name: str, split: str, prompt_field: str, answer_field: str) -> list[Task]:
    """Rows of a hub dataset as ``{"prompt", "answer"}`` tasks (raises when it cannot load)."""
    from datasets import load_dataset

    rows = load_dataset(name, split=split)
    missing = {prompt_field, answer_field} - set(rows.column_names)
    if missing:
        raise DatasetError(
            f"dataset {name} has no field(s) {', '.join(sorted(missing))}; "
            f"its fields are: {', '.join(rows.column_names)}"
        )
    return [Task(prompt=str(r[prompt_field]), answer=str(r[answer_field])) for r in rows]


def configured_tasks(data: DataSettings, samples: Sequence[Task]) -> tuple[list[Task], str]:
    """The tasks of a run and where they came from (for the log): the dataset's when one is
    named, else the built-in ``samples``.

    A named dataset that cannot be loaded is a ``DatasetError`` naming it and the cause: a
    mistyped or private name must not train on the built-in tasks unnoticed. Only with
    ``data.fallback`` (``dataset_fallback``, asked for by the user) do the built-in tasks stand
    in, with a warning.
    """
    name, split = data.dataset_name, data.dataset_split
    if not name:
        if not samples:
            raise DatasetError(
                "no tasks: no dataset is configured (--env.dataset_name) and the env has no "
                "built-in tasks"
            )
        return list(samples), "built-in tasks"
    try:
        items = load_hub_items(name, split, data.prompt_field, data.answer_field)
        return items, f"{name}[{split}]"
    except DatasetError:
        raise
    # datasets raises a zoo (ConnectionError offline, DatasetNotFoundError, ValueError for a
    # split...): each one stops the run with its reason, none is ignored.
    except Exception as exc:
        cause = f"{type(exc).__name__}: {str(exc).strip()}".splitlines()[0]
        if not (data.fallback and samples):
            raise DatasetError(
                f"dataset {name} (split {split}) could not be loaded: {cause}; check "
                "--env.dataset_name, or pass --env.dataset_fallback true to use the built-in "
                "tasks instead"
            ) from None
        logger.warning(
            "warning: dataset %s could not be loaded (%s); using the built-in tasks", name, cause
        )
        return list(samples), f"built-in tasks ({name} could not be loaded)"


def split_train_eval(
    items: Sequence[Item], eval_size: int, seed: int = 0
) -> tuple[list[Item], list[Item]]:
    """A seeded shuffle, then items for evaluation: ``eval_size`` or a tenth, whichever is more,
    but at most a quarter (at least one; a single item is kept for training), so that most of a
    small set is left for training.
    """
    if not items:
        raise DatasetError("no task items: the dataset is empty and there are no samples")
    shuffled = list(items)
    random.Random(seed).shuffle(shuffled)
    quarter = max(len(shuffled) // 4, 1)
    n_eval = min(max(eval_size, len(shuffled) // 10), quarter, len(shuffled) - 1)
    return shuffled[n_eval:], shuffled[:n_eval]


def training_order(items: Sequence[Item], seed: int) -> list[Item]:
    """The training items in the order one worker draws them: a shuffle by its own seed.

    Workers of one run share the split (``split_train_eval`` with one seed) and each gets its
    own order, so that they do not all work on the same task at the same time.
    """
    ordered = list(items)
    random.Random(seed).shuffle(ordered)
    return ordered
