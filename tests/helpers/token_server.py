"""Token mode's model servers (atroposlib's vLLM and SGLang server classes over the stub) and
the scripts the stub answers them with."""

from __future__ import annotations

from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.sglang_server import SGLangServer
from atroposlib.envs.server_handling.vllm_server import VLLMServer

END = "<|im_end|>"  # the offline tokenizer's end-of-turn (and eos) token


GREETING_SCRIPT = {
    "conversations": [
        {
            "match": "greeting",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "terminal", "arguments": {"command": "echo hello > greeting.txt"}}
                    ]
                },
                {"content": "Wrote it.", "reasoning": "The file is there."},
            ],
        },
        {
            "match": "greeting",
            "turns": [
                {
                    "tool_calls": [
                        {
                            "name": "write_file",
                            "arguments": {"path": "greeting.txt", "content": "x"},
                        }
                    ]
                },
                {"content": "Done."},
            ],
        },
    ]
}


def token_server(kind: str, base_url: str, tokenizer) -> VLLMServer | SGLangServer:
    """atroposlib's own server class for ``kind``, pointed at the stub."""
    config = APIServerConfig(
        base_url=base_url,
        model_name="stub-model",
        api_key="EMPTY",
        tokenizer_name=str(tokenizer),
        health_check=False,
        server_type=kind,
    )
    return (VLLMServer if kind == "vllm" else SGLangServer)(config)
