"""Does an env's data make a model learn? GRPO steps of atroposlib's example trainer on CPU.

The whole loop of a real run, on one machine and with no download: a project made by
``hermes-envgen new``, given a task a tiny model can learn (answer in lowercase letters; the
reward is the share of the answer's characters that are), runs in ``serve`` mode against a
real run-api. Its policy is a tiny randomly initialised causal LM, sampled in token mode by a
server in this process that answers like stock vLLM's ``/v1/completions`` (token ids in,
token ids and logprobs out). Each batch run-api hands out goes through the example trainer's
batching and GRPO step (``hermes_envgen.testing.grpo``), which updates the very weights the
server samples from, so later groups come from the trained policy, as in Atropos's own loop.

Printed: the mean reward of each batch (the curve), the mean of the first and last quarter,
and the time per step (waiting for the batch, training on it). The reward rises when the data
is right; a curve that stays flat says the env, the trainer or their contract is broken.

    .venv/bin/python benchmarks/bench_learnability.py [--steps 40]

Needs torch (scripts/install-torch-cpu.sh). On a GPU machine the same loop trains a real
small instruct model: run ``atropos-grpo`` (atroposlib's trainer, which starts its own vLLM
server on port 9001) and the generated env's ``serve`` against it, as the project's README says.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import string
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

# torch lives apart from .venv (scripts/install-torch-cpu.sh puts it in .venv-torch/): found
# there, at the end of the path, before transformers looks for it.
sys.path.append(str(Path(__file__).resolve().parent.parent / ".venv-torch"))

import torch
from aiohttp import web
from transformers import AutoTokenizer

from hermes_envgen.errors import NoBatchInTime
from hermes_envgen.testing.grpo import ExampleTrainer
from hermes_envgen.testing.runner import offline_environment
from hermes_envgen.testing.tokenizer import build_offline_tokenizer
from hermes_envgen.testing.trainer import MinimalTrainer, RunApi, free_port

GROUP_SIZE = 8
BATCH_SIZE = 2 * GROUP_SIZE
MAX_TOKENS = 12

LEARN_ENV = '''
"""The generated env with a task a tiny model can learn: answer in lowercase letters."""

import string

from {package}.env import {cls}


class LowercaseEnv({cls}):
    name = "lowercase"

    @classmethod
    def config_init(cls):
        config, servers = super().config_init()
        config.enabled_toolsets = []
        config.max_agent_turns = 1
        config.system_prompt = "Answer in lowercase letters."
        return config, servers

    def format_prompt(self, item):
        return "Say something."

    async def compute_reward(self, item, result, ctx):
        text = result.final_response
        return sum(c in string.ascii_lowercase for c in text) / max(len(text), 1)


if __name__ == "__main__":
    LowercaseEnv.cli()
'''


class PolicyServer:
    """Stock vLLM's token-id ``/v1/completions`` over the trainer's model, in a thread."""

    def __init__(self, trainer: ExampleTrainer, lock: threading.Lock, eos: int) -> None:
        self.trainer, self.lock, self.eos = trainer, lock, eos
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def start(self) -> PolicyServer:
        self._thread.start()
        return self

    def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self._loop.run_forever()

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({})

    async def _complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        ids, logprobs, reason = self.sample(
            list(body["prompt"]), int(body.get("max_tokens") or MAX_TOKENS)
        )
        choice = {
            "index": 0,
            "text": "",
            "finish_reason": reason,
            "token_ids": ids,
            "logprobs": {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": logprobs},
        }
        return web.json_response({"object": "text_completion", "choices": [choice]})

    def sample(self, prompt: list[int], max_tokens: int) -> tuple[list[int], list[float], str]:
        """Sample at temperature 1 (what the trainer assumes); the logprob of each token."""
        ids: list[int] = []
        logprobs: list[float] = []
        with self.lock, torch.no_grad():
            model = self.trainer.model
            output = model(torch.tensor([prompt]), use_cache=True)
            for _ in range(max_tokens):
                distribution = torch.log_softmax(output.logits[0, -1].float(), dim=-1)
                token = int(torch.multinomial(distribution.exp(), 1))
                ids.append(token)
                logprobs.append(float(distribution[token]))
                if token == self.eos:
                    return ids, logprobs, "stop"
                output = model(
                    torch.tensor([[token]]), past_key_values=output.past_key_values, use_cache=True
                )
        return ids, logprobs, "length"


def make_env(work: Path) -> Path:
    """A project from ``hermes-envgen new``, and the learnable env beside it."""
    subprocess.run(
        [sys.executable, "-m", "hermes_envgen", "new", "learn-env", "-o", str(work), "--defaults"],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    project = work / "learn-env"
    entry = project / "learn.py"
    entry.write_text(textwrap.dedent(LEARN_ENV).format(package="learn_env", cls="LearnEnv"))
    return entry


def next_batch(pulling: MinimalTrainer, env: subprocess.Popen, log: Path) -> list[dict]:
    """The next batch, while the env runs (up to 10 minutes)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if env.poll() is not None:
            sys.exit(f"the env exited with {env.returncode}:\n{log.read_text()[-2000:]}")
        try:
            return pulling.next_batch(timeout=5)
        except NoBatchInTime:
            continue
    sys.exit(f"no batch in 10 minutes; the env's log: {log}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=3e-3)
    options = parser.parse_args()
    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="hermes-envgen-learn-"))
    tokenizer_dir = build_offline_tokenizer(work / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    entry = make_env(work)
    trainer = ExampleTrainer(len(tokenizer), lr=options.lr, micro_batch=GROUP_SIZE)
    lock = threading.Lock()
    policy = PolicyServer(trainer, lock, eos=tokenizer.convert_tokens_to_ids("<|im_end|>"))
    policy.start()

    curve: list[float] = []
    waits: list[float] = []
    steps: list[float] = []
    with RunApi(log=work / "run-api.log") as api:
        pulling = MinimalTrainer(api.url, batch_size=BATCH_SIZE, num_steps=options.steps)
        pulling.register()
        command = [
            sys.executable, str(entry), "serve",
            "--openai.base_url", f"http://127.0.0.1:{policy.port}/v1",
            "--openai.model_name", "tiny", "--openai.server_type", "vllm",
            "--openai.health_check", "false",
            "--env.inference_api", "completions",
            "--env.tokenizer_name", str(tokenizer_dir),
            "--env.rollout_server_url", api.url,
            "--env.group_size", str(GROUP_SIZE),
            "--env.max_tokens_per_turn", str(MAX_TOKENS),
            "--env.total_steps", str(options.steps),
            "--env.steps_per_eval", "100000",
            "--env.sandbox_root", str(work / "sandboxes"),
        ]  # fmt: skip
        log = open(work / "env.log", "w")  # noqa: SIM115
        environment = offline_environment() | {"PYTHONPATH": str(entry.parent / "src")}
        env = subprocess.Popen(
            command, cwd=entry.parent, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=environment,
        )  # fmt: skip
        try:
            for step in range(1, options.steps + 1):
                started = time.monotonic()
                batch = next_batch(pulling, env, work / "env.log")
                waited = time.monotonic() - started
                scores = [s for group in batch for s in group["scores"]]
                with lock:
                    started = time.monotonic()
                    report = trainer.step(batch)
                    trained = time.monotonic() - started
                curve.append(statistics.fmean(scores))
                waits.append(waited)
                steps.append(trained)
                loss = report.metrics["loss"]
                print(
                    f"step {step:3d}  mean reward {curve[-1]:.3f}  loss {loss:+.4f}"
                    f"  batch wait {waited:5.2f} s  train {trained:5.2f} s",
                    flush=True,
                )
        finally:
            env.terminate()
            try:
                env.wait(60)
            except subprocess.TimeoutExpired:
                env.kill()
            log.close()

    quarter = max(1, len(curve) // 4)
    first, last = statistics.fmean(curve[:quarter]), statistics.fmean(curve[-quarter:])
    print()
    print(f"reward, first {quarter} steps: {first:.3f}; last {quarter} steps: {last:.3f}")
    print(
        f"per step: {statistics.median(waits):.2f} s waiting for the batch, "
        f"{statistics.median(steps):.2f} s training on it (medians; {BATCH_SIZE} rollouts a batch)"
    )
    print(f"a random answer is {len(string.ascii_lowercase)}/{len(tokenizer)} lowercase letters")


if __name__ == "__main__":
    main()
