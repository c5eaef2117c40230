"""The Docker Compose file's cluster, checked without a Docker engine.

Compose itself (Debian's ``docker-compose`` 1.29, installed if missing) reads and validates
``docker-compose.yml``; the services are checked against one another (ports, health checks,
the PostgreSQL they name, the order they start in); and the commands of the two node services
run here as written, from the directory their volume mounts, against a local PostgreSQL: only
what names the containers' world is replaced (the ``postgres`` host, the ports, ``/data``, and the
listening address, loopback here instead of every interface of a container). What is not run:
the images themselves (the official XTDB image and the Maven + Temurin image), for want of an
engine."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from context_os.store.base import Put
from context_os.store.xtdb import XtdbStore
from tests._xtdb_node import STARTUP_TIMEOUT_S, _free_port
from tests.cluster._cluster import ROOT, Cluster
from tests.helpers import unavailable

pytestmark = pytest.mark.cluster

COMPOSE = ROOT / "docker-compose.yml"
NODES = ("xtdb-node-1", "xtdb-node-2")
"""The node services, in the order their ``depends_on`` starts them."""


def _compose() -> str:
    exe = shutil.which("docker-compose")
    if exe is None:
        done = subprocess.run(
            [str(ROOT / "scripts" / "apt-install.sh"), "the check of docker-compose.yml", "docker-compose"],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        exe = shutil.which("docker-compose")
        if exe is None:
            unavailable("docker-compose (Debian's package)", done.stderr[-2000:] or "not installed")
    return exe


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    """The file as Compose reads it with the cluster's profile (``docker-compose config``)."""
    done = subprocess.run(
        [_compose(), "-f", str(COMPOSE), "--profile", "cluster", "config"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, f"docker-compose rejects docker-compose.yml:\n{done.stderr}"
    loaded = yaml.safe_load(done.stdout)
    assert isinstance(loaded, dict)
    return loaded


def _options(command: str) -> dict[str, str | None]:
    """``xtdb/start``'s options in a service's command (a flag maps to None)."""
    words = shlex.split(command)
    assert words[0] == "xtdb/start", command
    out: dict[str, str | None] = {}
    rest = words[1:]
    while rest:
        name = rest.pop(0)
        assert name.startswith("--"), f"not an option: {name!r} in {command!r}"
        out[name] = rest.pop(0) if rest and not rest[0].startswith("--") else None
    return out


def _ports(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(host address, host port, container port) of each published port, whether Compose writes
    it short (``127.0.0.1:3010:3000/tcp``, version 1) or long (a mapping, version 2)."""
    out = []
    for p in service["ports"]:
        if isinstance(p, dict):
            out.append((str(p["host_ip"]), int(p["published"]), int(p["target"])))
        else:
            host_ip, published, target = str(p).split("/")[0].rsplit(":", 2)
            out.append((host_ip, int(published), int(target)))
    return out


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path → source (a host path or a volume's name), short or long form."""
    out = {}
    for v in service["volumes"]:
        if isinstance(v, dict):
            out[str(v["target"])] = str(v["source"])
        else:
            source, target = str(v).split(":")[:2]
            out[target] = source
    return out


def _health_url(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    assert test[:2] == ["CMD", "curl"] and "Accept: application/edn" in test, test
    return str(test[-1])


def test_compose_reads_the_file_and_its_services_agree(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(services) == {"xtdb", "postgres", *NODES}
    assert "profiles" not in services["xtdb"]  # `docker compose up` alone: the one-node store
    assert all(services[s]["profiles"] == ["cluster"] for s in ("postgres", *NODES))
    pg = services["postgres"]
    ((pg_host_ip, _, pg_port),) = _ports(pg)
    assert pg_host_ip == "127.0.0.1" and pg["environment"]["POSTGRES_DB"] == "xtdb"
    published = [_ports(services[s])[0][1] for s in services]
    assert len(set(published)) == len(published), f"two services publish one port: {published}"
    starts_after = {"xtdb-node-1": "postgres", "xtdb-node-2": "xtdb-node-1"}
    for name in NODES:
        node = services[name]
        opts = _options(node["command"])
        assert set(opts) == {"--foreground", "--host", "--port", "--config", "--pg-host", "--pg-port", "--data-dir"}
        assert opts["--foreground"] is None  # the container lives as long as the node
        assert opts["--pg-host"] == "postgres" and opts["--pg-port"] == str(pg_port)
        assert (ROOT / str(opts["--config"])).is_file()
        ((host_ip, _, target),) = _ports(node)
        assert host_ip == "127.0.0.1" and str(target) == opts["--port"]
        assert _health_url(node) == f"http://127.0.0.1:{opts['--port']}/_xtdb/status"
        mounts = _mounts(node)
        assert Path(mounts["/ctxos/xtdb"]) == ROOT / "xtdb" and node["working_dir"] == "/ctxos"
        assert mounts[str(opts["--data-dir"])] == name.replace("xtdb-", "")  # a volume of its own
        assert node["depends_on"] == {starts_after[name]: {"condition": "service_healthy"}}


def _run_node(service: dict[str, Any], pg: Cluster, data: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start a node service's command here, as written but for the containers' names; wait for its
    health check to pass. Returns the process and the node's base URL."""
    opts = _options(service["command"])
    port = _free_port()
    here = {"--host": "127.0.0.1", "--port": str(port), "--pg-host": "127.0.0.1", "--pg-port": str(pg.pg_port)}
    here["--data-dir"] = str(data)
    argv = ["xtdb/start"]
    for name, value in opts.items():
        argv += [name] if value is None else [name, here.get(name, value)]
    env = {**os.environ, **{k: str(v) for k, v in (service.get("environment") or {}).items()}}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = _health_url(service).replace(f":{opts['--port']}/", f":{port}/")
    deadline = time.monotonic() + STARTUP_TIMEOUT_S + 240  # Maven's first download comes first
    while True:
        try:
            if httpx.get(url, headers={"Accept": "application/edn"}, timeout=5).status_code == 200:
                return proc, f"http://127.0.0.1:{port}"
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            unavailable(f"the command of {argv[0]} for a node service", log.read_text(errors="replace")[-3000:])
        time.sleep(0.5)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """The way a container stops: SIGTERM to the command (xtdb/start passes it to the node)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:  # pragma: no cover - a node that ignores SIGTERM
            proc.kill()
            proc.wait(10)


def test_the_node_services_run_as_a_cluster_with_their_own_commands(
    config: dict[str, Any], postgres: Cluster, tmp_path: Path
) -> None:
    started: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for name in NODES:  # in the order depends_on gives
            proc, url = _run_node(config["services"][name], postgres, tmp_path / name, tmp_path / f"{name}.log")
            started.append(proc)
            urls.append(url)
        one, two = (XtdbStore("xtdb+" + u) for u in urls)
        tx = one.submit([Put({"id": "memory:compose", "kind": "memory", "content": "hi", "meta": {}}, 1_000)])
        two._await(tx.id)  # written through the first node, indexed by the second from the shared log
        seen = two.get("memory:compose")
        assert seen is not None and seen.doc["content"] == "hi" and seen.tx_id == tx.id
        both = XtdbStore("xtdb+" + ",".join(urls))  # the CTXOS_STORE the file's comment gives, here
        assert both.get("memory:compose") is not None
        for s in (one, two, both):
            s.close()
    finally:
        for proc in started:
            _stop(proc)
    assert all(proc.returncode is not None for proc in started)
