"""The ``web`` toolset: ``web_search`` and ``web_fetch``, run on the host, never in the sandbox.

Two backends, chosen by ``web_backend``:

- ``corpus``: an offline collection of pages (a folder of ``.txt``/``.md``/``.html`` files,
  or a JSONL file of ``{"url", "title", "text"}`` lines), ranked with BM25 (``bm25s``).
  Search and fetch never leave the machine: tests, ``demo`` and CI need no network, and a
  research task can be pinned to a fixed corpus.
- ``tavily``: Tavily's search API (``POST /search``, key from the environment variable
  ``web_api_key_env``), with pages fetched over HTTP(S) by the host. Tavily because it is
  made for agents: one call returns ranked results with clean text snippets, where
  general-purpose search APIs return ad-laden snippets and need a second scraping step.

The sandbox stays offline: the host's fetcher is the agent's only way out, and it refuses
what is not ``http(s)``, hosts that resolve to private, loopback, link-local or reserved
addresses (unless ``web_allow_private``), at every redirect, and connects to the very address
it checked (a name that resolves elsewhere the second time, DNS rebinding, changes nothing);
bodies over ``web_max_page_bytes``, before or after decompression (``content_decoding``);
and types that are not text. An HTML page is read as text in a worker process (``page_text``),
killed at the fetch's time limit, never on the event loop. Each refusal is a tool error the
model can read. Every page fetched is kept in the rollout's ``ToolContext.fetched_pages``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

import httpx  # loaded with openai's client anyway

from hermes_envgen.runtime.errors import EnvConfigError, ToolExecutionError
from hermes_envgen.runtime.tools import content_decoding, page_text, workers
from hermes_envgen.runtime.tools.page_text import html_text
from hermes_envgen.runtime.tools.registry import tool

SERVICE = "web"
CORPUS_SCHEME = "corpus://"  # the address of a page of a folder corpus: corpus://<its path>
CORPUS_SUFFIXES = (".txt", ".md", ".html", ".htm")
MAX_RESULTS = 10
SNIPPET_CHARS = 300
MAX_REDIRECTS = 5
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml")
TEXT_TYPE_SUFFIXES = ("+json", "+xml")
TAVILY_URL = "https://api.tavily.com/search"


@dataclass
class WebSettings:
    """How the ``web`` tools search and fetch; from the env config (``web_*`` settings)."""

    backend: Literal["corpus", "tavily"] = "corpus"
    corpus: str | None = None  # the corpus backend's folder or JSONL file
    api_key_env: str = "TAVILY_API_KEY"  # the hosted backend's key, read from here
    search_url: str = TAVILY_URL
    allow_private: bool = False  # fetch may reach private and loopback addresses
    max_page_bytes: int = 2_000_000  # a larger body is refused
    max_page_chars: int = 20_000  # of a page's text; the rest is cut with a notice
    timeout: float = 20.0  # seconds per search or fetch


@dataclass
class Page:
    """A page of the corpus."""

    url: str
    title: str
    text: str


@dataclass
class WebToolset:
    """The env's web backend: its settings, the corpus and its index, the HTTP client."""

    settings: WebSettings = field(default_factory=WebSettings)
    _pages: list[Page] | None = None
    _by_url: dict[str, Page] = field(default_factory=dict)
    _index: Any = None
    _index_lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self) -> None:
        """Refuse at start-up a setting that cannot work (EnvConfigError, naming it)."""
        settings = self.settings
        if settings.backend == "corpus":
            self.pages()
        elif settings.backend == "tavily":
            if not os.environ.get(settings.api_key_env):
                raise EnvConfigError(
                    f"web_backend 'tavily' reads its API key from ${settings.api_key_env} "
                    "(web_api_key_env), which is not set"
                )
        else:
            raise EnvConfigError(f"unknown web_backend {settings.backend!r}: corpus, tavily")

    # -- the corpus ----------------------------------------------------------------------------

    def pages(self) -> list[Page]:
        """The corpus's pages, read once (EnvConfigError when there is none to read)."""
        if self._pages is None:
            self._pages = load_corpus(self.settings.corpus)
            self._by_url = {page.url: page for page in self._pages}
        return self._pages

    def _retriever(self) -> Any:
        with self._index_lock:  # built once, in a worker thread, by the first search
            if self._index is None:
                import bm25s  # numpy and scipy: paid by the first search only

                tokens = bm25s.tokenize(
                    [f"{p.title}\n{p.text}" for p in self.pages()],
                    stopwords="en",
                    show_progress=False,
                )
                retriever = bm25s.BM25()
                retriever.index(tokens, show_progress=False)
                self._index = retriever
            return self._index

    def _corpus_search(self, query: str, limit: int) -> list[dict]:
        import bm25s

        pages = self.pages()
        retriever = self._retriever()
        words = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        known = [w for w in words[0] if w in retriever.vocab_dict]
        if not known:
            return []
        found, scores = retriever.retrieve(
            [known], k=min(limit, len(pages)), show_progress=False, n_threads=1
        )
        return [
            {"title": pages[i].title, "url": pages[i].url, "snippet": snippet(pages[i].text)}
            for i, score in zip(found[0].tolist(), scores[0].tolist())
            if score > 0
        ]

    # -- the tools' work -----------------------------------------------------------------------

    async def search(self, query: str, max_results: int) -> list[dict]:
        if not query.strip():
            raise ToolExecutionError("web_search: the query is empty")
        limit = max(1, min(max_results, MAX_RESULTS))
        if self.settings.backend == "corpus":
            return await asyncio.to_thread(self._corpus_search, query, limit)
        return await asyncio.wait_for(self._tavily(query, limit), self.settings.timeout)

    async def fetch(self, url: str) -> dict:
        if self.settings.backend == "corpus":
            self.pages()
            page = self._by_url.get(url)
            if page is None:
                raise ToolExecutionError(
                    f"web_fetch: {url} is not in the offline corpus; fetch a URL that "
                    "web_search returned"
                )
            return {"url": url, "status": 200, "content_type": "text/plain", "title": page.title,
                    "text": page.text}  # fmt: skip
        try:
            return await asyncio.wait_for(self._http_fetch(url), self.settings.timeout)
        except asyncio.TimeoutError:
            raise ToolExecutionError(
                f"web_fetch: {url} did not answer within {self.settings.timeout:g} s"
            ) from None

    async def _tavily(self, query: str, limit: int) -> list[dict]:
        key = os.environ.get(self.settings.api_key_env, "")
        if not key:
            raise ToolExecutionError(f"web_search: ${self.settings.api_key_env} is not set")
        try:
            async with httpx.AsyncClient(timeout=self.settings.timeout) as client:
                response = await client.post(
                    self.settings.search_url,
                    json={"query": query, "max_results": limit},
                    headers={"Authorization": f"Bearer {key}"},
                )
        except httpx.HTTPError as exc:
            raise ToolExecutionError(
                hide(f"web_search: the search API failed: {type(exc).__name__}: {exc}", key)
            ) from None
        if response.status_code != 200:
            detail = hide(response.text[:200], key)
            raise ToolExecutionError(
                f"web_search: the search API answered HTTP {response.status_code}: {detail}"
            )
        try:
            results = response.json()["results"]
            return [
                {"title": str(r.get("title", "")), "url": str(r["url"]),
                 "snippet": snippet(str(r.get("content", "")))}
                for r in results[:limit]
            ]  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ToolExecutionError("web_search: the search API's answer is malformed") from None

    async def _http_fetch(self, url: str) -> dict:
        settings = self.settings
        # No connection is kept for the next hop: each is made to the address checked for it.
        async with httpx.AsyncClient(
            timeout=settings.timeout,
            follow_redirects=False,
            limits=httpx.Limits(max_keepalive_connections=0),
        ) as client:
            for _ in range(MAX_REDIRECTS + 1):
                address = await check_url(url, settings.allow_private)
                target, headers, extensions = pinned(url, address)
                try:
                    async with client.stream(
                        "GET", target, headers=headers, extensions=extensions
                    ) as response:
                        if response.is_redirect and "location" in response.headers:
                            url = urljoin(url, response.headers["location"])
                            continue
                        return await read_page(response, url, settings.max_page_bytes)
                except httpx.HTTPError as exc:
                    raise ToolExecutionError(
                        f"web_fetch: {url} failed: {type(exc).__name__}: {exc}"
                    ) from None
        raise ToolExecutionError(f"web_fetch: more than {MAX_REDIRECTS} redirects")


