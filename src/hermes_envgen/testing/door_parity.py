"""Does each door pay what Atropos pays? The gold, no-op and tampering replays through the
doors' own adapters.

Each door to another trainer runs the env's tasks its own way, and each is driven here as its
trainer drives it:

- ``trl``: the ``environment_factory`` class as GRPOTrainer uses it: the factory pickled and
  back, an environment per rollout made with no arguments (and pickled and back), ``reset(**row)``
  with the rows of the door's ``dataset``, the env's tools called as methods by name with
  keyword arguments, the reward from ``env_reward(completions=, environments=)``. TRL itself is
  not needed (the class is plain);
- ``openenv``: the OpenEnv server (``openenv_app``) on 127.0.0.1, driven over WebSocket by
  OpenEnv's own MCP client: ``reset(task=)``, the tools, ``finish(answer)`` whose step reward is
  the env's reward (needs ``openenv-core``);
- ``verifiers``: the door's HTTP app (``verifiers_app``) on 127.0.0.1, driven as the taskset
  ``hermes_envgen_verifiers`` drives it: the tasks and sessions over HTTP, the tools over MCP,
  the transcript scored over HTTP (needs the ``mcp`` SDK; verifiers itself is not needed).

Each built-in task's gold solution (or its scripted player) is replayed through every door and
by the env's own loop as ``process`` runs it (the stub server playing the scripted model); the
rewards must be equal. A no-op answer and tampering with the checks must earn no more than the
no-op threshold through any door. An env with turn hooks (a game, a simulated user) is played
through each door's reply tool, each reply of its scripted player sent through it. A door whose
library is missing is reported as unavailable, naming the extra; one that crashes, as that
error's first line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pickle
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_envgen.runtime.doors.session import REPLY_TOOL, turn_hooks
from hermes_envgen.runtime.errors import DoorUnavailable
from hermes_envgen.testing.policy import GIVE_UP_ANSWER, gold_turns
from hermes_envgen.testing.reward_checks import HOSTILE_REPLIES, TAMPER_COMMAND, gold_script
from hermes_envgen.testing.thresholds import NOOP_THRESHOLD

DOORS = ("trl", "openenv", "verifiers")
KINDS = ("gold", "noop", "tamper")
GIVE_UP = [{"content": GIVE_UP_ANSWER}]
TAMPER = [{"tool_calls": [{"name": "terminal", "arguments": {"command": TAMPER_COMMAND}}]}]
# An env without tools is tampered with through its replies, as check's replays do.
TAMPER_HOOKS = [{"content": reply} for reply in HOSTILE_REPLIES]
ROLLOUT_TIMEOUT = 300.0  # seconds one replay through a door may take
AT_ONCE = 4  # rollouts replayed at once through a door, as the replays of check run
IDLE_TIMEOUT = 600.0  # a door's session left open by a crash is reaped after it


@dataclass
class DoorReplays:
    """Per built-in task, the gold, no-op and tampering rewards through one door; or why the
    door could not be replayed (``unavailable``: its library is missing or it cannot serve the
    env; ``error``: it crashed)."""

    door: str
    gold: list[float] = field(default_factory=list)
    noop: list[float] = field(default_factory=list)
    tamper: list[float] = field(default_factory=list)
    unavailable: str | None = None
    error: str | None = None


@dataclass
class DoorParityReport:
    """Per built-in task: the gold reward through ``process``'s loop, and per door its
    replays (:class:`DoorReplays`)."""

    noop_threshold: float = NOOP_THRESHOLD
    atropos_gold: list[float] = field(default_factory=list)
    doors: dict[str, DoorReplays] = field(default_factory=dict)

    def gold_mismatches(self, door: str) -> list[str]:
        """The tasks whose gold solution ``door`` pays otherwise than the env's loop."""
        pairs = zip(self.atropos_gold, self.doors[door].gold)
        return [
            f"task {i}: process {a:g}, {door} {d:g}"
            for i, (a, d) in enumerate(pairs)
            if abs(a - d) > 1e-9
        ]

    def paid_for_nothing(self, door: str) -> list[str]:
        """The tasks where answering at once or tampering earned more than the threshold
        through ``door``."""
        replays = self.doors[door]
        found = []
        for kind, rewards in (("no-op", replays.noop), ("tampering", replays.tamper)):
            found += [
                f"task {i}: {kind} earned {r:g}"
                for i, r in enumerate(rewards)
                if r > self.noop_threshold
            ]
        return found

    def as_dict(self) -> dict[str, Any]:
        return {
            "atropos_gold": self.atropos_gold,
            "doors": {
                name: {
                    "gold": replays.gold,
                    "noop": replays.noop,
                    "tamper": replays.tamper,
                    "unavailable": replays.unavailable,
                    "error": replays.error,
                    "gold_mismatches": self.gold_mismatches(name),
                    "paid_for_nothing": self.paid_for_nothing(name),
                }
                for name, replays in self.doors.items()
            },
        }


