"""How ``turnstore serve`` runs the viewer on uvicorn: with a deadline for each request and a bound on connections.

uvicorn's HTTP protocol waits for a request's line and headers without a
deadline (its keep-alive timeout starts only after a first response), so a
client that sends half a request line and stops holds its connection, and its
file descriptor, for ever; enough of them stop the server. :func:`protocol`
returns uvicorn's h11 protocol with two rules added, at the connection, where
uvicorn's own ``limit_concurrency`` (a 503 for a request beyond the limit,
once its headers are in; each connection runs one request at a time, so the
bound on connections bounds requests too) cannot reach:

* A request must arrive whole (line, headers and body) within
  ``request_timeout`` seconds of its first byte (of the connection, for the
  first): a client that is slower is disconnected.
* An answer must be taken: a client that lets the server wait to write more
  of it (the buffers full) for ``request_timeout`` seconds is disconnected. Without this, requests sent whole (pipelined, many at once)
  by a client that never reads kept their connections busy answering for
  ever, never the longest waiting, and every new connection got a 503.
* At most ``max_connections`` connections are open at once. One more closes the
  connection that has waited longest for a request (a half-sent one, or an idle
  keep-alive), so a slow client's connections give way to a new one; when every
  connection is busy answering a request, the new one gets a 503 and is closed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["protocol"]

_BUSY = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def protocol(request_timeout: float, max_connections: int) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a deadline for each request and a bound on open connections
    (pass it as ``uvicorn.Config(http=...)``)."""

    class BoundedH11Protocol(H11Protocol):
        """:class:`H11Protocol`, disconnecting a request that is too slow to arrive, and the connection
        that has waited longest when too many are open."""

        waiting_since: float | None = None
        """When the connection began to wait for a request (its first byte, or the connection's start);
        None while one is being answered."""
        deadline: asyncio.TimerHandle | None = None
        unread: asyncio.TimerHandle | None = None
        """Runs while writing is paused (the client reads nothing of its answer): closes the connection."""

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._wait()
            if len(self.connections) > max_connections:
                self._make_room()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_waiting()
            self._answer_taken()
            super().connection_lost(exc)

        def pause_writing(self) -> None:
            super().pause_writing()
            if self.unread is None:
                self.unread = self.loop.call_later(request_timeout, self.transport.abort)  # unsent data dropped

        def resume_writing(self) -> None:
            self._answer_taken()
            super().resume_writing()

        def _answer_taken(self) -> None:
            if self.unread is not None:
                self.unread.cancel()
                self.unread = None

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE or self.conn.their_state is h11.SEND_BODY:
                self._wait()  # the request is not whole yet: its deadline runs (from its first byte)
            else:
                self._stop_waiting()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            if self.conn.trailing_data[0]:
                self._wait()  # a part of the next request (pipelined) is in: its deadline runs
            else:
                self.waiting_since = time.monotonic()  # idle: uvicorn's keep-alive timeout closes it

        def timeout_keep_alive_handler(self) -> None:
            self._stop_waiting()
            super().timeout_keep_alive_handler()

        def _wait(self) -> None:
            if self.deadline is None:
                self.waiting_since = time.monotonic()
                self.deadline = self.loop.call_later(request_timeout, self._too_slow)

        def _stop_waiting(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
            self.deadline = self.waiting_since = None

        def _too_slow(self) -> None:
            self.deadline = self.waiting_since = None
            if not self.transport.is_closing():
                self.transport.close()

        def _make_room(self) -> None:
            """Close the connection that has waited longest for a request (this one, when it is the only
            one waiting); with none waiting, answer this one 503 and close it."""
            waiting = [
                other
                for other in self.connections
                if isinstance(other, BoundedH11Protocol) and other.waiting_since is not None and other is not self
            ]
            if not waiting:
                self._stop_waiting()
                self.transport.write(_BUSY)
                self.transport.close()
                return
            oldest = min(waiting, key=lambda other: other.waiting_since or 0.0)
            oldest._stop_waiting()
            oldest.transport.close()

    return BoundedH11Protocol
