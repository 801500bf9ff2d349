"""MCP servers' OAuth tokens in the account's state, and the SDK's client flow on them.

A streamable-HTTP server that answers 401 wants OAuth. The flow is the `mcp` SDK's own
(`mcp.client.auth.OAuthClientProvider`: discovery, dynamic client registration, PKCE,
the code exchange, refresh); this module gives it a `TokenStorage` (`TokenFile`) and
decides who may answer an authorisation request:

- `tether mcp login NAME` (`_mcplogin.py`): the person, in a terminal; so does the
  first `tether chat`, which offers that login as its servers start (`_mcpperson.py`).
- Every other connection (`tether chat` after its start, `tether acp`, `tether run`,
  `tether mcp serve`, `tether tools`): no one. A server that wants the person's
  authorisation (no tokens, or tokens it refuses and the SDK cannot refresh) fails at
  once, its reason one line naming `tether mcp login NAME`; nothing waits for a
  browser. With tokens, an expired access token is refreshed by the SDK and the new
  one saved.

One file per server, `<state>/mcp-auth/<server>.json` (`Paths.mcp_auth_dir`): the tokens,
the access token's expiry (the SDK keeps it in memory only), the client registration and
the authorisation server's metadata (a refresh in a later process needs its token
endpoint, which the SDK otherwise learns only from a 401). The folder is 0700 and masked
in every walled tree (`_contain.session_masks`), the file 0600, written atomically. A file
written for another URL (the entry's `url` changed) is not used.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import httpx2
from mcp.client.auth import (
    AuthorizationCodeResult,
    OAuthClientProvider,
    OAuthFlowError,
    OAuthRegistrationError,
    OAuthTokenError,
)
from mcp.client.auth.oauth2 import OAuthContext
from mcp.client.auth.utils import (
    extract_field_from_www_auth,
    is_valid_client_metadata_url,
    union_scopes,
)
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from pydantic import AnyUrl, Field, ValidationError

from .._config import paths
from .._fs import write_atomic

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Awaitable, Callable

__all__ = (
    "LoginNeeded",
    "McpAuth",
    "OAuthClient",
    "TokenFile",
    "needs_login",
    "provider_for",
)

_PLACEHOLDER_REDIRECT = "http://127.0.0.1/callback"
"""The redirect URI of a provider no one answers (its flow never gets that far)."""
_FLOW_ERRORS = (
    OAuthFlowError,
    OAuthRegistrationError,
    OAuthTokenError,
    ValidationError,
    httpx2.HTTPError,
)


_AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")


@attrs.frozen(kw_only=True)
class OAuthClient:
    """What a server's entry says of tether as an OAuth client (its `oauth` table).

    `client_id` (and `client_secret`): a client the person registered at the
    authorisation server beforehand, used instead of dynamic registration.
    `client_metadata_url`: an HTTPS URL where the person publishes tether's client
    metadata document, used as the client id where the server supports that (CIMD).
    """

    client_id: str | None = None
    client_secret: str | None = None
    token_endpoint_auth_method: str | None = None
    client_metadata_url: str | None = None

    @classmethod
    def parse(cls, raw: object) -> OAuthClient:
        """The entry's `oauth` table.

        Raises:
            ValueError: it is malformed; the line says how.
        """
        keys = {field.name for field in attrs.fields(cls)}
        if not isinstance(raw, dict) or not all(
            isinstance(v, str) and v for v in raw.values()
        ):
            raise ValueError("`oauth` must be a table of non-empty strings")
        unknown = sorted(set(raw) - keys)
        if unknown:
            raise ValueError(
                f"`oauth` takes {', '.join(sorted(keys))}, not {', '.join(unknown)}"
            )
        client = cls(**raw)
        method = client.token_endpoint_auth_method
        if method is not None and method not in _AUTH_METHODS:
            raise ValueError(
                f"`oauth.token_endpoint_auth_method` must be one of "
                f"{', '.join(_AUTH_METHODS)}, not {method!r}"
            )
        if client.client_secret is not None and client.client_id is None:
            raise ValueError("`oauth.client_secret` needs `oauth.client_id`")
        url = client.client_metadata_url
        if url is not None and not is_valid_client_metadata_url(url):
            raise ValueError(
                "`oauth.client_metadata_url` must be an https:// URL with a path "
                f"(the client metadata document), not {url!r}"
            )
        return client

    def registration(self, redirect_uri: str) -> OAuthClientInformationFull | None:
        """The pre-registered client, if the entry names one."""
        if self.client_id is None:
            return None
        method = self.token_endpoint_auth_method or (
            "none" if self.client_secret is None else "client_secret_basic"
        )
        return OAuthClientInformationFull(
            client_id=self.client_id,
            client_secret=self.client_secret,
            token_endpoint_auth_method=method,
            redirect_uris=[AnyUrl(redirect_uri)],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        )


def needs_login(server: str) -> str:
    """The reason a server's connection or call fails when it wants authorisation."""
    return f"needs authorisation: run `tether mcp login {server}`"


