"""The web server: daphne, with request bodies bounded before they are read.

`python -m webapp.core.server [daphne's arguments]` is daphne's own command line (the launcher
passes `--fd N`: one listening socket, opened by the launcher, shared by every web process).

Daphne (Twisted underneath) reads a whole request body into a buffer before the application sees
the request, so an application-level limit comes too late: a 50 MB upload is read whole before
Django can refuse it. Here each request checks its limit (webapp.core.limits) as soon as its
headers are in: a Content-Length over the limit is answered 413 at once, without reading the
body (and without "100 Continue"); a body without a length (chunked) is counted as it arrives
and refused when it passes the limit. Then the connection stops reading and closes shortly
after, so the client can read the answer but cannot push the rest.
"""

from __future__ import annotations

import logging
import sys

from daphne import http_protocol
from daphne import server as daphne_server

logger = logging.getLogger(__name__)

LINGER_S = 1.0  # time for the 413 to reach the client before the connection closes


class _Discard:
    """What the body of a refused request is written to."""

    def write(self, data: bytes) -> None:
        pass

    def seek(self, *args) -> int:
        return 0

    def read(self, *args) -> bytes:
        return b""

    def close(self) -> None:
        pass


class BoundedRequest(http_protocol.WebRequest):
    refused = False
    received = 0

    def gotLength(self, length):
        from webapp.core.limits import body_limit

        self.path_only = (getattr(self.channel, "_path", b"") or b"").split(b"?", 1)[0].decode("latin-1")
        self.body_limit = body_limit(self.path_only)
        if length is not None and length > self.body_limit.limit:
            self.refuse(length)
            return
        super().gotLength(length)

    def handleContentChunk(self, data):
        if self.refused:
            return
        self.received += len(data)
        if self.received > self.body_limit.limit:
            self.refuse(None)
            return
        super().handleContentChunk(data)

    def requestReceived(self, command, path, version):
        if self.refused:
            return  # answered already; the application never sees it
        super().requestReceived(command, path, version)

    def refuse(self, size: int | None) -> None:
        from twisted.internet import reactor

        from webapp.core.limits import too_large_response

        self.refused = True
        self.content = _Discard()
        # Twisted would answer "Expect: 100-continue" right after this: the client must not send.
        self.requestHeaders.removeHeader(b"Expect")
        kind, body = too_large_response(self.path_only, self.body_limit, size)
        transport = self.channel.transport
        transport.write(
            b"HTTP/1.1 413 Content Too Large\r\nContent-Type: "
            + kind
            + b"\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + body
        )
        logger.warning(
            "refused a %s-byte body for %s (limit %d)",
            size if size is not None else "chunked",
            self.path_only,
            self.body_limit.limit,
        )
        try:
            transport.pauseProducing()  # stop reading: the rest of the body stays with the client
        except AttributeError:
            pass
        reactor.callLater(LINGER_S, self.channel.loseConnection)


class BoundedHTTPFactory(http_protocol.HTTPFactory):
    def buildProtocol(self, addr):
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = BoundedRequest
        return protocol


def main(argv: list[str] | None = None) -> None:
    # daphne.server.Server builds its factory from this module-level name.
    daphne_server.HTTPFactory = BoundedHTTPFactory
    from daphne.cli import CommandLineInterface

    CommandLineInterface().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
