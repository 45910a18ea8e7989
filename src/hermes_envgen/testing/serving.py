"""An ASGI app served for real on 127.0.0.1, on a free port, for as long as a block runs: how
the tests and ``check``'s door replays reach the doors' servers (OpenEnv's, verifiers')."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from hermes_envgen.testing.trainer import free_port


@contextlib.contextmanager
def served(app: Any, *, start_timeout: float = 60.0) -> Iterator[str]:
    """``app`` served by uvicorn on 127.0.0.1 until the block ends (stopped on every way out);
    its base URL. A server that does not start within ``start_timeout`` s raises."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True, name=f"served-{port}")
    thread.start()
    try:
        deadline = time.monotonic() + start_timeout
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError(f"the server on 127.0.0.1:{port} exited before it started")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server on 127.0.0.1:{port} did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
