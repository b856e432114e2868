"""An MCP server that wants credentials, for agentkit's authentication tests (the SDK's own
server and auth code, over streamable HTTP on 127.0.0.1).

    python auth_server.py PORT bearer   # fixed bearer tokens: service, alice, bob
    python auth_server.py PORT oauth    # its own OAuth authorization server, which approves
                                        # every authorization at once (no person to ask)

Every request needs a valid token; its tool ``whoami`` names the token's owner, so a test can
see whose credentials a call carried.
"""

from __future__ import annotations

import secrets
import sys
import time

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

OWNERS = {"service-token": "service", "alice-token": "alice", "bob-token": "bob"}


class FixedTokens:
    """A token verifier knowing three fixed bearer tokens."""

    async def verify_token(self, token: str) -> AccessToken | None:
        owner = OWNERS.get(token)
        return AccessToken(token=token, client_id=owner, scopes=[]) if owner else None


class ApprovingAuthorizationServer:
    """An in-memory OAuth authorization server that approves every request at once."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.tokens: dict[str, AccessToken] = {}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(16)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        token = "oauth-" + secrets.token_urlsafe(16)
        self.tokens[token] = AccessToken(
            token=token,
            client_id=client.client_id or "",
            scopes=authorization_code.scopes,
            resource=authorization_code.resource,
        )
        return OAuthToken(access_token=token, expires_in=3600)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        raise NotImplementedError

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.tokens.get(token)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.tokens.pop(token.token, None)


def build(port: int, mode: str) -> MCPServer:
    base = f"http://127.0.0.1:{port}"
    if mode == "bearer":
        settings = AuthSettings(
            issuer_url=base, resource_server_url=f"{base}/mcp", validate_token_resource=False
        )
        server = MCPServer("agentkit-auth-test", token_verifier=FixedTokens(), auth=settings)
    else:
        settings = AuthSettings(
            issuer_url=base,
            resource_server_url=f"{base}/mcp",
            validate_token_resource=False,
            client_registration_options=ClientRegistrationOptions(enabled=True),
        )
        server = MCPServer(
            "agentkit-oauth-test", auth_server_provider=ApprovingAuthorizationServer(), auth=settings
        )

    @server.tool()
    def whoami() -> str:
        """Who the request's token belongs to."""
        token = get_access_token()
        return token.client_id if token is not None else "nobody"

    return server


if __name__ == "__main__":
    port = int(sys.argv[1])
    build(port, sys.argv[2]).run("streamable-http", host="127.0.0.1", port=port)
