"""An OAuth authorisation server and an MCP server that needs its tokens, in the test's loop.

Both are the `mcp` SDK's server pieces on loopback, each on its own port (the
authorisation server apart from the resource, as a hosted one is): the authorisation
server is `mcp.server.auth.routes.create_auth_routes` over `Issuer`, an in-memory
provider that consents at once (its `/authorize` redirects straight to the client with a
code); the MCP server is an `MCPServer` over streamable HTTP whose `/mcp` takes only a
bearer token `Issuer` issued and has not revoked or expired. The test is the browser: it
follows the authorisation URL with an HTTP client.
"""

from __future__ import annotations

import secrets
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import attrs
import httpx2
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    IdentityAssertionParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl, ConfigDict, TypeAdapter
from starlette.applications import Starlette

from tether._loopback import listen_loopback, quiet_uvicorn

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from typing import Any

__all__ = ("Issuer", "OAuthServers", "browse", "oauth_servers")


@attrs.define(eq=False)
class Issuer:
    """An in-memory OAuth authorisation server provider (the SDK's protocol)."""

    ttl: int = 3600
    """Lifetime of the access tokens it issues, in seconds."""
    clients: dict[str, OAuthClientInformationFull] = attrs.field(factory=dict)
    codes: dict[str, AuthorizationCode] = attrs.field(factory=dict)
    access: dict[str, AccessToken] = attrs.field(factory=dict)
    refresh: dict[str, RefreshToken] = attrs.field(factory=dict)
    refreshed: int = 0
    """How many refresh-token exchanges it granted."""

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(24)
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
        return construct_redirect_uri(
            str(params.redirect_uri), code=code, state=params.state
        )

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        return self._issue(client.client_id or "", authorization_code.scopes)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self,
        client: OAuthClientInformationFull,
        refresh_token: RefreshToken,
        scopes: list[str],
    ) -> OAuthToken:
        del self.refresh[refresh_token.token]
        self.refreshed += 1
        return self._issue(client.client_id or "", scopes or refresh_token.scopes)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at or 0) < time.time():
            return None
        return found

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: IdentityAssertionParams
    ) -> OAuthToken:
        raise TokenError("unsupported_grant_type")

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def _issue(self, client_id: str, scopes: list[str]) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        expires = int(time.time()) + self.ttl
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes
        )
        return OAuthToken(
            access_token=access,
            expires_in=self.ttl,
            refresh_token=refresh,
            scope=" ".join(scopes) or None,
        )

    def expire_access(self) -> None:
        """Every access token issued is past its life (refresh tokens still good)."""
        for token in self.access.values():
            token.expires_at = 0

    def revoke_all(self) -> None:
        """Every token issued, access and refresh, is revoked."""
        self.access.clear()
        self.refresh.clear()


_URL = TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True))


def _url(text: str) -> AnyHttpUrl:
    """The URL as written (no `/` added to an empty path: issuers compare as text)."""
    return _URL.validate_python(text)


@attrs.frozen
class OAuthServers:
    issuer: Issuer
    issuer_url: str
    mcp_url: str


def _mcp_server(issuer: Issuer, issuer_url: str, mcp_url: str) -> MCPServer:
    server = MCPServer(
        "oauth-fixture",
        token_verifier=_Verifier(issuer),
        auth=AuthSettings(
            issuer_url=issuer_url,  # type: ignore[arg-type]
            resource_server_url=mcp_url,  # type: ignore[arg-type]
            validate_token_resource=False,
        ),
    )

    @server.tool()
    async def echo(text: str) -> str:
        """Return the text."""
        return text

    return server


@attrs.frozen
class _Verifier:
    issuer: Issuer

    async def verify_token(self, token: str) -> AccessToken | None:
        return await self.issuer.load_access_token(token)


@asynccontextmanager
async def oauth_servers(issuer: Issuer | None = None) -> AsyncIterator[OAuthServers]:
    """Serve the authorisation server and the MCP server until the block ends."""
    issuer = issuer if issuer is not None else Issuer()
    as_sock, mcp_sock = listen_loopback(0), listen_loopback(0)
    issuer_url = f"http://127.0.0.1:{as_sock.getsockname()[1]}"
    mcp_url = f"http://127.0.0.1:{mcp_sock.getsockname()[1]}/mcp"
    authorisation = Starlette(
        routes=create_auth_routes(
            issuer,
            issuer_url=_url(issuer_url),
            client_registration_options=ClientRegistrationOptions(enabled=True),
        )
    )
    mcp = _mcp_server(issuer, issuer_url, mcp_url)
    resource: Any = mcp.streamable_http_app(host="127.0.0.1")
    servers = [
        quiet_uvicorn(authorisation, signals=False),
        quiet_uvicorn(resource, signals=False),
    ]
    with as_sock, mcp_sock:
        async with mcp.session_manager.run(), anyio.create_task_group() as tg:
            tg.start_soon(servers[0].serve, [as_sock])
            tg.start_soon(servers[1].serve, [mcp_sock])
            with anyio.fail_after(10):
                while not all(s.started for s in servers):  # noqa: ASYNC110 (a flag)
                    await anyio.sleep(0.005)
            try:
                yield OAuthServers(issuer, issuer_url, mcp_url)
            finally:
                for s in servers:
                    s.should_exit = True


async def browse(url: str) -> httpx2.Response:
    """The person's browser: consent (the issuer consents at once) and follow back."""
    async with httpx2.AsyncClient(follow_redirects=True, timeout=10) as browser:
        return await browser.get(url)
