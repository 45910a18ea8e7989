"""Scored groups to Atropos's run-api, each recorded once run-api has accepted it.

atroposlib's serve mode writes a group to ``data_path_to_save_groups`` before it posts it, and
cancels a rollout's worker task whenever run-api's queue is full, at the end of the run and
after ``worker_timeout``: a worker cancelled mid-post has recorded a group that run-api may
never have received, and a refused post (HTTP 4xx) is logged without the group's id. Here the
post runs in a task of its own that cancelling the worker does not stop, failures before the
request went out (refused connection, connect timeout) and HTTP 408/429/5xx answers are
retried with back-off, and a record line is written when run-api answers that it took the
group. A post whose answer was lost after the request went out (a slow or overloaded
run-api, a broken connection) may have landed: it is recorded as ``answer_lost`` and never
sent again, since run-api cannot tell a second copy from a new group and would queue both.
A group that cannot be delivered is logged with its id; ``counts`` keeps the tally.

SIGTERM ends serve with a bounded flush: the workers stop, the posts under way get
``SHUTDOWN_FLUSH`` seconds for their answers, and a post still unanswered then is recorded as
``answer_lost`` (run-api may have it), so nothing the trainer received is missing from the
record. A delivery cancelled any other way after its request went out is recorded so too.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import os
import signal
import socket
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import IO, TYPE_CHECKING, Any

import aiohttp

from hermes_envgen.runtime.env.cli import check_not_rollout_server
from hermes_envgen.runtime.env.serve_log import (
    EqualScoreSkips,
    RegistrationWait,
    lost_rollout_server,
)
from hermes_envgen.runtime.errors import RolloutServerError, RolloutServerLost

if TYPE_CHECKING:
    # The mixin is part of a BaseEnv: type checkers see its attributes (atroposlib's, Any).
    from atroposlib.envs.base import BaseEnv as _EnvBase
    from atroposlib.envs.base import ScoredDataGroup
else:
    _EnvBase = object

logger = logging.getLogger(__name__)

GROUP_ID_KEY = "group_id"  # in each scored group's ``group_overrides``
ACCEPTED = frozenset({"received", "buffered"})  # run-api's answers when it took the data
RETRYABLE_STATUS = frozenset({408, 429})  # besides 5xx: run-api may take it a moment later
FIRST_DELAY, MAX_DELAY = 0.5, 10.0  # back-off between attempts, doubling
DISCONNECT_TIMEOUT = 5.0  # seconds a worker that is ending gives run-api to note it
# Seconds SIGTERM leaves the posts under way for run-api's answers (Slurm, Docker and
# Kubernetes wait 10-30 s before they kill): what is unanswered then is recorded answer_lost.
SHUTDOWN_FLUSH = 8.0
# Each record line's "delivery": run-api said it took the group, or the request went out and
# its answer never came (the group may or may not be queued; it is not sent again).
DELIVERY_KEY = "delivery"
DELIVERED, ANSWER_LOST = "accepted", "answer_lost"


class GroupDelivery:
    """Posts scored groups to run-api from tasks of their own and records the accepted ones.

    ``retry_for``: seconds a group is posted again, backing off, while run-api cannot be
    reached or answers 408/429/5xx, before it is dropped; ``request_timeout``: seconds per
    post; a post that got no answer in time may have landed and is not sent again.
    ``counts``: groups accepted, answer_lost, refused and dropped, and retries (posts sent
    again after a failure that left the group undelivered).
    """

    def __init__(
        self,
        api_url: str,
        record: Path | None = None,
        retry_for: float = 120.0,
        request_timeout: float = 60.0,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.retry_for = retry_for
        self.request_timeout = request_timeout

        # One JSON line per group run-api accepted, flushed at once: a killed worker leaves
        # a record of what it delivered, never of what it did not.
        self._record: IO[str] | None = open(record, "a", encoding="utf-8") if record else None  # noqa: SIM115
        self._session: aiohttp.ClientSession | None = None
        self._pending: set[asyncio.Task[bool]] = set()
        self.counts: Counter[str] = Counter()

    async def send(self, payload: dict[str, Any] | list[dict[str, Any]]) -> bool:
        """Deliver one group or a list; whether run-api accepted it.

        Cancelling the caller does not cancel the delivery: ``drain`` waits for it.
        """
        delivery = asyncio.ensure_future(self._deliver(payload))
        self._pending.add(delivery)
        delivery.add_done_callback(self._pending.discard)
        return await asyncio.shield(delivery)

    async def drain(self, within: float | None = None) -> None:
        """Wait for every delivery under way, then close the session and the record.

        ``within``: seconds to wait at most; the deliveries still under way then are
        cancelled (one whose request went out is recorded as ``answer_lost``).
        """
        loop = asyncio.get_running_loop()
        deadline = None if within is None else loop.time() + within
        while self._pending:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                for delivery in list(self._pending):
                    delivery.cancel()
                await asyncio.gather(*self._pending, return_exceptions=True)
                break
            await asyncio.wait(set(self._pending), timeout=left)
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._record is not None:
            self._record.close()
            self._record = None
        if set(self.counts) - {DELIVERED}:
            logger.warning("delivery to run-api: %s", ", ".join(_tally(self.counts)))

    async def abandon(self) -> None:
        """run-api is gone: give up the deliveries under way, close the session and record."""
        await self.drain(within=0)

    async def _deliver(self, payload: dict[str, Any] | list[dict[str, Any]]) -> bool:
        groups = payload if isinstance(payload, list) else [payload]
        ids = ", ".join(_group_id(g) for g in groups)
        url = self.api_url + ("/scored_data_list" if isinstance(payload, list) else "/scored_data")
        body, headers = _encode(payload)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_for
        delay = FIRST_DELAY
        attempts = 0
        while True:
            attempts += 1
            sent = SimpleNamespace(out=False)  # set once the request's headers went out
            try:
                status, answer = await self._post(url, body, headers, sent)
            except asyncio.CancelledError:
                if sent.out:  # stopped (SIGTERM's flush ran out, run-api gone) while waiting
                    logger.warning(
                        "group(s) %s sent to run-api, stopped before its answer: recorded as "
                        "%s (it may have arrived)",
                        ids,
                        ANSWER_LOST,
                    )
                    self._write_record(groups, ANSWER_LOST)
                raise
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                problem = f"{type(exc).__name__}: {exc}".rstrip(": ")
                if sent.out:
                    # run-api may have the group: a second copy would be queued as a new one.
                    logger.warning(
                        "group(s) %s sent to run-api, answer lost (%s): not sent again, "
                        "recorded as %s (it may have arrived)",
                        ids,
                        problem,
                        ANSWER_LOST,
                    )
                    self._write_record(groups, ANSWER_LOST)
                    return False
            else:
                if status == 200 and isinstance(answer, dict) and answer.get("status") in ACCEPTED:
                    self._write_record(groups, DELIVERED)
                    return True
                if status < 500 and status not in RETRYABLE_STATUS:
                    logger.error(
                        "run-api refused group(s) %s (HTTP %d: %s); they are not delivered",
                        ids,
                        status,
                        _first_line(answer),
                    )
                    self.counts["refused"] += len(groups)
                    return False
                problem = f"HTTP {status}: {_first_line(answer)}"
            if loop.time() + delay > deadline:
                logger.error(
                    "group(s) %s not delivered to run-api after %d attempts (%s); dropped",
                    ids,
                    attempts,
                    problem,
                )
                self.counts["dropped"] += len(groups)
                return False
            logger.warning("posting group(s) %s to run-api failed (%s); retrying", ids, problem)
            self.counts["retries"] += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_DELAY)

    async def _post(
        self, url: str, body: bytes, headers: dict[str, str], sent: SimpleNamespace
    ) -> tuple[int, Any]:
        if self._session is None or self._session.closed:
            tracing = aiohttp.TraceConfig()
            tracing.on_request_headers_sent.append(_mark_sent)
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.request_timeout),
                # A fresh connection per post: a kept-alive one run-api closed meanwhile
                # would fail after the request "went out", and its group be taken as sent.
                connector=aiohttp.TCPConnector(force_close=True),
                trace_configs=[tracing],
            )
        async with self._session.post(
            url, data=body, headers=headers, trace_request_ctx=sent
        ) as response:
            text = await response.text()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, text

    def _write_record(self, groups: list[dict[str, Any]], outcome: str) -> None:
        self.counts[outcome] += len(groups)
        if self._record is None:
            return
        self._record.writelines(
            json.dumps(group | {DELIVERY_KEY: outcome}) + "\n" for group in groups
        )
        self._record.flush()


async def _mark_sent(session: Any, context: SimpleNamespace, params: Any) -> None:
    """Trace hook: the request's headers went out, so run-api may act on it from now on."""
    context.trace_request_ctx.out = True


