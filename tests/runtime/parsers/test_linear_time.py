"""Every parser reads 1 MB of adversarial input, with a tool schema to type values, fast."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

from hermes_envgen.runtime.parsers import get_parser, list_parsers

# CPU seconds, so other processes on the shared machine do not count; quadratic takes minutes.
LIMIT_SECONDS = 2.0
SIZE = 1_000_000
BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_parsers.py"


def _load_bench():
    """Import the benchmark script, which defines the adversarial inputs."""
    spec = importlib.util.spec_from_file_location("bench_parsers", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_bench()
NAMES = [name for name, fmt in list_parsers() if not fmt.startswith("alias")]


def _inputs(name: str) -> dict[str, str]:
    """The benchmark's inputs plus dense repeats of truncated call prefixes."""
    inputs = bench.adversarial_inputs(name, SIZE)
    prefix, suffix, sep = bench.TEMPLATES[name]
    call = prefix + '{"k": "v"}' + suffix + sep
    for cut in (len(prefix) // 3, len(prefix) - 1, len(prefix) + 3, len(call) - 2):
        unit = call[: max(cut, 1)]
        inputs[f"repeated {unit[-12:]!r}"] = (unit * (SIZE // len(unit) + 1))[:SIZE]
    inputs["glm names"] = ("<tool_call>f\n" * (SIZE // 13 + 1))[:SIZE]
    # Markdown code and prose naming the tags: the quoted-markup checks must stay linear.
    for unit in ("```\n<tool_call>", "`<tool_call>`", "<tool_call> and ", "<function=f> x "):
        inputs[f"quoted {unit!r}"] = (unit * (SIZE // len(unit) + 1))[:SIZE]
    inputs["open fence, then calls"] = "```\n" + (call * (SIZE // len(call) + 1))[:SIZE]
    # Harmony: many messages, many headers, headers without a body.
    for unit in (
        "<|channel|>analysis<|message|>x<|end|><|start|>assistant",
        "<|start|>assistant<|channel|>final",
        "<|channel|>commentary to=functions.f<|message|>",
        "assistant " * 30 + "<|message|>",
    ):
        inputs[f"harmony {unit[:24]!r}"] = (unit * (SIZE // len(unit) + 1))[:SIZE]
    return inputs


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_one_megabyte_adversarial_inputs_parse_fast(name: str) -> None:
    parser = get_parser(name)
    slow = {}
    for kind, text in _inputs(name).items():
        start = time.process_time()
        _, calls = parser.parse(text, bench.TOOLS)
        elapsed = time.process_time() - start
        assert calls is None or isinstance(calls, list)
        if elapsed > LIMIT_SECONDS:
            slow[kind] = round(elapsed, 2)
    assert not slow, f"{name} too slow on 1 MB inputs: {slow}"


@pytest.mark.parametrize("name", NAMES)
def test_huge_valid_call_is_found(name: str) -> None:
    text = bench.adversarial_inputs(name, SIZE)["huge call"]
    _, calls = get_parser(name).parse(text, bench.TOOLS)
    assert calls is not None and len(calls) == 1
