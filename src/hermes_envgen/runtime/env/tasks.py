"""EnvTasks: what every env does with its tasks, so that an env file says only what is its own.

``HermesAgentBaseEnv`` inherits it. At ``setup`` the tasks are loaded (``load_tasks``: the
configured dataset, else the env's built-in ``samples``), split into training and evaluation
tasks by ``split_seed`` (the same on every worker of a run, so that none trains on what another
holds out) and put in the order of this worker's ``seed`` (``split_tasks``); ``get_next_item``
cycles through them and ``evaluate`` runs the held-out ones through the full agent loop
(``run_eval``). A generated env writes these methods out with these building blocks, for its
author to edit; an env that does not define them gets these.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from hermes_envgen.runtime.env.datasets import configured_tasks, split_train_eval, training_order
from hermes_envgen.runtime.rollout import Task

if TYPE_CHECKING:
    from hermes_envgen.runtime.env.config import HermesAgentEnvConfig

logger = logging.getLogger(__name__)


class EnvTasks:
    """The task half of an env: load, split, draw in turn, evaluate the held-out ones."""

    # The env's built-in tasks: used when no dataset is configured (or, with dataset_fallback,
    # when it cannot be loaded); the tests' stub model replays their gold solutions.
    samples: ClassVar[Sequence[Task]] = ()
    train_items: list[Task]
    eval_items: list[Task]
    next_index: int = 0
    task_source: str = "load_tasks()"  # where the tasks came from, for the start-up line

    if TYPE_CHECKING:
        config: HermesAgentEnvConfig

        async def run_eval(
            self, items: list[Any], task_name: str | None = None
        ) -> dict[str, float]: ...

    def load_tasks(self, samples: Sequence[Task] | None = None) -> list[Task]:
        """Every task of the env, before the split: the rows of ``dataset_name``, else
        ``samples`` (the class's ``samples`` when None). A dataset that cannot be loaded stops
        the run (``DatasetError``) unless ``dataset_fallback`` is set."""
        data = self.config.data_settings()
        if data.dataset_name and data.fallback:
            logger.warning(
                "warning: dataset_fallback is on: if %s cannot be loaded, the run uses the "
                "built-in tasks instead",
                data.dataset_name,
            )
        tasks, self.task_source = configured_tasks(
            data, self.samples if samples is None else samples
        )
        return tasks

    def split_tasks(self, tasks: Sequence[Task]) -> tuple[list[Task], list[Task]]:
        """Training and evaluation tasks: ``eval_size`` held out by ``split_seed`` (the same on
        every worker of a run), the rest in the order of this worker's ``seed``."""
        data = self.config.data_settings()
        train, held_out = split_train_eval(tasks, data.eval_size, data.split_seed)
        train = training_order(train, data.seed)
        print(f"{len(train)} training and {len(held_out)} evaluation tasks from {self.task_source}")
        return train, held_out

    async def setup(self) -> None:
        """Load the tasks and hold some out for evaluation (``eval_size``)."""
        self.train_items, self.eval_items = self.split_tasks(self.load_tasks())
        self.next_index = 0

    async def get_next_item(self) -> Any:
        """The next training task, cycling through them in this worker's order.

        A ``Task`` here; typed as atroposlib's item (anything) so that an env drawing items of
        its own shape overrides it as it likes, as its hooks take ``item: Any``."""
        item = self.train_items[self.next_index % len(self.train_items)]
        self.next_index += 1
        return item

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        """Each held-out task ``eval_samples_per_item`` times, with the full loop and tools.

        Results go to ``data_dir_to_save_evals`` (samples.jsonl and failures.jsonl as the
        rollouts finish, then metrics.json; ``--env.resume true`` continues an interrupted
        run) and to the ``eval/`` metrics, never into the training metrics.
        """
        await self.run_eval(self.eval_items)

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        """Add how many training tasks there are to what the env logs."""
        wandb_metrics = dict(wandb_metrics or {})
        if hasattr(self, "train_items"):
            wandb_metrics["train/tasks_available"] = float(len(self.train_items))
        await super().wandb_log(wandb_metrics)  # type: ignore[misc]
