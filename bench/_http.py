"""A minimal HTTP/1.1 keep-alive client for load generation (figure 8), cheaper per request than httpx.

At a few thousand requests per second a Python load generator on a 2-core machine is itself the
bottleneck; httpx spends most of its time in its own machinery. This client writes a prepared
request and reads the status line, the headers and a ``Content-Length`` body off one asyncio
stream, nothing more, so the floor (a bare FastAPI endpoint) is measured by the server, not by the
client. It speaks only what uvicorn answers: no chunked bodies, no redirects, no TLS.
"""

from __future__ import annotations

import asyncio

__all__ = ["Conn"]


class Conn:
    """One keep-alive connection to ``127.0.0.1:port``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._r = reader
        self._w = writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        """Connect to ``127.0.0.1:port``."""
        r, w = await asyncio.open_connection("127.0.0.1", port)
        return cls(r, w)

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """POST ``body`` to ``path``; return (status, response body).

        Raises:
            ConnectionError: the server closed the connection or answered something unreadable.
        """
        head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        self._w.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        status_line = await self._r.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        try:
            status = int(status_line.split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise ConnectionError(f"unreadable status line {status_line!r}") from None
        length = 0
        while True:
            line = await self._r.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        data = await self._r.readexactly(length) if length else b""
        return status, data

    async def close(self) -> None:
        """Close the connection."""
        self._w.close()
        try:
            await self._w.wait_closed()
        except (ConnectionError, OSError):
            pass