class TerminationRequest:
    """While entered, SIGTERM sets ``future`` instead of raising SystemExit at once.

    Serve mode's main loop waits on it, so that SIGTERM can stop the workers and flush the
    posts under way. The handler that was there before (exit on SIGTERM) comes back on exit.
    """

    def __init__(self) -> None:
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> TerminationRequest:
        loop = asyncio.get_running_loop()
        try:
            self._previous = signal.getsignal(signal.SIGTERM)
            loop.add_signal_handler(signal.SIGTERM, self._request)
            self._installed = True
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
            pass
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
            if self._previous is not None:  # None: set outside Python, left as asyncio left it
                signal.signal(signal.SIGTERM, self._previous)

    def _request(self) -> None:
        if not self.future.done():
            logger.warning(
                "SIGTERM: serve stops; the groups under way get %g s for run-api's answers",
                SHUTDOWN_FLUSH,
            )
            self.future.set_result(None)


def _tally(counts: Counter[str]) -> list[str]:
    order = (DELIVERED, ANSWER_LOST, "refused", "dropped", "retries")
    return [f"{counts[name]} {name.replace('_', ' ')}" for name in order if counts[name]]


async def disconnect_env(api_url: str, env_id: int, timeout: float = DISCONNECT_TIMEOUT) -> bool:
    """Tell run-api that worker ``env_id`` is gone; whether run-api took note.

    run-api shares each batch among the envs it counts as connected, by weight, and has no
    other way to learn that a worker ended: without this, a stopped worker's share stays
    reserved and the live workers' shrink with every restart. Best effort: at the end of a
    run, run-api may be gone already.
    """
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            url = api_url.rstrip("/") + "/disconnect-env"
            async with session.post(url, json={"env_id": env_id}) as response:
                answer = await response.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
        logger.info("could not tell run-api that env %d disconnected (%s)", env_id, exc)
        return False
    return isinstance(answer, dict) and answer.get("status") == "success"


