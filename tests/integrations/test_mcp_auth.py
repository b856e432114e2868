"""Authenticating to a hosted MCP server through ``MCPServer.http()``: fixed bearer headers,
per-run headers (one agent, many users, each token in the run's ``deps``), and the SDK's OAuth
provider. The server is ``tests/mcp_servers/auth_server.py`` (the SDK's own server and auth
code) as a real process on 127.0.0.1; its ``whoami`` tool names the token a call carried."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

pytest.importorskip("mcp")

import httpx2  # noqa: E402
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider  # noqa: E402
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken  # noqa: E402

from agentkit import Agent, ToolResultMessage  # noqa: E402
from agentkit.integrations.mcp import MCPServer, MCPServerError  # noqa: E402
from agentkit.testing import ScriptedModel, reply, tool_call  # noqa: E402
from tests.mcp_servers.processes import HttpServerProcess, auth_server  # noqa: E402

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def bearer_server() -> Iterator[HttpServerProcess]:
    process = auth_server("bearer")
    yield process
    process.stop()


def test_bearer_headers_reach_the_server(bearer_server: HttpServerProcess) -> None:
    headers = {"Authorization": "Bearer alice-token"}
    with MCPServer.http(bearer_server.url, headers=headers, name="hosted") as server:
        assert server.call_tool("whoami", {}).text == "alice"


def test_missing_credentials_say_so_without_quoting_a_token(bearer_server: HttpServerProcess) -> None:
    for headers in (None, {"Authorization": "Bearer wrong-secret-token"}):
        server = MCPServer.http(bearer_server.url, headers=headers, name="hosted")
        with pytest.raises(MCPServerError) as caught:
            server.start()
        message = str(caught.value)
        assert "HTTP 401" in message and "headers=" in message
        assert "wrong-secret-token" not in message


@dataclass
class User:
    token: str


def test_per_run_headers_let_one_agent_call_as_each_user(bearer_server: HttpServerProcess) -> None:
    server = MCPServer.http(
        bearer_server.url,
        headers={"Authorization": "Bearer service-token"},  # the connection's own requests
        run_headers=lambda ctx: {"Authorization": f"Bearer {ctx.deps.token}"},
        name="hosted",
    )
    replies: list[Any] = []
    for user in ("alice", "bob", "alice"):
        replies += [reply(tool_call("whoami", id=f"w-{user}")), "done"]
    model = ScriptedModel(replies)
    agent = Agent(model=model.model, stream_fn=model)
    server.start().attach(agent)
    with agent:
        seen = []
        for user in ("alice", "bob", "alice"):
            messages = agent.prompt("who am I?", deps=User(f"{user}-token"))
            result = next(m for m in messages if isinstance(m, ToolResultMessage))
            seen.append(result.content[0].text)
        assert seen == ["alice", "bob", "alice"]
        # Outside a run (no deps), a call carries the connection's own headers.
        assert server.call_tool("whoami", {}).text == "service"
        # And explicit per-call headers win.
        explicit = server.call_tool("whoami", {}, headers={"Authorization": "Bearer bob-token"})
        assert explicit.text == "bob"


class MemoryTokens:
    """Token storage for the SDK's OAuth provider, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def test_the_sdks_oauth_provider_authorizes_the_connection() -> None:
    process = auth_server("oauth")
    try:
        redirect: dict[str, str] = {}

        async def open_browser(url: str) -> None:
            # Stands in for the person approving in a browser: the test server approves at
            # once and redirects to the callback with the code.
            async with httpx2.AsyncClient() as http:
                answer = await http.get(url)
            assert answer.status_code in (302, 303, 307), answer.status_code
            query = parse_qs(urlparse(answer.headers["location"]).query)
            redirect.update({key: values[0] for key, values in query.items()})

        async def callback() -> AuthorizationCodeResult:
            return AuthorizationCodeResult(code=redirect["code"], state=redirect.get("state"))

        storage = MemoryTokens()
        oauth = OAuthClientProvider(
            server_url=process.url,
            client_metadata=OAuthClientMetadata(
                client_name="agentkit tests",
                redirect_uris=["http://127.0.0.1:1/callback"],
                grant_types=["authorization_code"],
                response_types=["code"],
            ),
            storage=storage,
            redirect_handler=open_browser,
            callback_handler=callback,
        )
        with MCPServer.http(process.url, auth=oauth, name="oauth") as server:
            whoami = server.call_tool("whoami", {})
            assert not whoami.is_error, whoami.text
            assert storage.client is not None and whoami.text == storage.client.client_id
            assert storage.tokens is not None and storage.tokens.access_token.startswith("oauth-")
    finally:
        process.stop()


def test_concurrent_calls_each_carry_their_own_headers(bearer_server: HttpServerProcess) -> None:
    from concurrent.futures import ThreadPoolExecutor

    headers = {"Authorization": "Bearer service-token"}
    with MCPServer.http(bearer_server.url, headers=headers, name="hosted") as server:
        users = ["alice", "bob"] * 10

        def whoami(user: str) -> str:
            own = {"Authorization": f"Bearer {user}-token"}
            return server.call_tool("whoami", {}, headers=own).text

        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="caller") as pool:
            assert list(pool.map(whoami, users)) == users