def door_parity(
    env_cls: type[Any],
    samples: list[dict[str, Any]],
    tokenizer: str | Path,
    workdir: str | Path,
    *,
    noop_threshold: float = NOOP_THRESHOLD,
    atropos_gold: list[float] | None = None,
    doors: tuple[str, ...] = DOORS,
) -> DoorParityReport:
    """Replay every sample's gold solution through ``process``'s loop and through each of
    ``doors``; a no-op and tampering through each door (see the module's docstring), the
    doors at once. ``atropos_gold``: the loop's gold rewards, when the caller has them (check's
    replays, which run beside these and set them on the report once done)."""
    from hermes_envgen.testing.envs import build_env, offers_tools, offline_settings, with_prompts
    from hermes_envgen.testing.stub_server import StubServer

    report = DoorParityReport(noop_threshold=noop_threshold)
    workdir = Path(workdir)
    # Tampering on bwrap where it is installed, as the replays of check do.
    backend: dict[str, Any] = {"sandbox_backend": "bwrap"} if shutil.which("bwrap") else {}
    prompted = with_prompts(env_cls, samples)
    tamper = TAMPER + GIVE_UP if offers_tools(env_cls) else TAMPER_HOOKS
    plays = {
        "gold": [gold_turns(s) for s in prompted],
        "noop": [GIVE_UP for _ in samples],
        "tamper": [tamper for _ in samples],
    }
    # The stub finds each task's conversation by the prompt the env makes of it (a game's
    # tasks carry none); it plays the model for the loop and the judge for every door.
    with StubServer(gold_script(prompted)) as stub:
        if atropos_gold is not None:
            report.atropos_gold += atropos_gold
        else:
            env = build_env(env_cls, stub.base_url, tokenizer, workdir / "loop", **backend)
            report.atropos_gold += asyncio.run(_through_loop(env, samples))
        if turn_hooks(env_cls):  # a game, a simulated user: the model speaks through reply
            plays = {kind: [_through_reply(t) for t in turns] for kind, turns in plays.items()}

        def replay(door: str) -> DoorReplays:
            settings = offline_settings(env_cls, stub.base_url, tokenizer, workdir / door)
            settings |= backend
            replays = DoorReplays(door)
            try:
                rewards = REPLAYERS[door](env_cls, settings, samples, plays)
            except DoorUnavailable as exc:
                replays.unavailable = str(exc)
            except Exception as exc:  # the door crashed: its first line, as data
                replays.error = _first_line(exc)
            else:
                replays.gold, replays.noop, replays.tamper = (rewards[k] for k in KINDS)
            finally:
                _close_sessions(env_cls, settings)
            return replays

        with ThreadPoolExecutor(max_workers=len(doors) or 1) as pool:
            for replays in pool.map(replay, doors):
                report.doors[replays.door] = replays
    return report


async def _through_loop(env: Any, samples: list[Any]) -> list[float]:
    slots = asyncio.Semaphore(AT_ONCE)

    async def one(sample: Any) -> float:
        async with slots:
            return float((await env.run_agent(sample, split="eval")).reward)

    try:
        return list(await asyncio.gather(*(one(s) for s in samples)))
    finally:
        await env.sandboxes.close_all()


