"""One TLS context per process (`opd_nb/wire/http_client.py`): no HTTP client of ours builds its own.

A context costs its CA bundle's load (about 20 ms of CPU); the health waits built one per poll. The rule
is held two ways: no module outside `wire/http_client.py` opens an httpx client itself (so the next one
cannot), and the surfaces that ask most often build none once the process's context exists.
"""

from __future__ import annotations

import ast
import asyncio
import ssl
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from opd_nb.wire import http_client

PACKAGE = Path(__file__).resolve().parent.parent / "opd_nb"
OPENERS = {
    "Client",
    "AsyncClient",
    "get",
    "post",
    "put",
    "patch",
    "delete",
    "head",
    "options",
    "request",
    "stream",
}


def _httpx_openers(path: Path) -> list[str]:
    """`httpx.<opener>(...)` calls and `from httpx import <opener>` in one module, as `file:line name`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "httpx"
            and node.func.attr in OPENERS
        ):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} httpx.{node.func.attr}")
        if isinstance(node, ast.ImportFrom) and node.module == "httpx":
            found += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} from httpx import {a.name}"
                      for a in node.names if a.name in OPENERS]  # fmt: skip
    return found


def test_no_module_opens_an_httpx_client_but_the_one_rule() -> None:
    rule = PACKAGE / "wire" / "http_client.py"
    own = [hit for path in sorted(PACKAGE.rglob("*.py")) if path != rule for hit in _httpx_openers(path)]
    assert not own, f"open clients through opd_nb.wire.http_client (one TLS context per process): {own}"
    assert _httpx_openers(rule), "the rule module itself opens the clients"


def test_the_shared_context_is_httpx_default_and_a_callers_own_verify_stays() -> None:
    context = http_client.tls_context()
    assert context is http_client.tls_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # the CA bundle is loaded
    mine = ssl.create_default_context()
    with http_client.client(verify=mine) as client:
        assert client._transport._pool._ssl_context is mine  # type: ignore[attr-defined]
    with http_client.client() as client:
        assert client._transport._pool._ssl_context is context  # type: ignore[attr-defined]


@pytest.fixture()
def contexts_built(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Each CA-bundle load from here on (the process's own context exists before counting)."""
    http_client.tls_context()
    http_client.tls_context(False)
    built: list[object] = []
    real = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: object, **kwargs: object) -> None:
        built.append(args or kwargs)
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    return built


def _job_client(api: str) -> None:
    from opd_nb.client import JobClient, resolve_target

    for _ in range(3):  # a new client each time, as each CLI call and widget makes one
        JobClient(resolve_target("local", base_url=api)).list()


def _async_job_client(api: str) -> None:
    from opd_nb.client import AsyncJobClient, resolve_target

    async def three() -> None:
        for _ in range(3):
            await AsyncJobClient(resolve_target("local", base_url=api)).list()

    asyncio.run(three())


def _server_health(api: str) -> None:
    from opd_nb.server.lifecycle import _healthy

    assert all(_healthy(api.removesuffix("/api/v1")) for _ in range(3))


SURFACES: dict[str, Callable[[str], None]] = {
    "job client": _job_client,
    "async job client": _async_job_client,
    "server health": _server_health,
}


@pytest.mark.slow  # the session's opd serve
@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_a_surface_asking_again_builds_no_context(local_server, contexts_built, surface: str) -> None:
    SURFACES[surface](local_server.api_base)
    assert contexts_built == []


@pytest.mark.slow  # starts a function server
def test_a_function_servers_health_wait_builds_no_context(tmp_path: Path, contexts_built) -> None:
    from opd_nb.functions.server import FunctionServer

    module = tmp_path / "functions" / "reward" / "reward.py"
    module.parent.mkdir(parents=True)
    module.write_text(
        textwrap.dedent("""
        from dashscope.finetune.reinforcement import AbstractRewardProcessor, Reward, RewardInput, RewardOutput

        class One(AbstractRewardProcessor):
            async def process(self, input_data: RewardInput) -> RewardOutput:
                return RewardOutput(reward=Reward(reward_score=1.0))
    """)
    )
    with FunctionServer.start(tmp_path, "reward", "functions/reward/reward.py:One"):
        pass
    assert contexts_built == []
