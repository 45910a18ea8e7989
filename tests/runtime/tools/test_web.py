"""The ``web`` toolset: the offline corpus backend (BM25), the hosted backend (Tavily's API,
played by a real HTTP server on 127.0.0.1), and the fetcher's refusals."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web
from helpers import HELPERS

from hermes_envgen.runtime.errors import EnvConfigError, ToolExecutionError
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.sandbox import SandboxManager
from hermes_envgen.runtime.tools import REGISTRY
from hermes_envgen.runtime.tools.web import WebSettings, WebToolset, html_text, load_corpus

pytestmark = pytest.mark.timeout(120)

PAGES = {
    "cats.md": "# Cats\nCats sleep sixteen hours a day and purr when content.",
    "dogs.html": (
        "<html><head><title>Dogs</title><script>var secret = 1;</script>"
        "<style>p {color: red}</style></head><body><h1>Dogs</h1><p>Dogs bark at the "
        "postman.</p><p>They fetch sticks &amp; balls.</p></body></html>"
    ),
    "notes/rivers.txt": "Rivers\nThe Danube flows through ten countries into the Black Sea.",
    "image.png": "not a page",
}


def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    for name, text in PAGES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def context(tmp_path: Path, **settings) -> ToolContext:
    toolset = WebToolset(WebSettings(**settings))
    manager = SandboxManager()
    return ToolContext("web-task", manager, services={"web": toolset})


def run(coroutine):
    return asyncio.run(coroutine)


def test_web_tools_take_no_sandbox():
    for name in ("web_search", "web_fetch"):
        tool = REGISTRY.get(name)
        assert tool.toolset == "web" and tool.injected == {"context"}


def test_the_corpus_is_searched_by_bm25_and_fetched_offline(tmp_path):
    async def scenario():
        ctx = context(tmp_path, corpus=str(corpus(tmp_path)))
        found = json.loads(await ctx.call_tool("web_search", {"query": "why do dogs bark"}))
        assert found[0]["url"] == "corpus://dogs.html" and found[0]["title"] == "Dogs"
        assert "secret" not in found[0]["snippet"]  # scripts are not text
        rivers = json.loads(await ctx.call_tool("web_search", {"query": "Danube Black Sea"}))
        assert [r["url"] for r in rivers] == ["corpus://notes/rivers.txt"]
        assert await ctx.call_tool("web_search", {"query": "quasar"}) == "no results"
        many = json.loads(
            await ctx.call_tool("web_search", {"query": "cats dogs rivers", "max_results": 2})
        )
        assert len(many) == 2
        page = await ctx.call_tool("web_fetch", {"url": "corpus://dogs.html"})
        assert page.startswith("Title: Dogs\nURL: corpus://dogs.html\n\n")
        assert "They fetch sticks & balls." in page and "color: red" not in page
        with pytest.raises(ToolExecutionError, match="not in the offline corpus"):
            await ctx.call_tool("web_fetch", {"url": "https://example.com/"})
        # The reward sees what the agent read; no sandbox was made for any of it.
        assert [p["url"] for p in ctx.fetched_pages] == ["corpus://dogs.html"]
        assert len(ctx.sandboxes) == 0

    run(scenario())


def test_a_jsonl_corpus_and_a_long_page_cut_with_a_notice(tmp_path):
    lines = [
        {"url": "https://wiki.example/bm25", "title": "BM25", "text": "Okapi BM25 ranks " * 500},
        {"title": "untitled", "text": "no url of its own"},
    ]
    path = tmp_path / "pages.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))

    async def scenario():
        ctx = context(tmp_path, corpus=str(path), max_page_chars=200)
        found = json.loads(await ctx.call_tool("web_search", {"query": "okapi ranking"}))
        assert found[0]["url"] == "https://wiki.example/bm25"
        assert found[0]["snippet"].endswith("...")
        page = await ctx.call_tool("web_fetch", {"url": "https://wiki.example/bm25"})
        assert page.endswith(f"[page cut at 200 of {len('Okapi BM25 ranks ' * 500)} characters]")
        assert await ctx.call_tool("web_fetch", {"url": "corpus://2"})

    run(scenario())


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (None, "web_backend 'corpus' needs web_corpus"),
        ("missing", "no such folder or file"),
        ("bad.jsonl", "line 2: not a JSON object with a text string"),
        ("empty", "no pages"),
    ],
)
def test_a_corpus_that_cannot_be_read_is_a_start_up_error(tmp_path, setting, message):
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n[1, 2]\n')
    (tmp_path / "empty").mkdir()
    path = None if setting is None else str(tmp_path / setting)
    with pytest.raises(EnvConfigError, match=message):
        WebToolset(WebSettings(corpus=path)).check()


def test_the_hosted_backend_needs_its_key_at_start_up(monkeypatch):
    monkeypatch.delenv("MY_SEARCH_KEY", raising=False)
    with pytest.raises(EnvConfigError, match=re.escape("$MY_SEARCH_KEY (web_api_key_env)")):
        WebToolset(WebSettings(backend="tavily", api_key_env="MY_SEARCH_KEY")).check()


@asynccontextmanager
async def http_server(routes: list[web.RouteDef]) -> AsyncIterator[str]:
    app = web.Application()
    app.add_routes(routes)
    # A handler still stalling when the test ends is cancelled, not waited for.
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


KEY = "tvly-test-key-98765"


@pytest.mark.slow
def test_the_hosted_backend_speaks_tavilys_api_and_never_shows_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("TAVILY_API_KEY", KEY)
    seen = []

    async def search(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append((request.headers.get("Authorization"), body))
        if body["query"] == "unauthorized":
            return web.Response(status=401, text=f"invalid key {KEY}")
        if body["query"] == "garbage":
            return web.Response(text="<html>not json</html>")
        if body["query"] == "slow":
            await asyncio.sleep(20)
        results = [{"title": f"R{i}", "url": f"https://r{i}.example/", "content": "c " * 400,
                    "score": 1 / (i + 1)} for i in range(body["max_results"])]  # fmt: skip
        return web.json_response({"query": body["query"], "results": results})

    async def scenario():
        async with http_server([web.post("/search", search)]) as base:
            ctx = context(tmp_path, backend="tavily", search_url=f"{base}/search", timeout=4.0)
            found = json.loads(await ctx.call_tool("web_search", {"query": "q", "max_results": 3}))
            assert [r["url"] for r in found] == [f"https://r{i}.example/" for i in range(3)]
            assert len(found[0]["snippet"]) <= 303
            assert seen[0] == (f"Bearer {KEY}", {"query": "q", "max_results": 3})
            big = json.loads(await ctx.call_tool("web_search", {"query": "q", "max_results": 99}))
            assert len(big) == 10
            with pytest.raises(ToolExecutionError, match="HTTP 401") as refused:
                await ctx.call_tool("web_search", {"query": "unauthorized"})
            assert KEY not in str(refused.value)
            with pytest.raises(ToolExecutionError, match="malformed"):
                await ctx.call_tool("web_search", {"query": "garbage"})
            with pytest.raises(ToolExecutionError, match="did not answer in time"):
                await ctx.call_tool("web_search", {"query": "slow"})

    run(scenario())


def test_fetch_refuses_other_schemes_and_private_addresses(tmp_path):
    async def scenario():
        ctx = context(tmp_path, backend="tavily")
        for url in ("file:///etc/passwd", "ftp://example.com/x", "gopher://x", "javascript:1"):
            with pytest.raises(ToolExecutionError, match="only http and https"):
                await ctx.call_tool("web_fetch", {"url": url})
        for url in ("http://127.0.0.1:9/", "http://localhost/", "http://[::1]/",
                    "http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/",
                    "http://192.168.1.1/", "http://0.0.0.0/"):  # fmt: skip
            with pytest.raises(ToolExecutionError, match="private, loopback or reserved"):
                await ctx.call_tool("web_fetch", {"url": url})
        assert ctx.fetched_pages == []

    run(scenario())


def test_fetch_reads_text_pages_and_refuses_big_or_binary_bodies(tmp_path):
    async def page(request: web.Request) -> web.Response:
        return web.Response(
            text="<html><title>Hello</title><body><p>Hi &lt;there&gt;</p></body></html>",
            content_type="text/html",
        )

    async def big(request: web.Request) -> web.Response:
        return web.Response(text="x" * 5000, content_type="text/plain")

    async def streamed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(100):  # no Content-Length: counted as it arrives
            await response.write(b"y" * 1000)
        return response

    async def image(request: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG\r\n", content_type="image/png")

    async def hop(request: web.Request) -> web.Response:
        number = int(request.match_info["n"])
        raise web.HTTPFound(f"/hop/{number - 1}" if number else "/page")

    async def scenario():
        routes = [web.get("/page", page), web.get("/big", big), web.get("/streamed", streamed),
                  web.get("/image", image), web.get("/hop/{n}", hop)]  # fmt: skip
        async with http_server(routes) as base:
            ctx = context(tmp_path, backend="tavily", allow_private=True, max_page_bytes=2000)
            text = await ctx.call_tool("web_fetch", {"url": f"{base}/page"})
            assert text == f"Title: Hello\nURL: {base}/page\n\nHi <there>"
            via = await ctx.call_tool("web_fetch", {"url": f"{base}/hop/3"})
            assert f"URL: {base}/page" in via
            with pytest.raises(ToolExecutionError, match="more than 5 redirects"):
                await ctx.call_tool("web_fetch", {"url": f"{base}/hop/9"})
            with pytest.raises(ToolExecutionError, match="5000 bytes, over 2000"):
                await ctx.call_tool("web_fetch", {"url": f"{base}/big"})
            with pytest.raises(ToolExecutionError, match="over 2000 bytes"):
                await ctx.call_tool("web_fetch", {"url": f"{base}/streamed"})
            with pytest.raises(ToolExecutionError, match="image/png, not text"):
                await ctx.call_tool("web_fetch", {"url": f"{base}/image"})
            assert [p["title"] for p in ctx.fetched_pages] == ["Hello", "Hello"]

    run(scenario())


def test_a_page_that_never_answers_is_a_bounded_tool_error(tmp_path):
    async def stall(request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.Response(text="late")

    async def scenario():
        async with http_server([web.get("/stall", stall)]) as base:
            ctx = context(tmp_path, backend="tavily", allow_private=True, timeout=0.5)
            with pytest.raises(ToolExecutionError, match=r"did not answer within 0\.5 s"):
                await ctx.call_tool("web_fetch", {"url": f"{base}/stall"})

    run(scenario())


def test_html_text_keeps_the_readable_text():
    title, text = html_text("<title> A  page </title><div>one<br>two</div><script>no()</script>")
    assert (title, text) == ("A page", "one\ntwo")
    assert html_text("<p>unclosed <b>tags")[1] == "unclosed tags"


def test_a_folder_corpus_names_pages_by_path_and_skips_other_files(tmp_path):
    pages = load_corpus(str(corpus(tmp_path)))
    assert [p.url for p in pages] == ["corpus://cats.md", "corpus://dogs.html",
                                      "corpus://notes/rivers.txt"]  # fmt: skip
    assert [p.title for p in pages] == ["Cats", "Dogs", "Rivers"]


def test_an_env_that_enables_web_without_a_corpus_stops_at_start_up(offline_tokenizer, tmp_path):
    from helpers.envs import make_env

    with pytest.raises(EnvConfigError, match="needs web_corpus"):
        make_env("http://127.0.0.1:9/v1", offline_tokenizer, tmp_path, enabled_toolsets=["web"])
    env = make_env(
        "http://127.0.0.1:9/v1",
        offline_tokenizer,
        tmp_path,
        enabled_toolsets=["terminal", "web"],
        web_corpus=str(corpus(tmp_path)),
    )
    assert env.tool_services["web"].settings.corpus == str(tmp_path / "corpus")


# -- pages that would stall the env ----------------------------------------------------------

# Each blocked the event loop for seconds when page-to-text ran on it, quadratic in the page
# (issue 38: 14.9 s, 4.9 s, and a 2 MB page tens of minutes).
STALLING_PAGES = {
    "no-break spaces": "x" * 80_000 + "\u00a0" * 40_000,
    "unclosed tags": "<a" * 40_000,
    "2 MB": "<p>" + "x" * 1_000_000 + "\u00a0" * 500_000,  # 2 MB of UTF-8
}


class Ticker:
    """Ticks on the event loop every 10 ms; the longest it waited for a turn."""

    def __init__(self) -> None:
        self.longest_wait = 0.0
        self.ticks = 0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.01)
            self.longest_wait = max(self.longest_wait, loop.time() - before)
            self.ticks += 1

    async def turn(self) -> None:
        """Return once the ticker has ticked again."""
        ticks = self.ticks
        while self.ticks == ticks:
            await asyncio.sleep(0.001)


def test_a_page_that_takes_long_to_read_never_holds_the_event_loop(tmp_path):
    async def page(request: web.Request) -> web.Response:
        return web.Response(text=STALLING_PAGES[request.query["name"]], content_type="text/html")

    async def scenario():
        async with http_server([web.get("/page", page)]) as base:
            ctx = context(tmp_path, backend="tavily", allow_private=True, max_page_bytes=2_100_000)
            for name in STALLING_PAGES:
                ticker = Ticker()
                ticking = asyncio.ensure_future(ticker.run())
                try:
                    text = await ctx.call_tool("web_fetch", {"url": f"{base}/page?name={name}"})
                    await ticker.turn()  # it sees the wait that just ended, if any
                finally:
                    ticking.cancel()
                assert text.startswith(f"URL: {base}/page?name=")
                # The loop kept its turns while the page was read (it waited seconds before).
                assert ticker.longest_wait < 2.0, (name, ticker.longest_wait)

    run(scenario())


def test_a_page_read_past_its_limit_has_its_reader_killed():
    from hermes_envgen.runtime.tools import page_text, workers
    from hermes_envgen.runtime.tools.web import html_text_in_worker

    slow = "<p>x" * 2_000_000  # linear, yet seconds of work: a call back per element

    async def scenario():
        assert await html_text_in_worker("<p>warm</p>") == ("", "warm")
        pool = await workers.pool(page_text)
        [reader] = pool.idle
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(html_text_in_worker(slow), 0.3)
        killed = reader.process.returncode is not None and reader not in pool.idle
        after = await html_text_in_worker("<title>T</title><p>after</p>")
        return killed, after, pool.started

    killed, after, started = run(scenario())
    assert killed, "the reader of a page past its limit was left running"
    assert after == ("T", "after") and started == 2  # a fresh reader for the next page


# -- compression bombs -----------------------------------------------------------------------


@pytest.mark.slow  # seconds: six 64 MiB bombs built and fetched, in a process of their own
def test_a_compression_bomb_is_refused_before_it_costs_memory():
    program = HELPERS / "web_bombs.py"
    done = subprocess.run(
        [sys.executable, str(program)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    errors = report["errors"]
    # Every decoder httpx would use here: brotli's and zstandard's too when installed.
    expected = {"gzip", "gzip, gzip", "deflate", "raw deflate"}
    expected |= {"br"} if importlib.util.find_spec("brotli") else set()
    expected |= {"zstd"} if importlib.util.find_spec("zstandard") else set()
    assert set(errors) == expected
    for name, error in errors.items():
        if name == "gzip, gzip":
            assert error and error.endswith("is not read: it is compressed 2 times (gzip, gzip)")
        else:
            assert error and error.endswith("is over 2000000 bytes once decompressed; not read")
    # Each body holds 64 MiB: the fetcher's peak grew by buffers of the 2 MB limit alone.
    assert report["grown_mib"] < 48, report


# -- the pinned request ----------------------------------------------------------------------


def self_signed(tmp_path: Path, name: str) -> tuple[Path, Path]:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return key, cert


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_a_pinned_https_request_keeps_the_hosts_name_for_tls_and_the_host_header(tmp_path):
    import ssl

    import httpx

    from hermes_envgen.runtime.tools.web import pinned

    name = "pages.example"  # never resolved: the request goes to the address it is pinned to
    key, cert = self_signed(tmp_path, name)
    server_names = []
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    server_tls.sni_callback = lambda sock, server_name, context: server_names.append(server_name)

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=f"Host: {request.headers['Host']}")

    async def scenario():
        app = web.Application()
        app.add_routes([web.get("/page", page)])
        runner = web.AppRunner(app, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        trusted = ssl.create_default_context(cafile=str(cert))
        try:
            # As the fetcher's: no connection kept (one would skip the next name's TLS check).
            limits = httpx.Limits(max_keepalive_connections=0)
            async with httpx.AsyncClient(verify=trusted, limits=limits) as client:
                target, headers, extensions = pinned(f"https://{name}:{port}/page", "127.0.0.1")
                answer = await client.get(target, headers=headers, extensions=extensions)
                # The certificate is checked against the URL's host, not the address.
                other, headers, extensions = pinned(f"https://other.example:{port}/", "127.0.0.1")
                with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await client.get(other, headers=headers, extensions=extensions)
            return port, target, answer
        finally:
            await runner.cleanup()

    port, target, answer = run(scenario())
    assert str(target) == f"https://127.0.0.1:{port}/page"
    assert answer.status_code == 200 and answer.text == f"Host: {name}:{port}"
    assert server_names[0] == name
