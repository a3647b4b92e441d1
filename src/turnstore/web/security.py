"""The viewer's guard: security headers on every response, and the access token when one is set.

* Every response carries a strict Content-Security-Policy (scripts and styles
  from the app's own static files only, no inline script, no frames, no
  plugins), ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer``
  and ``X-Frame-Options: DENY``.
* With a token (``turnstore serve --allow-remote``), a request must carry it:
  in the ``X-Turnstore-Token`` header, in ``?token=`` (the link printed at
  start; the answer then sets an HttpOnly, SameSite=Strict cookie so later
  links need no token) or in that cookie. Tokens are compared in constant time.
  Anything else gets 401.
* With ``hosts`` (``turnstore serve`` without ``--allow-remote``), a request
  whose ``Host`` header names another host is refused with 400: a web page
  that rebinds its own name to 127.0.0.1 (DNS rebinding) cannot read the
  viewer through the browser.
* A request a browser marks as made by another site (``Sec-Fetch-Site:
  cross-site`` or ``same-site``: a page elsewhere, or another port of this
  host) is refused with 403, so no page can search the store through the
  user's browser and time the answers.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_SECURITY_POLICY", "COOKIE", "HEADER", "Guard", "new_token"]

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADER = "x-turnstore-token"
COOKIE = "turnstore_token"

_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


def new_token() -> str:
    """A random access token (32 bytes, URL-safe)."""
    return secrets.token_urlsafe(32)


class Guard:
    """ASGI middleware: adds the security headers; with a token, refuses requests without it."""

    def __init__(self, app: ASGIApp, token: str | None = None, hosts: frozenset[str] | None = None) -> None:
        self.app = app
        self.token = token
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.hosts is not None and _host(scope) not in self.hosts:
            await _refuse(send, 400, b"400 bad request: this viewer answers only to a local host name\n")
            return
        if _cross_site(scope):
            await _refuse(
                send, 403, b"403 forbidden: this viewer answers only to its own pages and to links opened directly\n"
            )
            return
        set_cookie = False
        if self.token is not None:
            given, from_query = _presented(scope)
            if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
                await _refuse(send, 401, b"401 unauthorized: this viewer needs the token printed by turnstore serve\n")
                return
            set_cookie = from_query

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in dict(_HEADERS)]
                headers.extend(_HEADERS)
                if set_cookie and self.token is not None:
                    cookie = f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
                    headers.append((b"set-cookie", cookie.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _presented(scope: Scope) -> tuple[str | None, bool]:
    """The token the request carries, and whether it came in the query string."""
    headers = scope.get("headers", [])
    for name, value in headers:
        if name == HEADER.encode():
            return value.decode("latin-1"), False
    for name, value in parse_qsl(scope.get("query_string", b"").decode("latin-1")):
        if name == "token":
            return value, True
    for name, value in headers:
        if name == b"cookie":
            # Read by hand, not with SimpleCookie: one malformed cookie of another app on this host
            # must not hide the token (SimpleCookie gives up on the whole header).
            for part in value.decode("latin-1").split(";"):
                key, _, given = part.strip().partition("=")
                if key == COOKIE:
                    return given, False
    return None, False


def _cross_site(scope: Scope) -> bool:
    """Whether a browser says another site (or another port of this host) made the request.

    A page on any site can make a browser send requests to a viewer on
    127.0.0.1 and time the answers (a search that matches is slower than one
    that does not). Browsers mark such requests ``Sec-Fetch-Site: cross-site``
    or ``same-site``; the viewer's own pages are ``same-origin``, and a link
    opened from the address bar, a bookmark or a terminal is ``none``.
    """
    for name, value in scope.get("headers", []):
        if name == b"sec-fetch-site":
            return value.strip().lower() in (b"cross-site", b"same-site")
    return False


def _host(scope: Scope) -> str:
    """The host name the request's ``Host`` header names, without its port (IPv6 without brackets)."""
    for name, value in scope.get("headers", []):
        if name == b"host":
            host: str = value.decode("latin-1").lower()
            if host.startswith("["):
                return host[1 : host.find("]")] if "]" in host else host
            return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return ""


async def _refuse(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