def is_fetchable(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether the fetcher may connect to ``address``: a public one, not multicast."""
    return address.is_global and not address.is_multicast


async def check_url(url: str, allow_private: bool) -> str | None:
    """Refuse a URL that is not http(s), or whose host resolves to a private address; the
    address to connect to (the first checked), None when private addresses are allowed."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ToolExecutionError(
            f"web_fetch: only http and https URLs can be fetched, not {parts.scheme or url!r}"
        )
    host = parts.hostname
    if not host:
        raise ToolExecutionError(f"web_fetch: {url} has no host")
    if allow_private:
        return None
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, parts.port or 443)
    except OSError as exc:
        raise ToolExecutionError(f"web_fetch: cannot resolve {host}: {exc}") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    for address in addresses:
        if not is_fetchable(address):
            raise ToolExecutionError(
                f"web_fetch: {host} is a private, loopback or reserved address ({address}); "
                "such addresses are not fetched"
            )
    if not addresses:
        raise ToolExecutionError(f"web_fetch: cannot resolve {host}: no address")
    return str(addresses[0])


def pinned(url: str, address: str | None) -> tuple[httpx.URL, dict[str, str], dict[str, str]]:
    """The request for ``url`` made to ``address``: the URL with the address for its host,
    the Host header and the TLS server name (SNI, and the certificate's check) of ``url``'s.

    httpx would resolve the name again to connect, and a name can answer a public address to
    the check and a loopback one to the connection (DNS rebinding).
    """
    headers = {"Accept": "text/*", "Accept-Encoding": content_decoding.ACCEPT_ENCODING}
    original = httpx.URL(url)
    if address is None:
        return original, headers, {}
    headers["Host"] = original.netloc.decode("ascii")
    extensions = {"sni_hostname": original.raw_host.decode("ascii")}
    return original.copy_with(host=address), headers, extensions


