"""What serve mode says while it cannot feed the trainer: once with why, then rarely."""

from __future__ import annotations

import logging

from hermes_envgen.runtime.env.serve_log import EqualScoreSkips, RegistrationWait


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_equal_scores_are_said_once_then_at_most_every_interval(caplog):
    clock = Clock()
    skips = EqualScoreSkips(interval=60, clock=clock)
    with caplog.at_level(logging.WARNING, logger="hermes_envgen.runtime.env.serve_log"):
        for _ in range(500):  # a group a tenth of a second, for 50 s
            assert skips.offered([0.0, 0.0])
            clock.now += 0.1
        assert len(caplog.records) == 1
        clock.now = 61
        assert not skips.offered([1.0, 0.0])  # a group that differs is kept, and counted
        assert skips.offered([1.0, 1.0])
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("all 1 group(s) so far skipped, not sent to the trainer")
    assert "scored 0 throughout" in lines[0] and "every 60 s" in lines[0]
    assert lines[1].startswith("501 of 502 group(s) so far skipped: every rollout of a group")


def test_waiting_to_register_is_one_line_then_a_rare_reminder():
    clock = Clock()
    waiting = RegistrationWait("http://127.0.0.1:8000", interval=60, clock=clock)

    def record() -> logging.LogRecord:
        return logging.LogRecord(
            "root", logging.WARNING, __file__, 1,
            "Waiting to register the env due to status %s", ("wait for trainer to start",), None,
        )  # fmt: skip

    said = []
    for _ in range(150):  # atroposlib's once a second
        entry = record()
        if waiting.filter(entry):
            said.append(entry.getMessage())
        clock.now += 1
    assert len(said) == 3  # at 0, 60 and 120 s
    assert said[0].startswith("waiting for a trainer: run-api at http://127.0.0.1:8000 answers")
    assert said[1] == "still waiting for a trainer at http://127.0.0.1:8000 after 60 s"
    other = logging.LogRecord("root", logging.WARNING, __file__, 1, "anything else", (), None)
    assert waiting.filter(other) and other.getMessage() == "anything else"
