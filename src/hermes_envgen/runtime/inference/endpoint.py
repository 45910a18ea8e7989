"""Where a model server is, and which API the policy is sampled through there.

Which API (``inference_api``):

- ``chat``: OpenAI ``/v1/chat/completions``; the server parses tool calls (chat mode).
- ``completions``: token ids through OpenAI ``/v1/completions`` with a token-id prompt, as
  stock ``vllm serve`` offers it (``logprobs`` with ``return_tokens_as_token_ids``); tool calls
  are parsed here (token mode).
- ``generate``: token ids through ``/generate``: Atropos's vLLM server, or SGLang's native API
  (token mode).
- ``auto``: ``chat`` for ``server_type`` openai/trl, ``generate`` for sglang, and for vllm
  whichever the server has (``/generate`` present: Atropos's server; absent: stock vLLM).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

INFERENCE_APIS = ("auto", "chat", "completions", "generate")

# Said when serve or process runs in chat mode: what that data lacks, and for which trainer.
CHAT_MODE_DATA = (
    "chat mode: the groups carry no inference_logprobs (a chat API returns text, not the "
    "sampled token ids), and atroposlib's GRPO trainer (example_trainer, atropos-grpo) cannot "
    "train without them; for that trainer sample in token mode (provider vllm or sglang, "
    "inference_api completions or generate)"
)

# Seconds to set up a connection to a model server, whatever the request's timeout: a host
# gone dark (no refusal, packets dropped) then fails fast and another server is asked.
CONNECT_TIMEOUT = 10.0


@dataclass
class Endpoint:
    """One model server: where it is, the model it serves, how to reach it."""

    base_url: str
    model: str
    api_key: str = ""
    timeout: float = 300.0
    server_type: str = "openai"

    @property
    def root(self) -> str:
        """The server's root URL: ``base_url`` without a trailing ``/v1``."""
        url = self.base_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @classmethod
    def of(cls, config: Any) -> Endpoint:
        """The endpoint of an atroposlib ``APIServerConfig`` (or any object with its fields)."""
        return cls(
            base_url=(getattr(config, "base_url", None) or "").rstrip("/"),
            model=getattr(config, "model_name", None) or "default",
            api_key=getattr(config, "api_key", None) or "",
            timeout=float(getattr(config, "timeout", None) or 300.0),
            server_type=getattr(config, "server_type", None) or "openai",
        )


def resolve_api(api: str, server_type: str) -> str:
    """The API ``api`` stands for on a server of ``server_type`` (``auto`` may stay for vllm)."""
    if api not in INFERENCE_APIS:
        raise ValueError(f"inference_api must be one of {', '.join(INFERENCE_APIS)}, not {api!r}")
    if api != "auto":
        return api
    if server_type == "sglang":
        return "generate"
    if server_type == "vllm":
        return "auto"  # detected on first use: /generate present or not
    return "chat"


def is_token_api(api: str, server_type: str) -> bool:
    """True when rollouts are sampled token-in, token-out (token mode) with this setting."""
    return resolve_api(api, server_type) != "chat"
