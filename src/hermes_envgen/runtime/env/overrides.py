"""What the base env does around the methods an author overrides, so their pitfalls cannot bite.

An env overrides ``setup``, ``get_next_item``, ``compute_reward``, ``evaluate`` and
``wandb_log`` as the Hermes skill shows; :func:`guard_overrides` wraps each one a class
defines, when the class is made:

- ``compute_reward`` runs bridged (:mod:`sync_bridge`): ``ctx.terminal(...)["exit_code"]``
  read without ``await`` runs the command, as the skill's binary reward reads it.
- ``evaluate`` runs with :data:`EVALUATING` set, and the env's own lists (its metric buffers)
  keep what is added to them meanwhile apart (:class:`TrainingBuffer`): evaluation's reads see
  it, training's never do, and it is dropped when the evaluation ends.
- ``wandb_log`` that never reaches the base's (a forgotten ``super().wandb_log``) is said once.
- ``get_next_item`` returning None stops the run in one line (atroposlib would take it for
  "no more items" and idle, or end the run quietly); so does a ``setup`` that leaves no
  training tasks, or in evaluate mode no evaluation tasks.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any, SupportsIndex, TypeVar, overload

from hermes_envgen.runtime.errors import EnvConfigError
from hermes_envgen.runtime.loop.sync_bridge import bridged

logger = logging.getLogger(__name__)

EVALUATING: contextvars.ContextVar[bool] = contextvars.ContextVar("evaluating", default=False)
T = TypeVar("T")


class TrainingBuffer(list[T]):
    """A list of the env's whose entries added during evaluation stay out of training's view.

    Added while ``EVALUATING`` (in ``evaluate``, its rollouts and their ``compute_reward``),
    an entry goes aside: evaluation reads the list with it, everything else without it, and
    ``end_evaluation`` drops it.
    """

    def __init__(self, items: Iterable[T] = ()) -> None:
        super().__init__(items)
        self.evaluation_entries: list[T] = []

    def _in_eval(self) -> bool:
        return EVALUATING.get()

    def append(self, item: T) -> None:
        if self._in_eval():
            self.evaluation_entries.append(item)
        else:
            super().append(item)

    def extend(self, items: Iterable[T]) -> None:
        if self._in_eval():
            self.evaluation_entries.extend(items)
        else:
            super().extend(items)

    def insert(self, index: SupportsIndex, item: T) -> None:
        if self._in_eval():
            self.evaluation_entries.insert(index, item)
        else:
            super().insert(index, item)

    def __iadd__(self, items: Iterable[T]) -> TrainingBuffer[T]:  # type: ignore[override,misc]
        self.extend(items)
        return self

    def clear(self) -> None:
        super().clear()
        self.evaluation_entries.clear()

    def _seen(self) -> list[T]:
        return [*super().__iter__(), *self.evaluation_entries]

    def __iter__(self) -> Iterator[T]:
        return iter(self._seen()) if self._in_eval() else super().__iter__()

    def __len__(self) -> int:
        extra = len(self.evaluation_entries) if self._in_eval() else 0
        return super().__len__() + extra

    @overload
    def __getitem__(self, index: SupportsIndex) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: SupportsIndex | slice) -> T | list[T]:
        if self._in_eval() and self.evaluation_entries:
            return self._seen()[index]
        return super().__getitem__(index)

    def end_evaluation(self) -> None:
        """Drop what evaluation added."""
        self.evaluation_entries.clear()


def buffer_env_lists(env: Any, runtime_names: frozenset[str]) -> list[TrainingBuffer[Any]]:
    """Make each plain list of ``env``'s own (not the runtime's) a ``TrainingBuffer``."""
    buffers = []
    for name, value in list(vars(env).items()):
        if name in runtime_names:
            continue
        if type(value) is list:
            value = TrainingBuffer(value)
            object.__setattr__(env, name, value)
        if isinstance(value, TrainingBuffer):
            buffers.append(value)
    return buffers


def _guarded_evaluate(evaluate: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(evaluate)
    async def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if EVALUATING.get():  # an override's super().evaluate(): the outer call guards
            return await evaluate(self, *args, **kwargs)
        buffers = buffer_env_lists(self, self.runtime_attribute_names)
        token = EVALUATING.set(True)
        self.evaluations_running += 1
        try:
            return await evaluate(self, *args, **kwargs)
        finally:
            EVALUATING.reset(token)
            self.evaluations_running -= 1
            for buffer in [*buffers, *buffer_env_lists(self, self.runtime_attribute_names)]:
                buffer.end_evaluation()

    run.guarded = True  # type: ignore[attr-defined]
    return run


def _guarded_wandb_log(wandb_log: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(wandb_log)
    async def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        outermost = not self.wandb_log_running
        if outermost:
            self.wandb_log_running = True
            self.wandb_log_reached_base = False
        try:
            return await wandb_log(self, *args, **kwargs)
        finally:
            if outermost:
                self.wandb_log_running = False
                if not self.wandb_log_reached_base and not self.warned_wandb_log:
                    self.warned_wandb_log = True
                    logger.warning(
                        "warning: %s.wandb_log did not call "
                        "`await super().wandb_log(wandb_metrics)`: the base's metrics (reward, "
                        "turns, tool errors, evaluation) are not logged, nothing goes to W&B",
                        type(self).__name__,
                    )

    run.guarded = True  # type: ignore[attr-defined]
    return run


def _guarded_get_next_item(get_next_item: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(get_next_item)
    async def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        item = await get_next_item(self, *args, **kwargs)
        if item is None:
            raise EnvConfigError(
                f"{type(self).__name__}.get_next_item returned None: it must return the next "
                "training task (a dict such as {'prompt': ...}); is the list setup made empty?"
            )
        return item

    run.guarded = True  # type: ignore[attr-defined]
    return run


def _guarded_setup(setup: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(setup)
    async def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = await setup(self, *args, **kwargs)
        made = vars(self)
        train = made.get("train_items")
        if isinstance(train, list) and not train:  # get_next_item would divide by zero
            raise EnvConfigError(
                f"{type(self).__name__}.setup left no training tasks: self.train_items is []"
            )
        for name in ("eval_items", "_eval_items"):  # the generated env's, the skill's
            held_out = made.get(name)
            if self.evaluate_mode and isinstance(held_out, list) and not held_out:
                raise EnvConfigError(
                    f"{type(self).__name__}.setup left no evaluation tasks: self.{name} is [] "
                    "(hold some out for evaluate: eval_size)"
                )
        return result

    run.guarded = True  # type: ignore[attr-defined]
    return run


def _bridged_compute_reward(compute_reward: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(compute_reward)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        return bridged(compute_reward(self, *args, **kwargs))

    run.guarded = True  # type: ignore[attr-defined]
    return run


_GUARDS: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "compute_reward": _bridged_compute_reward,
    "evaluate": _guarded_evaluate,
    "wandb_log": _guarded_wandb_log,
    "get_next_item": _guarded_get_next_item,
    "setup": _guarded_setup,
}


def guard_overrides(cls: type) -> None:
    """Wrap the methods of ``_GUARDS`` that ``cls`` itself defines (once each)."""
    for name, guard in _GUARDS.items():
        method = cls.__dict__.get(name)
        if method is None or getattr(method, "guarded", False):
            continue
        if not callable(method) or getattr(method, "__isabstractmethod__", False):
            continue
        setattr(cls, name, guard(method))
