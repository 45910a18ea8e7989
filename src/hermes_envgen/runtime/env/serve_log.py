"""What serve mode says while it cannot feed the trainer: once, then at a bounded rate.

atroposlib logs a line per skipped group ("Scores are the same in a group, skipping...") and
per second of waiting for a trainer ("Waiting to register the env..."): a thousand lines that
never say why. Here each is said once with its reason, then again at most every ``interval``
seconds with a count; and run-api going away is told from other failures, so that serve ends
in one line (``RolloutServerLost``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

NOTICE_INTERVAL = 60.0  # seconds between two lines about the same thing
_WAITING = "Waiting to register the env due to status "


class EqualScoreSkips:
    """Groups serve mode leaves out because every rollout scored the same, counted and said."""

    def __init__(
        self, interval: float = NOTICE_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = interval
        self.clock = clock
        self.groups = 0  # groups offered to run-api
        self.skipped = 0
        self._said_at: float | None = None

    def offered(self, scores: list[float]) -> bool:
        """Count a group; True when it is to be skipped (every score equal), said if due."""
        self.groups += 1
        if len(set(scores)) != 1:
            return False
        self.skipped += 1
        now = self.clock()
        if self._said_at is None or now - self._said_at >= self.interval:
            self._said_at = now
            logger.warning("%s", self.summary(scores[0]))
        return True

    def summary(self, score: float) -> str:
        """One line: how many groups were skipped, why, and what it means for the trainer."""
        why = (
            "every rollout of a group scored the same, so GRPO has nothing to learn from it "
            "(ensure_scores_are_not_same)"
        )
        if self.skipped == self.groups:
            return (
                f"all {self.groups} group(s) so far skipped, not sent to the trainer: {why}; "
                f"the last scored {score:g} throughout. Does the policy solve any task? "
                f"(said again at most every {self.interval:g} s)"
            )
        return f"{self.skipped} of {self.groups} group(s) so far skipped: {why}"


class RegistrationWait(logging.Filter):
    """atroposlib's per-second "Waiting to register the env" as one line, repeated rarely.

    Installed on the root logger (atroposlib logs it with ``logging.warning``) while the env
    registers; every other record passes untouched.
    """

    def __init__(
        self,
        rollout_server_url: str,
        interval: float = NOTICE_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.url = rollout_server_url
        self.interval = interval
        self.clock = clock
        self._first: float | None = None
        self._said_at = 0.0

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(_WAITING):
            return True
        now = self.clock()
        if self._first is None:
            self._first = self._said_at = now
            status = message.removeprefix(_WAITING)
            record.msg = (
                f"waiting for a trainer: run-api at {self.url} answers {status!r} until one "
                "has registered (start it: `hermes-envgen trainer` offline); asking every "
                f"second, said again every {self.interval:g} s"
            )
        elif now - self._said_at >= self.interval:
            self._said_at = now
            record.msg = (
                f"still waiting for a trainer at {self.url} after {now - self._first:.0f} s"
            )
        else:
            return False
        record.args = ()
        return True


def lost_rollout_server(exc: BaseException) -> str | None:
    """What went wrong, when ``exc`` is run-api not answering (after atroposlib's retries)."""
    import aiohttp
    from tenacity import RetryError

    if isinstance(exc, RetryError) and exc.last_attempt.failed:
        exc = exc.last_attempt.exception() or exc
    if isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientResponseError):
        return str(exc).splitlines()[0] or type(exc).__name__
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return None