async def read_page(response: Any, url: str, limit: int) -> dict:
    """A fetched page's text (HTML reduced to text), refusing large or non-text bodies."""
    content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if not (content_type.startswith(TEXT_TYPES) or content_type.endswith(TEXT_TYPE_SUFFIXES)):
        raise ToolExecutionError(
            f"web_fetch: {url} is {content_type or 'of no stated type'}, not text; not fetched"
        )
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ToolExecutionError(f"web_fetch: {url} is {declared} bytes, over {limit}; not read")
    body = bytearray()
    async for chunk in response.aiter_raw():  # as sent: decompressed below, with a limit
        body += chunk
        if len(body) > limit:
            raise ToolExecutionError(f"web_fetch: {url} is over {limit} bytes; not read")
    try:
        data = content_decoding.decode(
            bytes(body), response.headers.get("content-encoding", ""), limit
        )
    except content_decoding.TooLarge:
        raise ToolExecutionError(
            f"web_fetch: {url} is over {limit} bytes once decompressed; not read"
        ) from None
    except content_decoding.NotDecodable as exc:
        raise ToolExecutionError(f"web_fetch: {url} is not read: {exc}") from None
    text = data.decode(response.encoding or "utf-8", errors="replace")
    title = ""
    if "html" in content_type:
        title, text = await html_text_in_worker(text)
    return {"url": url, "status": response.status_code, "content_type": content_type,
            "title": title, "text": text}  # fmt: skip


async def html_text_in_worker(markup: str) -> tuple[str, str]:
    """``html_text`` of ``markup``, in a ``page_text`` worker process: the event loop runs on
    meanwhile, and a cancellation (the fetch's time limit) kills the worker."""
    pool = await workers.pool(page_text)
    worker = await pool.acquire()
    stdin, stdout = worker.process.stdin, worker.process.stdout
    assert stdin is not None and stdout is not None  # pipes
    clean = False
    try:
        data = markup.encode("utf-8", "replace")
        stdin.write(len(data).to_bytes(8, "big") + data)
        await stdin.drain()
        size = int.from_bytes(await stdout.readexactly(8), "big")
        title, text = json.loads(await stdout.readexactly(size))
        clean = True
        return str(title), str(text)
    except (OSError, asyncio.IncompleteReadError, ValueError):
        await worker.kill()
        raise ToolExecutionError(
            f"web_fetch: the page reader failed (exit {worker.process.returncode})"
        ) from None
    finally:
        await pool.release(worker, clean)


def snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[:SNIPPET_CHARS] + "..."


def hide(text: str, secret: str) -> str:
    """``text`` without ``secret`` (an API key an error message might echo)."""
    return text.replace(secret, "[key]") if secret else text


def load_corpus(path: str | None) -> list[Page]:
    """The pages of a corpus folder or JSONL file (EnvConfigError naming ``web_corpus``)."""
    if not path:
        raise EnvConfigError(
            "web_backend 'corpus' needs web_corpus: a folder of .txt/.md/.html pages or a "
            "JSONL file of {url, title, text} lines"
        )
    root = Path(path)
    if root.is_dir():
        pages = []
        for file in sorted(root.rglob("*")):
            if file.is_file() and file.suffix.lower() in CORPUS_SUFFIXES:
                text = file.read_text(encoding="utf-8", errors="replace")
                if file.suffix.lower() in (".html", ".htm"):
                    title, text = html_text(text)
                else:
                    title = (
                        text.strip().splitlines()[0].lstrip("# ").strip() if text.strip() else ""
                    )
                url = CORPUS_SCHEME + file.relative_to(root).as_posix()
                pages.append(Page(url, title or file.stem, text))
    elif root.is_file():
        pages = [_jsonl_page(line, number, path)
                 for number, line in enumerate(root.read_text(encoding="utf-8").splitlines(), 1)
                 if line.strip()]  # fmt: skip
    else:
        raise EnvConfigError(f"web_corpus {path}: no such folder or file")
    if not pages:
        raise EnvConfigError(f"web_corpus {path}: no pages (.txt, .md, .html or JSONL lines)")
    return pages


def _jsonl_page(line: str, number: int, path: str) -> Page:
    try:
        record = json.loads(line)
        text = record["text"]
        if not isinstance(text, str):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise EnvConfigError(
            f"web_corpus {path}, line {number}: not a JSON object with a text string"
        ) from None
    url = str(record.get("url") or f"{CORPUS_SCHEME}{number}")
    return Page(url, str(record.get("title") or url), text)


_default = WebToolset()


def _toolset(context: Any) -> WebToolset:
    return context.service(SERVICE, lambda: _default) if context is not None else _default


def _tool_error(exc: EnvConfigError) -> ToolExecutionError:
    return ToolExecutionError(f"web: {exc}")


@tool(toolset="web")
async def web_search(query: str, max_results: int = 5, *, context: Any) -> str:
    """Search the web; returns the title, URL and a snippet of each result, best first.

    Args:
        query: What to search for, in a few words.
        max_results: How many results to return (1 to 10).
    """
    try:
        results = await _toolset(context).search(query, max_results)
    except EnvConfigError as exc:
        raise _tool_error(exc) from None
    except asyncio.TimeoutError:
        raise ToolExecutionError("web_search: the search API did not answer in time") from None
    if not results:
        return "no results"
    return json.dumps(results, ensure_ascii=False, indent=1)


@tool(toolset="web")
async def web_fetch(url: str, *, context: Any) -> str:
    """Fetch a web page and return its text (long pages are cut, with a notice).

    Args:
        url: The page's address, as web_search returned it (http or https).
    """
    toolset = _toolset(context)
    try:
        page = await toolset.fetch(url)
    except EnvConfigError as exc:
        raise _tool_error(exc) from None
    if context is not None:
        context.state.setdefault(SERVICE, {}).setdefault("fetched", []).append(page)
    text = page["text"]
    limit = toolset.settings.max_page_chars
    notice = ""
    if len(text) > limit:
        notice = f"\n[page cut at {limit} of {len(text)} characters]"
        text = text[:limit]
    heading = f"Title: {page['title']}\n" if page["title"] else ""
    return f"{heading}URL: {page['url']}\n\n{text}{notice}"
