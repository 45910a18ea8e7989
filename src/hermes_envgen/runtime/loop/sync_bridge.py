"""A reward that reads a sandbox call's result without ``await``, run as it was written.

The skill env authors learn from writes ``result = ctx.terminal("pytest -q")`` and then
``result["exit_code"]`` inside ``async def compute_reward``. The read happens on the event
loop's own thread, so the command cannot simply be run there (the loop is busy running the
reward), nor on a worker thread with a loop of its own: a bwrap sandbox's anchor connection,
its locks and the reaping of its processes belong to the env's loop, which would sit blocked
while the worker waited on it. Failing at the read instead would make the skill's binary
reward fail every rollout.

So ``compute_reward`` runs in a greenlet of its own (:func:`bridged`): its coroutine is stepped
there and every future it waits on is handed to the task that awaits it, unchanged. A plain read
of a result (:func:`wait_here`) steps the command's coroutine the same way: the reward's
greenlet pauses while the loop runs the command (and every other rollout) and goes on when it
is done. Outside such a greenlet a plain read cannot wait: :class:`NotAwaited` says to await.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, TypeVar

from greenlet import getcurrent, greenlet

from hermes_envgen.errors import HermesEnvgenError

T = TypeVar("T")


class NotAwaited(HermesEnvgenError, RuntimeError):
    """A result read without ``await`` where nothing can wait for it."""


class _RewardGreenlet(greenlet):
    """The greenlet a bridged coroutine runs in; a plain read inside it may wait."""


def in_bridge() -> bool:
    """Whether a plain read may wait here (inside a bridged ``compute_reward``)."""
    return isinstance(getcurrent(), _RewardGreenlet)


def _step(coroutine: Generator[Any, Any, T] | Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end from inside a bridge greenlet: each thing it yields (a
    future to wait on) goes to the awaiting task through the parent greenlet, and what the
    task sends or throws back comes in."""
    parent = getcurrent().parent
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        try:
            yielded = coroutine.send(sent) if thrown is None else coroutine.throw(thrown)
        except StopIteration as stop:
            return stop.value
        how, value = parent.switch(("yield", yielded))
        sent, thrown = (value, None) if how == "send" else (None, value)


class _Bridged(Awaitable[T]):
    """``coroutine``, awaitable as itself, run in a greenlet of its own."""

    def __init__(self, coroutine: Coroutine[Any, Any, T]) -> None:
        self._coroutine = coroutine

    def __await__(self) -> Generator[Any, Any, T]:
        child = _RewardGreenlet(self._run)
        # The coroutine sees the awaiting task's context variables, as it would awaited plainly.
        child.gr_context = contextvars.copy_context()
        message = child.switch()
        while True:
            kind, payload = message
            if kind == "done":
                return payload
            if kind == "error":
                raise payload
            try:
                sent = yield payload
            except BaseException as exc:  # thrown in by the task: cancellation, mostly
                message = child.switch(("throw", exc))
            else:
                message = child.switch(("send", sent))

    def _run(self) -> tuple[str, Any]:
        try:
            return "done", _step(self._coroutine)
        except BaseException as exc:
            return "error", exc


def bridged(coroutine: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
    """``coroutine`` run so that a plain read of a result (``wait_here``) in it waits; still a
    coroutine (``asyncio.create_task`` takes it)."""

    async def run() -> T:
        return await _Bridged(coroutine)

    return run()


def wait_here(awaitable: Awaitable[T], what: str) -> T:
    """The result of ``awaitable``, waited for without ``await``: possible inside a bridged
    coroutine only; elsewhere ``NotAwaited`` says what to write (``what``: the call)."""
    if not in_bridge():
        if hasattr(awaitable, "close"):
            awaitable.close()
        raise NotAwaited(
            f"{what} was read without await outside compute_reward: write `await {what}`"
        )
    return _step(awaitable.__await__())
