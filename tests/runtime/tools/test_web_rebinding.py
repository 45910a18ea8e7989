"""DNS rebinding against web_fetch: a name that answers a public address to the fetcher's check
and 127.0.0.1 to its connection never gets it to read a service on loopback.

Everything runs in a network namespace this test makes (tests/helpers/netns_rig.py), with a DNS
server
of its own there (tests/helpers/rebinding_servers.py): the namespace's address plays the public one,
and the services on its loopback play the machine's. The fetcher runs there too
(tests/helpers/rebinding_fetch.py). No packet leaves the namespace.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import HELPERS, netns_rig

from hermes_envgen.testing.trainer import RunApi, _get, _post

UNAVAILABLE = netns_rig.unavailable()
pytestmark = [
    pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or ""),
    pytest.mark.xdist_group("netns"),
    pytest.mark.slow,
    pytest.mark.timeout(180),
]

HERE = HELPERS
HOST = "web"
API_PORT = 8000
LOOPBACK = 8080  # rebinding_servers.LOOPBACK_PORT
PUBLIC = 8081  # rebinding_servers.PUBLIC_PORT
SECRET = "the loopback service's secret"  # what every page of the loopback service says


class Namespace:
    """The rig, its servers' log, and run-api on the namespace's 127.0.0.1."""

    def __init__(self, rig: netns_rig.Rig, servers_log: Path, api_log: Path) -> None:
        self.rig = rig
        self.servers_log = servers_log
        self.api_log = api_log
        self.address = rig.addresses[HOST]

    def fetch(self, *urls: str) -> dict[str, dict]:
        """web_fetch of each URL from inside the namespace: its answer or its error."""
        log = self.servers_log.with_name(f"fetch-{time.monotonic_ns()}.log")
        network = f"{netns_rig.SUBNET}.0/24"
        command = [sys.executable, str(HERE / "rebinding_fetch.py"), network, *urls]
        process = self.rig.start(HOST, command, log)
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        output = log.read_text()
        assert process.returncode == 0, output[-3000:]
        return json.loads(output.splitlines()[-1])

    def loopback_reads(self) -> list[str]:
        return [line for line in self.servers_log.read_text().splitlines() if "loopback" in line]


@pytest.fixture(scope="module")
def namespace(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rebinding")
    netns_rig.reap_stale()
    with netns_rig.Rig([HOST]) as rig:
        rig.resolver(HOST, "127.0.0.1")
        servers_log = tmp / "servers.log"
        address = rig.addresses[HOST]
        command = [sys.executable, str(HERE / "rebinding_servers.py"), address]
        servers = rig.start(HOST, command, servers_log)
        deadline = time.monotonic() + 30
        while "ready" not in servers_log.read_text():
            assert servers.poll() is None, servers_log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the namespace's servers did not start"
            time.sleep(0.05)
        api = RunApi(port=API_PORT, log=tmp / "run-api.log", host="127.0.0.1")
        inside = rig.thread(HOST)
        inside.submit(api.__enter__).result(90)  # started from the namespace: it runs there
        try:
            assert rig.in_namespace(api._process, HOST)
            yield Namespace(rig, servers_log, tmp / "run-api.log")
        finally:
            inside.submit(api.__exit__).result(30)


def test_a_name_that_rebinds_to_loopback_never_reads_a_loopback_service(namespace):
    ns = namespace
    names = [f"n{i}.rebind.test" for i in range(4)]
    direct = [f"http://{name}:{LOOPBACK}/secret" for name in names[:3]]
    # Through a redirect: a public page sends the fetcher on to the rebinding name.
    redirected = f"http://to.public.test:{PUBLIC}/to?url=http://{names[3]}:{LOOPBACK}/secret"
    hello = f"http://ok.public.test:{PUBLIC}/hello"
    results = ns.fetch(hello, *direct, redirected)
    # A public name is fetched from the address checked, with its own Host header.
    assert results[hello]["text"].endswith(f"hello, Host: ok.public.test:{PUBLIC}")
    for url in [*direct, redirected]:
        assert "error" in results[url], (url, results[url])
        assert SECRET not in json.dumps(results[url])
    assert ns.loopback_reads() == [], "the fetcher read the loopback-only service"
    # The names did rebind: each answered the public address once, 127.0.0.1 after.
    log = ns.servers_log.read_text()
    assert f"dns {names[0]} A -> {ns.address}" in log


def test_a_name_that_rebinds_to_loopback_never_reaches_run_api(namespace):
    ns = namespace
    api = f"http://127.0.0.1:{API_PORT}"
    inside = ns.rig.thread(HOST)
    registration = {"wandb_group": "kept", "wandb_project": "p", "batch_size": 8,
                    "max_token_len": 64, "checkpoint_dir": "c", "save_checkpoint_interval": 1,
                    "starting_step": 0, "num_steps": 2}  # fmt: skip
    inside.submit(_post, f"{api}/register", registration).result(30)
    urls = [
        f"http://api.rebind.test:{API_PORT}/reset_data",
        f"http://api2.rebind.test:{API_PORT}/status",
        f"http://to.public.test:{PUBLIC}/to?url=http://api3.rebind.test:{API_PORT}/reset_data",
    ]
    results = ns.fetch(*urls)
    for url in urls:
        assert "error" in results[url], (url, results[url])
    # run-api was never asked: its state is as registered, its log shows no such request.
    assert inside.submit(_get, f"{api}/wandb_info").result(30) == {"group": "kept", "project": "p"}
    api_log = ns.api_log.read_text()
    assert "/reset_data" not in api_log and "/status" not in api_log, api_log[-2000:]
