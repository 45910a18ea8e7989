"""Benchmark every tool-call parser on adversarial inputs and check that time grows linearly.

Run ``python benchmarks/bench_parsers.py``. For each parser and input kind it prints the
time per MB at 10 KB, 100 KB and 1 MB, and the 1 MB / 100 KB time ratio (about 10 when
linear). It exits with status 1 if any single parse takes over 1 s or a ratio exceeds 20.
Sizes are in characters; ratios are only judged when the 1 MB parse takes at least 5 ms,
since below that timer noise and fixed costs dominate (a quadratic blow-up never stays there).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable

from hermes_envgen.runtime.parsers import ParseResult, get_parser, list_parsers

SIZES = (10_000, 100_000, 1_000_000)
MAX_SECONDS = 1.0
MAX_RATIO = 20.0
RATIO_FLOOR_SECONDS = 0.005

_DS_SECTION = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
_KIMI_SECTION = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")

# Per parser: text before a call's argument object, text after it, separator between calls.
TEMPLATES: dict[str, tuple[str, str, str]] = {
    "hermes": ('<tool_call>\n{"name": "f", "arguments": ', "}\n</tool_call>", "\n"),
    "longcat": ('<longcat_tool_call>{"name": "f", "arguments": ', "}</longcat_tool_call>", ""),
    "mistral": ("[TOOL_CALLS]f", "", ""),
    "llama3_json": ('{"name": "f", "parameters": ', "}", "; "),
    "qwen3_coder": (
        "<tool_call>\n<function=f>\n<parameter=a>\n",
        "\n</parameter>\n</function>\n</tool_call>",
        "\n",
    ),
    "deepseek_v3": (
        _DS_SECTION[0] + "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n",
        "\n```<｜tool▁call▁end｜>" + _DS_SECTION[1],
        "",
    ),
    "deepseek_v3_1": (
        _DS_SECTION[0] + "<｜tool▁call▁begin｜>f<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>" + _DS_SECTION[1],
        "",
    ),
    "kimi_k2": (
        _KIMI_SECTION[0] + "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>",
        "<|tool_call_end|>" + _KIMI_SECTION[1],
        "",
    ),
    "glm45": (
        "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>",
        "</arg_value>\n</tool_call>",
        "\n",
    ),
    "glm47": ("<tool_call>f<arg_key>a</arg_key><arg_value>", "</arg_value></tool_call>", ""),
    "gpt_oss": (
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>",
        "<|call|>",
        "<|start|>assistant",
    ),
}
# The tool every input calls, offered to every parse: "a" may be an object, an array or a
# number, so raw-text values (Qwen3-Coder, GLM) go through every typing path, Python
# literals (ast.literal_eval) included.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"anyOf": [{"type": "object"}, {"type": "array"}, {"type": "number"}]}
                },
            },
        },
    }
]
# Tags a raw-text value balances, nested inside one value to load that scan.
NESTED_OPEN = "<parameter=a>\n<arg_value>"
NESTED_CLOSE = "</arg_value>\n</parameter>\n"

TEMPLATES["qwen"] = TEMPLATES["hermes"]
TEMPLATES["llama4_json"] = TEMPLATES["llama3_json"]
TEMPLATES["auto"] = TEMPLATES["hermes"]
TEMPLATES["harmony"] = TEMPLATES["gpt_oss"]

# Every marker of every format, plus JSON openers, for the "many markers" input.
ALL_MARKERS = (
    "<tool_call></tool_call><longcat_tool_call></longcat_tool_call><function=f><parameter=a>"
    "</parameter></function><arg_key>a</arg_key><arg_value>[TOOL_CALLS][ARGS]<|python_tag|>"
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜><｜tool▁call▁end｜>"
    "<｜tool▁calls▁end｜><|tool_calls_section_begin|><|tool_call_begin|>"
    '<|tool_call_argument_begin|><|tool_call_end|><|tool_calls_section_end|>{"a": [;\n'
    "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>"
    "<|end|><|call|><|return|>```\n`"
)


def _repeat(unit: str, size: int) -> str:
    """``unit`` repeated to exactly ``size`` characters."""
    return (unit * (size // len(unit) + 1))[:size]


def adversarial_inputs(parser: str, size: int) -> dict[str, str]:
    """Inputs of about ``size`` characters meant to make ``parser`` slow, by kind."""
    prefix, suffix, sep = TEMPLATES[parser]
    small_call = prefix + '{"city": "Paris", "n": 1}' + suffix + sep
    body = size - len(prefix) - len(suffix) - 20
    # One valid call whose single argument is a huge string full of escapes and brackets.
    blob = _repeat('quote " brace } { [ ] newline \n tab \t back \\ ü 世 ; ', body // 2)
    huge = prefix + json.dumps({"s": blob}, ensure_ascii=False) + suffix
    depth = body // (len(NESTED_OPEN) + len(NESTED_CLOSE))
    literal_call = prefix + "{'k': (1, 2.5, None)}" + suffix + sep
    return {
        "unclosed tags": _repeat(prefix + '{"a": "}', size),
        "nested braces": prefix + _repeat('{"a": [', size - len(prefix)),
        "many markers": _repeat(ALL_MARKERS, size),
        "many calls": small_call * max(1, size // len(small_call)),  # whole calls only
        "huge call": huge,
        "nested tags": prefix + NESTED_OPEN * depth + NESTED_CLOSE * depth + suffix,
        # Python literals, not JSON: typed through ast.literal_eval.
        "tuple literal": prefix + "[" + _repeat("(1,), ", body - 2) + "1]" + suffix,
        "many literals": literal_call * max(1, size // len(literal_call)),
    }


# Kinds made of valid calls: the benchmark is void if the parser finds none there.
VALID_KINDS = ("many calls", "huge call")


def time_parse(parse: Callable[[str], ParseResult], text: str, repeats: int) -> tuple[float, int]:
    """Best-of-``repeats`` CPU time of one parse in seconds, and how many calls it found.

    CPU time, not wall time: on a shared machine other processes' load would otherwise
    show up as non-linearity (a parse is single-threaded, so the two agree when idle).
    """
    best = float("inf")
    found = 0
    for _ in range(repeats):
        gc.collect()
        start = time.process_time()
        _, calls = parse(text)
        best = min(best, time.process_time() - start)
        found = len(calls or ())
    return best, found


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, return the process exit status."""
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--parser", action="append", help="only these parsers (repeatable)")
    args = cli.parse_args(argv)
    names = args.parser or [name for name, fmt in list_parsers() if not fmt.startswith("alias")]
    header = f"{'parser':<14} {'input':<14}" + "".join(
        f" {f'ms/MB@{s // 1000}K':>13}" for s in SIZES
    )
    print(header + f" {'1M/100K':>8}  worst")
    print("-" * (len(header) + 17))
    failures: list[str] = []
    for name in names:
        parser = get_parser(name)

        def parse(text: str, parser=parser) -> ParseResult:
            return parser.parse(text, TOOLS)

        for kind in adversarial_inputs(name, SIZES[0]):
            times, per_mb = [], []
            for size in SIZES:
                text = adversarial_inputs(name, size)[kind]
                seconds, found = time_parse(parse, text, 3 if size >= 1_000_000 else 5)
                times.append(seconds)
                per_mb.append(seconds / (len(text) / 1e6))
                if kind in VALID_KINDS and not found:
                    failures.append(f"{name}/{kind}: no call found at {size} characters")
            ratio = times[2] / times[1] if times[1] > 0 else float("inf")
            flag = ""
            if max(times) > MAX_SECONDS:
                flag = "SLOW"
                failures.append(f"{name}/{kind}: {max(times):.2f} s")
            elif times[2] >= RATIO_FLOOR_SECONDS and ratio > MAX_RATIO:
                flag = "NONLINEAR"
                failures.append(f"{name}/{kind}: ratio {ratio:.1f}")
            cells = "".join(f" {1000 * t:>13.1f}" for t in per_mb)
            print(f"{name:<14} {kind:<14}{cells} {ratio:>8.1f}  {1000 * max(times):.0f} ms {flag}")
    if failures:
        print("\nFAILED: " + "; ".join(failures))
        return 1
    print(f"\nOK: every parse under {MAX_SECONDS:.0f} s, every judged ratio under {MAX_RATIO:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
