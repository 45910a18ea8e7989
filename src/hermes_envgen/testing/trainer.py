"""Atropos's API server (``run-api``) on loopback and a minimal trainer that pulls batches.

Enough of a training loop to prove that an env in ``serve`` mode delivers valid groups: the
trainer registers, asks for a first batch (which lets envs register), then polls for batches.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from hermes_envgen.errors import NoBatchInTime, TrainerError
from hermes_envgen.runtime.env.delivery import GROUP_ID_KEY


def pull_batches(
    *,
    port: int,
    host: str,
    batch_size: int,
    steps: int,
    timeout: float,
    say: Callable[[str], None],
    warn: Callable[[str], None],
) -> None:
    """The ``trainer`` command: run-api, and a minimal trainer that pulls ``steps`` batches,
    saying what each held and warning of what a GRPO trainer would make of it."""
    from hermes_envgen.testing.trainer_contract import summary, trainer_problems

    with RunApi(port=port, host=host) as api:
        pulling = MinimalTrainer(api.url, batch_size=batch_size, num_steps=steps)
        pulling.register()
        # Workers on other machines need an address of this one, not the loopback.
        url = api.url if host != "0.0.0.0" else f"http://{socket.getfqdn()}:{port}"
        say(f"run-api on {url}: start an env with")
        say(f"  python -m <package> serve --env.rollout_server_url {url}")
        for step in range(1, steps + 1):
            batch = pulling.next_batch(timeout)
            scores = [score for group in batch for score in group["scores"]]
            mean = sum(scores) / len(scores) if scores else 0.0
            say(
                f"batch {step}/{steps}: {len(batch)} groups, {len(scores)} rollouts, "
                f"mean score {mean:.2f}"
            )
            verdict = trainer_problems(batch)  # what a GRPO trainer would make of it
            if verdict.problems or verdict.warnings:
                warn(f"  warning: {summary(verdict)}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RunApi:
    """``run-api`` in a subprocess; a context manager that stops it.

    ``host`` is the address it listens on: 127.0.0.1 by default, the trainer node's address
    (or 0.0.0.0) when env workers on other machines post to it. ``url`` is where this process
    reaches it: ``host``, or 127.0.0.1 for a wildcard bind.
    """

    def __init__(
        self, port: int | None = None, log: Path | None = None, host: str = "127.0.0.1"
    ) -> None:
        self.host = host
        self.port = port or free_port()
        here = "127.0.0.1" if host in ("0.0.0.0", "") else host
        self.url = f"http://{here}:{self.port}"
        self._log = log
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> RunApi:
        script = "from atroposlib.cli.run_api import main; main()"
        output = open(self._log, "w") if self._log else subprocess.DEVNULL
        self._process = subprocess.Popen(
            [sys.executable, "-c", script, "--host", self.host, "--port", str(self.port)],
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise TrainerError(
                    f"run-api exited with {self._process.returncode} (port {self.port})"
                )
            try:
                _get(self.url + "/")
                return self
            except TrainerError:
                time.sleep(0.2)
        self.__exit__()
        raise TrainerError(f"run-api did not start within 60 s (port {self.port})")

    def __exit__(self, *exc: object) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


PADDING_KEY = "padding"  # in the group_overrides of a group drain() adds to fill a batch


class MinimalTrainer:
    """Registers with run-api like a trainer and pulls batches of scored groups."""

    def __init__(self, api_url: str, batch_size: int, num_steps: int = 10) -> None:
        self.api_url = api_url
        self.batch_size = batch_size
        self.num_steps = num_steps
        self.batches: list[list[dict]] = []  # every batch received, in order

    def register(self) -> None:
        _post(
            self.api_url + "/register",
            {
                "wandb_group": "hermes-envgen-test",
                "wandb_project": "hermes-envgen-test",
                "batch_size": self.batch_size,
                "max_token_len": 1_000_000,
                "checkpoint_dir": "",
                "save_checkpoint_interval": -1,
                "starting_step": 0,
                "num_steps": self.num_steps,
            },
        )
        _get(self.api_url + "/batch")  # the first call starts the run, so envs may register

    def next_batch(self, timeout: float, poll: float = 0.5) -> list[dict]:
        """The next batch (a list of groups); NoBatchInTime if none arrives in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            batch = _get(self.api_url + "/batch").get("batch")
            if batch:
                self.batches.append(batch)
                return batch
            time.sleep(poll)
        raise NoBatchInTime(f"no batch within {timeout:g} s: {self._why_no_batch()}")

    def _why_no_batch(self) -> str:
        """What run-api holds, in words: no env yet, or too few groups for a batch."""
        try:
            queued = self.status()["queue_size"]
            registered = self.env_registered(0)
        except (TrainerError, KeyError) as exc:
            return str(exc)
        if not registered:
            return (
                f"no env has registered with run-api (start one with --env.rollout_server_url "
                f"{self.api_url})"
            )
        return (
            f"run-api holds {queued} group(s), not yet a batch of {self.batch_size} rollouts "
            "(serve drops groups whose scores are all equal, and says so)"
        )

    def drain(self, group_size: int) -> list[dict]:
        """After the run, every group run-api still holds, the last batch padded to full size.

        run-api hands out full batches only, so groups queued when a trainer stops are never
        trained. Here the rest below a batch is completed with groups of ``group_size`` empty
        sequences marked ``group_overrides["padding"]``, which :meth:`groups` leaves out.
        """
        drained: list[dict] = []
        padded = 0  # padding groups since the last batch
        while True:
            batch = _get(self.api_url + "/batch").get("batch")
            if batch:
                self.batches.append(batch)
                drained.extend(g for g in batch if not _is_padding(g))
                padded = 0
            elif self.status()["queue_size"] == 0:
                return drained
            elif padded * group_size >= self.batch_size:
                raise TrainerError(f"run-api makes no batch of its queue padded with {padded}")
            else:
                _post(self.api_url + "/scored_data", _padding_group(group_size))
                padded += 1

    def status(self) -> dict:
        """run-api's ``current_step`` and ``queue_size`` (groups waiting for a batch)."""
        return _get(self.api_url + "/status")

    def env_registered(self, env_id: int) -> bool:
        """Whether run-api has an env with this id (ids count registrations from 0)."""
        try:
            with urllib.request.urlopen(self._env_status(env_id), timeout=10):
                return True
        except urllib.error.HTTPError:  # run-api answers an unknown id with an error
            return False

    def env_share(self, env_id: int) -> float:
        """The share of each batch run-api gives env ``env_id``: its weight over the weights
        of the envs it counts as connected."""
        return float(_call(self._env_status(env_id))["env_weight"])

    def _env_status(self, env_id: int) -> urllib.request.Request:
        return urllib.request.Request(
            self.api_url + "/status-env",
            data=json.dumps({"env_id": env_id}).encode(),
            headers={"Content-Type": "application/json"},
            method="GET",
        )

    def groups(self) -> list[dict]:
        """Every group received so far, in order, each once (without drain's padding).

        A worker of this version posts each group at most once (one whose answer was lost is
        recorded as ``answer_lost``, not sent again), but other senders may repeat one:
        repeats of a ``group_id`` are left out (and counted by :meth:`repeats`), as any
        trainer fed by several workers should do.
        """
        return self._unique_groups()[0]

    def repeats(self) -> int:
        """How many groups arrived again after their first time (same ``group_id``)."""
        return self._unique_groups()[1]

    def _unique_groups(self) -> tuple[list[dict], int]:
        unique, seen, repeats = [], set(), 0
        for group in (g for batch in self.batches for g in batch if not _is_padding(g)):
            group_id = (group.get("group_overrides") or {}).get(GROUP_ID_KEY)
            if group_id is not None and group_id in seen:
                repeats += 1
                continue
            seen.add(group_id)
            unique.append(group)
        return unique, repeats


def _padding_group(size: int) -> dict:
    return {
        "tokens": [[0]] * size,
        "masks": [[-100]] * size,
        "scores": [0.0] * size,
        "group_overrides": {PADDING_KEY: True},
    }


def _is_padding(group: dict) -> bool:
    return bool((group.get("group_overrides") or {}).get(PADDING_KEY))


def _get(url: str) -> dict:
    return _call(urllib.request.Request(url))


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    return _call(request)


def _call(request: urllib.request.Request) -> dict:
    """run-api's JSON answer; TrainerError naming the URL when it cannot be had."""
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except (OSError, ValueError) as exc:
        raise TrainerError(f"run-api at {request.full_url}: {exc}") from None