def _through_reply(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A replay of an env with turn hooks as a door's trainer plays it: each reply in words
    sent through the reply tool (the env answers it), no answer after the last."""
    return [
        turn
        if turn.get("tool_calls")
        else {
            "tool_calls": [
                {"name": REPLY_TOOL, "arguments": {"message": turn.get("content") or ""}}
            ]
        }
        for turn in turns
    ]


def _close_sessions(env_cls: type[Any], settings: dict[str, Any]) -> None:
    """Stop the door's sessions of the env in this process: every sandbox closed."""
    from hermes_envgen.runtime.doors import shared_sessions

    shared_sessions(env_cls, settings, IDLE_TIMEOUT).close()


def _first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text.splitlines()[0][:300]


def _calls(turn: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A turn's tool calls: name and arguments (a scripted turn may give them as JSON)."""
    found = []
    for call in turn.get("tool_calls") or []:
        arguments = call.get("arguments") or {}
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        found.append((str(call["name"]), dict(arguments)))
    return found


def _answer(turns: list[dict[str, Any]]) -> str:
    """The final answer of a replay: its last reply's text."""
    replies = [t for t in turns if not t.get("tool_calls")]
    return str(replies[-1].get("content") or "") if replies else ""


def _rows_for(rows: list[dict[str, Any]], samples: list[Any], door: str) -> list[dict[str, Any]]:
    """The door's own row (``prompt``, ``task``) of each sample, found by its task."""
    by_task = {_canonical(json.loads(row["task"])): row for row in rows}
    found = []
    for index, sample in enumerate(samples):
        row = by_task.get(_canonical(sample))
        if row is None:
            raise DoorUnavailable(f"the {door} door lists no task of built-in sample {index}")
        found.append(row)
    return found


def _canonical(task: Any) -> str:
    return json.dumps(task, sort_keys=True, default=str)


Plays = dict[str, list[list[dict[str, Any]]]]
Rewards = dict[str, list[float]]


# -- TRL: the environment_factory class, as GRPOTrainer calls it ------------------------------


def replay_trl(
    env_cls: type[Any], settings: dict[str, Any], samples: list[Any], plays: Plays
) -> Rewards:
    from hermes_envgen.runtime.doors import trl as door

    made = door.environment_factory(env_cls, idle_timeout=IDLE_TIMEOUT, **settings)
    factory = pickle.loads(pickle.dumps(made))  # TRL's async trainer pickles it
    thread = factory.thread
    rows = list(door.dataset(factory, "train"))
    if thread.run(thread.sessions.eval_tasks()):
        rows += list(door.dataset(factory, "eval"))
    rows = _rows_for(rows, samples, "trl")

    def rollout(row: dict[str, Any], turns: list[dict[str, Any]]) -> float:
        environment = pickle.loads(pickle.dumps(factory()))  # no arguments, picklable
        environment.reset(**row)
        completion = _trl_completion(environment, turns, door.RESERVED)
        (reward,) = door.env_reward(
            prompts=[row["prompt"]], completions=[completion], environments=[environment]
        )
        return float(reward)

    rewards: Rewards = {}
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        for kind in KINDS:
            futures = [pool.submit(rollout, r, t) for r, t in zip(rows, plays[kind])]
            rewards[kind] = [f.result(timeout=ROLLOUT_TIMEOUT) for f in futures]
    return rewards


def _trl_completion(
    environment: Any, turns: list[dict[str, Any]], reserved: frozenset[str]
) -> list[dict[str, Any]]:
    """TRL's completion of a rollout: each turn's reply, each tool call run as the
    environment's method of that name (keyword arguments), its result as a tool message."""
    tools = {
        name
        for name in vars(type(environment))
        if not name.startswith("_") and name not in reserved and name != "factory"
    }
    completion: list[dict[str, Any]] = []
    for turn in turns:
        calls = _calls(turn)
        reply: dict[str, Any] = {"role": "assistant", "content": turn.get("content", "")}
        if calls:
            reply["tool_calls"] = [
                {"type": "function", "function": {"name": name, "arguments": arguments}}
                for name, arguments in calls
            ]
        completion.append(reply)
        for name, arguments in calls:
            if name in tools:
                output = getattr(environment, name)(**arguments)
            else:  # TRL answers an unknown tool with an error the model reads
                output = f"Error: the tool {name!r} does not exist"
            completion.append({"role": "tool", "name": name, "content": output})
    return completion


# -- OpenEnv: its server on 127.0.0.1, driven by OpenEnv's own MCP client ---------------------


def replay_openenv(
    env_cls: type[Any], settings: dict[str, Any], samples: list[Any], plays: Plays
) -> Rewards:
    from hermes_envgen.runtime.doors import openenv as door
    from hermes_envgen.testing.serving import served

    app = door.openenv_app(
        env_cls, max_concurrent_envs=AT_ONCE, idle_timeout=IDLE_TIMEOUT, **settings
    )
    tasks = [json.dumps(sample) for sample in samples]
    from openenv.core.mcp_client import MCPToolClient

    with served(app) as url:
        return asyncio.run(
            _replay_all(_openenv_rollout, tasks, plays, lambda: MCPToolClient(base_url=url))
        )


async def _openenv_rollout(client: Any, task: str, turns: list[dict[str, Any]]) -> float:
    """One episode over the client's WebSocket session: reset to the task, the tool calls,
    ``finish`` with the answer; its step reward."""
    from openenv.core.env_server.mcp_types import CallToolAction

    await client.reset(task=task)
    for turn in turns:
        for name, arguments in _calls(turn):
            await client.call_tool(name, **arguments)
    finish = CallToolAction(tool_name="finish", arguments={"answer": _answer(turns)})
    finished = await client.step(finish)
    if not finished.done or finished.reward is None:
        raise RuntimeError(f"finish did not end the episode with a reward: {finished!r:.200}")
    return float(finished.reward)


# -- verifiers: the door's app on 127.0.0.1, driven over HTTP and MCP as the taskset does ---


def replay_verifiers(
    env_cls: type[Any], settings: dict[str, Any], samples: list[Any], plays: Plays
) -> Rewards:
    from hermes_envgen.runtime.doors import verifiers as door
    from hermes_envgen.testing.serving import served

    app = door.verifiers_app(env_cls, idle_timeout=IDLE_TIMEOUT, **settings)
    with served(app) as url:
        return asyncio.run(_verifiers_replays(url, samples, plays))


async def _verifiers_replays(url: str, samples: list[Any], plays: Plays) -> Rewards:
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=ROLLOUT_TIMEOUT) as http:
        rows = []
        for split in ("eval", "train"):
            listed = await http.get("/tasks", params={"split": split})
            listed.raise_for_status()
            rows += listed.json()["tasks"]
        tasks = [row["task"] for row in _rows_for(rows, samples, "verifiers")]
        return await _replay_all(
            lambda _, task, turns: _verifiers_rollout(http, url, task, turns), tasks, plays
        )


async def _verifiers_rollout(http: Any, url: str, task: str, turns: list[dict[str, Any]]) -> float:
    opened = await http.post("/sessions", json={"task": task, "split": "eval"})
    if opened.status_code != 200:
        raise RuntimeError(f"POST /sessions: {opened.status_code} {opened.text[:200]}")
    session = opened.json()["session"]
    messages = [*opened.json()["messages"]]
    for number, turn in enumerate(turns):
        calls = _calls(turn)
        if not calls:
            messages.append({"role": "assistant", "content": turn.get("content", "")})
            continue
        ids = [f"call_{number}_{k}" for k in range(len(calls))]
        messages.append(
            {
                "role": "assistant",
                "content": turn.get("content") or None,
                "tool_calls": [
                    {
                        "id": i,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                    for i, (name, arguments) in zip(ids, calls)
                ],
            }
        )
        outputs = await _mcp_calls(f"{url}/mcp?session={session}", calls)
        messages += [
            {"role": "tool", "tool_call_id": i, "content": output}
            for i, output in zip(ids, outputs)
        ]
    scored = await http.post(f"/sessions/{session}/score", json={"messages": messages})
    if scored.status_code != 200:
        raise RuntimeError(f"POST /sessions/.../score: {scored.status_code} {scored.text[:200]}")
    return float(scored.json()["reward"])


async def _mcp_calls(url: str, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The tool calls of one turn over MCP (streamable HTTP), as the taskset makes them."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    outputs = []
    async with (
        streamable_http_client(url) as streams,
        ClientSession(streams[0], streams[1]) as client,
    ):
        await client.initialize()
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            outputs.append("".join(getattr(part, "text", "") for part in result.content))
    return outputs


async def _replay_all(
    rollout: Callable[[Any, str, list[dict[str, Any]]], Any],
    tasks: list[str],
    plays: Plays,
    connect: Callable[[], Any] = contextlib.nullcontext,
) -> Rewards:
    """Every kind's replays through ``rollout`` (given its worker's connection, ``connect()``'s,
    kept from episode to episode as a trainer's client keeps it), a few workers at once, each
    replay bounded in time."""
    jobs = [(kind, i, task, turns) for kind in KINDS for i, (task, turns) in
            enumerate(zip(tasks, plays[kind]))]  # fmt: skip
    rewards: Rewards = {kind: [0.0] * len(tasks) for kind in KINDS}

    async def worker() -> None:
        async with connect() as connection:
            while jobs:
                kind, index, task, turns = jobs.pop(0)
                reward = await asyncio.wait_for(rollout(connection, task, turns), ROLLOUT_TIMEOUT)
                rewards[kind][index] = float(reward)

    await asyncio.gather(*(worker() for _ in range(min(AT_ONCE, len(jobs)))))
    return rewards


REPLAYERS: dict[str, Callable[[type[Any], dict[str, Any], list[Any], Plays], Rewards]] = {
    "trl": replay_trl,
    "openenv": replay_openenv,
    "verifiers": replay_verifiers,
}