async def check_rollout_server(api_url: str, wait: float = 30.0, timeout: float = 5.0) -> None:
    """RolloutServerError (one line, exit 2) unless run-api answers at ``api_url``.

    A refusal or a timeout is asked again for ``wait`` seconds (run-api may be starting beside
    the workers, as under Slurm); each try gives up after ``timeout`` seconds, so an address
    that drops packets fails in seconds too. The message names the URL and this host.
    """
    url = api_url.rstrip("/") + "/"
    deadline = time.monotonic() + wait
    while True:
        try:
            limit = aiohttp.ClientTimeout(total=timeout, sock_connect=timeout)
            async with aiohttp.ClientSession(timeout=limit) as session, session.get(url) as reply:
                if reply.status == 200:
                    return
                reason = f"HTTP {reply.status}: is that run-api's address?"
                retry = reply.status >= 500
        except asyncio.TimeoutError:
            reason, retry = f"no answer within {timeout:g} s", True
        except (aiohttp.ClientError, OSError) as exc:
            cause = getattr(exc, "os_error", None) or exc
            number = getattr(cause, "errno", None)
            reason = os.strerror(number).lower() if number else str(cause) or type(cause).__name__
            retry = True
        if not retry or time.monotonic() + 1 >= deadline:
            raise RolloutServerError(
                f"run-api (--env.rollout_server_url) at {api_url} cannot be reached from "
                f"{socket.gethostname()}: {reason}; is it running, listening on an address this "
                "host reaches (not 127.0.0.1 for workers on other machines)?"
            )
        await asyncio.sleep(1)


def _encode(payload: Any) -> tuple[bytes, dict[str, str]]:
    """The JSON body, gzipped when that makes it smaller (run-api inflates it)."""
    body = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"}
    if len(body) >= 1024:
        packed = gzip.compress(body, compresslevel=5)
        if len(packed) < len(body):
            return packed, headers | {"Content-Encoding": "gzip"}
    return body, headers


def _group_id(group: dict[str, Any]) -> str:
    overrides = group.get("group_overrides") or {}
    return str(overrides.get(GROUP_ID_KEY, "?"))


def _first_line(answer: Any) -> str:
    text = answer if isinstance(answer, str) else json.dumps(answer)
    return (text.strip().splitlines() or [""])[0][:200]