class LoginNeeded(Exception):
    """The server wants the person's authorisation and no one here can give it."""


class _QuietLoginNeeded(logging.Filter):
    """Keep the SDK from logging `LoginNeeded` with a traceback.

    The SDK logs every error of its flow; this one is tether's, said once, as the
    connection's or the call's reason.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        info = record.exc_info
        return not (info and isinstance(info[1], LoginNeeded))


logging.getLogger("mcp.client.auth.oauth2").addFilter(_QuietLoginNeeded())


def _read(path: Path, server: str) -> dict[str, Any]:
    """The server's record; {} when there is none.

    Raises:
        ValueError: the file cannot be read or is not a record; the line says what to do.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ValueError(
            f"cannot read its OAuth tokens ({path}: {exc.strerror}); "
            f"run `tether mcp login {server}`"
        ) from None
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        raise ValueError(
            f"its OAuth token file {path} is not a token record; "
            f"run `tether mcp login {server}`"
        )
    return record


@attrs.define(eq=False)
class TokenFile:
    """One server's OAuth record in the account's state: the SDK's `TokenStorage`."""

    server: str
    url: str
    path: Path
    _record: dict[str, Any] = attrs.field(alias="record")
    context: OAuthContext | None = None
    """The provider's context, whose discovered metadata is saved with new tokens."""
    client: OAuthClient | None = None
    """What the server's entry says of tether as a client (its `oauth` table)."""

    @classmethod
    def open(
        cls,
        server: str,
        url: str,
        *,
        start_over: bool = False,
        client: OAuthClient | None = None,
    ) -> TokenFile:
        """The record of `server` at `url` (empty if none, or written for another URL).

        With `start_over` (a login, a logout), an unreadable file counts as empty.
        `client`: the entry's `oauth` table.

        Raises:
            ValueError: the file is unreadable; the line names `tether mcp login`.
        """
        path = paths().mcp_auth_dir / f"{server}.json"
        try:
            record = _read(path, server)
        except ValueError:
            if not start_over:
                raise
            record = {}
        if record.get("url") != url:
            record = {}
        return cls(server, url, path, record=record, client=client)

    @property
    def authorised(self) -> bool:
        """Whether tokens are held (the server may still refuse them)."""
        return isinstance(self._record.get("tokens"), dict)

    @property
    def expires_at(self) -> float | None:
        """When the access token expires (epoch seconds); None if it did not say."""
        value = self._record.get("expires_at")
        return float(value) if isinstance(value, int | float) else None

    @property
    def can_refresh(self) -> bool:
        """Whether a refresh token is held."""
        tokens = self._record.get("tokens")
        return isinstance(tokens, dict) and bool(tokens.get("refresh_token"))

    def redirect_uri(self) -> str | None:
        """The redirect URI the stored client was registered with, if any."""
        info = self._record.get("client_info")
        uris = info.get("redirect_uris") if isinstance(info, dict) else None
        return str(uris[0]) if isinstance(uris, list) and uris else None

    def _model(self, key: str, model: Any) -> Any:
        raw = self._record.get(key)
        if raw is None:
            return None
        try:
            return model.model_validate(raw)
        except ValidationError:
            return None

    async def get_tokens(self) -> OAuthToken | None:
        """The stored tokens (the SDK's `TokenStorage`)."""
        tokens: OAuthToken | None = self._model("tokens", OAuthToken)
        return tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        """Save new tokens, their expiry and the metadata that found them."""
        self._record["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        wanted = self.wanted_scope
        if wanted and set(wanted.split()) <= set((tokens.scope or wanted).split()):
            del self._record["wanted_scope"]  # granted
        self._record["expires_at"] = (
            None if tokens.expires_in is None else time.time() + int(tokens.expires_in)
        )
        context = self.context
        if context is not None:
            for key, value in (
                ("oauth_metadata", context.oauth_metadata),
                ("resource_metadata", context.protected_resource_metadata),
            ):
                if value is not None:
                    self._record[key] = value.model_dump(mode="json", exclude_none=True)
            if context.auth_server_url is not None:
                self._record["auth_server_url"] = context.auth_server_url
        self.save()

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        """The stored client registration (the SDK's `TokenStorage`)."""
        info: OAuthClientInformationFull | None = self._model(
            "client_info", OAuthClientInformationFull
        )
        return info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        """Save the client registration."""
        self._record["client_info"] = client_info.model_dump(
            mode="json", exclude_none=True
        )
        self.save()

    @property
    def wanted_scope(self) -> str | None:
        """The scope the server asked for mid-session, which a login must ask for."""
        value = self._record.get("wanted_scope")
        return value if isinstance(value, str) else None

    def want(self, scope: str) -> None:
        """Keep the scope a step-up asked for, for the next login; saved at once."""
        self._record["wanted_scope"] = scope
        self.save()

    def preregister(self, info: OAuthClientInformationFull) -> None:
        """Use the client the entry names (saved with the next tokens)."""
        self._record["client_info"] = info.model_dump(mode="json", exclude_none=True)

    def written_elsewhere(self) -> bool:
        """Whether the file now holds other tokens than this record (another process's)."""
        try:
            disk = _read(self.path, self.server)
        except ValueError:
            return False
        tokens = disk.get("tokens")
        return (
            disk.get("url") == self.url
            and isinstance(tokens, dict)
            and tokens != self._record.get("tokens")
        )

    def forget(self, *, client: bool) -> None:
        """Drop the tokens (and, with `client`, the registration) from this record.

        Nothing is written until the next save.
        """
        keep = ("wanted_scope",) if client else ("client_info", "wanted_scope")
        self._record = {k: v for k, v in self._record.items() if k in keep}

    def save(self) -> None:
        """Write the record: 0600, atomically, in a 0700 folder."""
        folder = self.path.parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.chmod(0o700)
        record = {"server": self.server, **self._record, "url": self.url}
        data = json.dumps(record, indent=2, sort_keys=True).encode()
        write_atomic(self.path, data + b"\n", mode=0o600)

    def remove(self) -> bool:
        """Delete the file; False if there was none."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        self._record = {}
        return True

    def preset(self, context: OAuthContext) -> None:
        """Give a new provider what the SDK does not keep: expiry and metadata."""
        self.context = context
        context.token_expiry_time = self.expires_at
        context.oauth_metadata = self._model("oauth_metadata", OAuthMetadata)
        context.protected_resource_metadata = self._model(
            "resource_metadata", ProtectedResourceMetadata
        )
        server = self._record.get("auth_server_url")
        context.auth_server_url = server if isinstance(server, str) else None


class _ScopeAtLeast(OAuthClientMetadata):
    """Client metadata whose scope, as the SDK's flow sets it, keeps `at_least`.

    A server that asked mid-session for more scope (a step-up no one could answer
    then) gets the union of it and what the login's own challenge names (SEP-2350).
    """

    at_least: str | None = Field(default=None, exclude=True)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "scope" and self.at_least:
            value = union_scopes(value, self.at_least)
        super().__setattr__(name, value)


def provider_for(
    file: TokenFile,
    *,
    redirect_uri: str,
    redirect_handler: Callable[[str], Awaitable[None]],
    callback_handler: Callable[[], Awaitable[AuthorizationCodeResult]],
) -> OAuthClientProvider:
    """The SDK's OAuth provider for one server, its tokens kept in `file`."""
    metadata = _ScopeAtLeast(
        client_name="tether",
        redirect_uris=[AnyUrl(redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    client = file.client or OAuthClient()
    provider = OAuthClientProvider(
        file.url,
        metadata,
        file,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
        client_metadata_url=client.client_metadata_url,
    )
    metadata.at_least = file.wanted_scope
    file.preset(provider.context)
    registered = client.registration(redirect_uri)
    if registered is not None:
        file.preregister(registered)
    return provider


class McpAuth(httpx2.Auth):
    """An HTTP server's authorisation: the SDK's provider, or nothing if no tokens.

    A request the server refuses, and that cannot be authorised here, is given back to
    the transport as the server's own refusal (sent once more without a token; the
    server runs nothing it refuses), so the request fails as an error response, not a
    broken connection; `refused` says why, in one line. After a refusal the record is
    read again, so a `tether mcp login` in another terminal is used by the next request;
    a refusal met just after another process saved new tokens (it refreshed first with
    a refresh token the server then retired) is answered with those at once.
    """

    requires_response_body = True

    def __init__(
        self,
        server: str,
        make: Callable[[], OAuthClientProvider | None],
        *,
        shared: bool = True,
    ) -> None:
        self.server = server
        self._make = make
        self._shared = shared
        """Other processes use the same tokens (False: a login, which replaces them)."""
        self._provider: OAuthClientProvider | None = None
        self._made = False
        self.refused = ""
        """Why the server's last refusal could not be answered ("" if it was not)."""

    @classmethod
    def unattended(
        cls, server: str, url: str, client: OAuthClient | None = None
    ) -> McpAuth:
        """No one answers: a server that wants the person's authorisation fails at once."""

        async def no_person(url: str) -> None:
            raise LoginNeeded(needs_login(server))

        async def no_code() -> AuthorizationCodeResult:
            raise LoginNeeded(needs_login(server))

        def make() -> OAuthClientProvider | None:
            file = TokenFile.open(server, url, client=client)
            if not file.authorised:
                return None
            return provider_for(
                file,
                redirect_uri=file.redirect_uri() or _PLACEHOLDER_REDIRECT,
                redirect_handler=no_person,
                callback_handler=no_code,
            )

        return cls(server, make)

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        unreadable = ""
        if not self._made:
            self._made = True
            try:
                self._provider = self._make()
            except ValueError as exc:
                self._provider, unreadable = None, str(exc)
        provider = self._provider
        if provider is None:
            response = yield request
            self._note(response, unreadable or needs_login(self.server))
            return
        why, last = "", None
        for again in (False, True):
            flow = provider.async_auth_flow(request)
            why, last = "", None
            try:
                outgoing = await flow.__anext__()
                while True:
                    response = yield outgoing
                    if outgoing is request:
                        last = response
                    outgoing = await flow.asend(response)
            except StopAsyncIteration:
                pass
            except LoginNeeded as exc:
                why = str(exc)
            except _FLOW_ERRORS as exc:
                why = f"authorisation failed ({type(exc).__name__}: {exc}); " + (
                    f"run `tether mcp login {self.server}`"
                )
            finally:
                await flow.aclose()
            # Another process saved new tokens (it refreshed first, or a login ran):
            # this request is sent once more with them.
            fresh = self._remade(provider) if why and not again else None
            if fresh is None:
                break
            provider = fresh
        if why:
            self._wanted(provider, last)
            self._made = False  # read the record again for the next request
            request.headers.pop("Authorization", None)
            yield request
            self.refused = why
            return
        if last is not None:
            self._note(last, needs_login(self.server))

    def _wanted(
        self, provider: OAuthClientProvider, response: httpx2.Response | None
    ) -> None:
        """A step-up no one could answer: its scope is kept for the next login."""
        storage = provider.context.storage
        scope = provider.context.client_metadata.scope
        if (
            response is not None
            and response.status_code == 403
            and extract_field_from_www_auth(response, "error") == "insufficient_scope"
            and isinstance(storage, TokenFile)
            and scope
        ):
            storage.want(scope)

    def _remade(self, provider: OAuthClientProvider) -> OAuthClientProvider | None:
        """A provider on the tokens another process saved since `provider` read them."""
        storage = provider.context.storage
        if not self._shared or not isinstance(storage, TokenFile):
            return None
        if not storage.written_elsewhere():
            return None
        try:
            self._provider = self._make()
        except ValueError:
            return None
        return self._provider

    def _note(self, response: httpx2.Response, why: str) -> None:
        if response.status_code == 401:
            self.refused = why
            self._made = False
        elif response.status_code < 400:
            self.refused = ""
