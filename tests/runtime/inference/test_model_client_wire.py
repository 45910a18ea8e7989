"""What a chat request puts on the wire, now that it is posted without the SDK's create():
the body as given, extra_body merged into it, extra headers and the key sent; the reply
parsed as a ChatCompletion. And over the client's several pools, connections are still kept
alive: a second round of requests opens none."""

from __future__ import annotations

import asyncio

from aiohttp import web

from hermes_envgen.runtime.inference.client import ModelClient
from hermes_envgen.runtime.inference.endpoint import Endpoint

REPLY = {
    "id": "c1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "hi"},
        }
    ],
}


async def serve(seen: list[dict], peers: set) -> tuple[web.AppRunner, str]:
    async def chat(request: web.Request) -> web.Response:
        seen.append({"body": await request.json(), "headers": dict(request.headers)})
        peers.add(request.transport.get_extra_info("peername"))
        await asyncio.sleep(0.05)  # the requests overlap: each holds its connection
        return web.json_response(REPLY)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/v1"


def test_a_chat_request_carries_its_body_extras_and_key_and_comes_back_parsed():
    async def main() -> None:
        seen: list[dict] = []
        runner, url = await serve(seen, set())
        try:
            client = ModelClient([Endpoint(url, "the-model", api_key="sk-wire")], retries=0)
            messages = [{"role": "user", "content": "hello"}]
            tools = [{"type": "function", "function": {"name": "t", "parameters": {}}}]
            reply = await client.chat_completion(
                messages=messages,
                tools=tools,
                temperature=0.5,
                extra_body={"top_k": 7},
                extra_headers={"X-Trace": "abc"},
            )
        finally:
            await runner.cleanup()
        assert reply.choices[0].message.content == "hi"
        (request,) = seen
        assert request["body"] == {
            "model": "the-model",
            "messages": messages,
            "tools": tools,
            "temperature": 0.5,
            "top_k": 7,
        }
        headers = {name.lower(): value for name, value in request["headers"].items()}
        assert headers["authorization"] == "Bearer sk-wire"
        assert headers["x-trace"] == "abc"

    asyncio.run(main())


def test_connections_are_kept_alive_across_the_clients_pools():
    async def main() -> set:
        seen: list[dict] = []
        peers: set = set()
        runner, url = await serve(seen, peers)
        try:
            client = ModelClient([Endpoint(url, "m")], retries=0)
            ask = [{"role": "user", "content": "x"}]
            for _ in range(2):  # the second round reuses the first's connections
                await asyncio.gather(*(client.chat_completion(messages=ask) for _ in range(32)))
        finally:
            await runner.cleanup()
        assert len(seen) == 64
        return peers

    peers = asyncio.run(main())
    # 32 at once need 32 connections; kept alive, the second round opened no more
    assert len(peers) == 32