class ServeDelivery(_EnvBase):  # type: ignore[misc]  # atroposlib: no types
    """Serve mode of ``HermesAgentBaseEnv``: its overrides of atroposlib's ``BaseEnv``.

    A mixin placed before ``BaseEnv`` (its ``super()`` is atroposlib's): these methods
    override atroposlib's own, so they stay methods, kept here beside the delivery they drive.
    The checks at the start of serve (run-api reachable, the model server), groups of equal
    scores left out, each group posted by :class:`GroupDelivery` once registered, and the
    deliveries under way finished, however serve ends.
    """

    _delivery: GroupDelivery | None  # serve mode's, from registration on (set in __init__)
    _equal_scores: EqualScoreSkips  # serve mode's groups left out, said rarely
    _model_lost: asyncio.Future[BaseException]  # what ended serve mode: the model server lost
    jsonl_writer: Any  # process mode's output file (atroposlib's __init__ opens it)

    async def env_manager(self) -> None:
        """Serve mode; at its end, however it ends, the worker disconnects from run-api."""
        try:
            await self._serve()
        finally:
            if self._delivery is not None:  # registered
                await disconnect_env(self.config.rollout_server_url, self.env_id)

    async def _serve(self) -> None:
        for server in self.server.servers:  # serve mode runs beside run-api
            check_not_rollout_server(server.config, self.config.rollout_server_url)
        # Unreachable run-api: one line and exit 2, not atroposlib's retries and stack trace.
        await check_rollout_server(self.config.rollout_server_url, self.config.startup_wait)
        await self.check_model_server()
        self._announce_training_data()
        # atroposlib only logs a worker's exception: a model server that fails every request
        # for good would keep serve mode asking forever, so such a failure ends the run.
        self._model_lost = asyncio.get_running_loop().create_future()
        manager = asyncio.ensure_future(super().env_manager())
        with TerminationRequest() as terminated:
            await asyncio.wait(
                {manager, self._model_lost, terminated.future},
                return_when=asyncio.FIRST_COMPLETED,
            )
        if terminated.future.done():
            # SIGTERM: no new rollouts; the posts under way get a bounded flush, then exit
            # as SIGTERM's default would (128 + 15), the worker disconnected on the way out.
            for task in [manager, *getattr(self, "workers", ())]:
                task.cancel()
            # Bounded: a rollout that does not end on cancellation (its host cut off) must
            # not hold the stop up; what it had under way is not delivered.
            done, _ = await asyncio.wait({manager}, timeout=SHUTDOWN_FLUSH)
            if manager in done and not manager.cancelled():
                manager.exception()  # retrieved: the stop is what this run reports
            if self._delivery is not None:
                await self._delivery.drain(within=SHUTDOWN_FLUSH)
            raise SystemExit(128 + signal.SIGTERM)
        if manager.done():
            try:
                await manager
            except Exception as exc:
                # run-api gone (its trainer exited): one line, not atroposlib's traceback
                if (problem := lost_rollout_server(exc)) is None:
                    raise
                for task in getattr(self, "workers", ()):
                    task.cancel()
                if self._delivery is not None:
                    await self._delivery.abandon()
                raise RolloutServerLost(
                    f"run-api at {self.config.rollout_server_url} stopped answering "
                    f"({problem}): serve ends. Did the trainer exit? Start run-api and a "
                    "trainer, then serve again."
                ) from None
            await self._finish_deliveries()
            return
        for task in [manager, *getattr(self, "workers", ())]:
            task.cancel()
        await asyncio.gather(manager, return_exceptions=True)
        await self._finish_deliveries()
        raise self._model_lost.result()

    async def register_env(self) -> None:
        """Register with run-api; from then on groups go out through :class:`GroupDelivery`.

        The groups file (``data_path_to_save_groups``) then records what run-api accepted,
        not what was about to be posted.
        """
        waiting = RegistrationWait(self.config.rollout_server_url)
        logging.getLogger().addFilter(waiting)  # atroposlib says it on the root logger
        try:
            await super().register_env()
        finally:
            logging.getLogger().removeFilter(waiting)
        if self._delivery is None:
            record = None
            if self.jsonl_writer is not None:  # atroposlib opened it; it is still empty
                self.jsonl_writer.close()
                self.jsonl_writer = None
                record = Path(self.config.data_path_to_save_groups)
            self._delivery = GroupDelivery(
                self.config.rollout_server_url,
                record,
                retry_for=self.config.delivery_retry_seconds,
                request_timeout=self.config.delivery_request_timeout,
            )

    async def handle_send_to_api(
        self,
        scored_data: ScoredDataGroup | list[ScoredDataGroup] | None,
        item: Any = None,
        do_send_to_api: bool = True,
        abort_on_any_max_length_exceeded: bool = True,
    ) -> None:
        """atroposlib's, with groups of equal scores left out here: counted and said rarely.

        atroposlib would skip them too, with a line per group that never says what it means.
        """
        if self.config.ensure_scores_are_not_same and scored_data is not None:
            groups = scored_data if isinstance(scored_data, list) else [scored_data]
            kept = [
                group
                for group in groups
                if group is None
                or not group.get("scores")
                or not self._equal_scores.offered(list(group["scores"]))
            ]
            if not any(group is not None for group in kept):
                return
            scored_data = kept if isinstance(scored_data, list) else kept[0]
        await super().handle_send_to_api(
            scored_data, item, do_send_to_api, abort_on_any_max_length_exceeded
        )

    async def _send_scored_data_to_api(
        self, scored_data: ScoredDataGroup | list[ScoredDataGroup]
    ) -> None:
        """Post the group(s) in a task that cancelling the rollout's worker does not stop."""
        if self._delivery is None:  # never registered: atroposlib's own post
            await super()._send_scored_data_to_api(scored_data)
            return
        for group in scored_data if isinstance(scored_data, list) else [scored_data]:
            group["env_id"] = self.env_id
        await self._delivery.send(scored_data)

    async def _finish_deliveries(self) -> None:
        """The end of serve mode: every group under way is accepted, or logged as not."""
        if self._delivery is not None:
            await self._delivery.drain()
