"""A minimal chat server client for running HermesAgentLoop without atroposlib's ServerManager."""

from __future__ import annotations

from typing import Any


class DirectChatServer:
    """Sends chat requests straight to an OpenAI-compatible URL (no retries of its own)."""

    def __init__(self, base_url: str, model: str = "stub-model", api_key: str = "EMPTY") -> None:
        import openai

        self.model = model
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)

    async def chat_completion(self, split: str = "train", **kwargs: Any) -> Any:
        return await self.client.chat.completions.create(model=self.model, **kwargs)

    async def close(self) -> None:
        await self.client.close()
