"""The HTTP side of the APISIX double: nginx's pages and headers, a threaded server that can cut its
connections (a restart), and one handler per plane (admin, data)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from gitsync.schema.jsonschema import cjson_encode

_NGINX_REASONS = {
    403: "Forbidden", 404: "Not Found", 405: "Not Allowed", 413: "Request Entity Too Large",
    500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Temporarily Unavailable",
    504: "Gateway Time-out",
}
CORS = (
    ("Access-Control-Allow-Origin", "*"),
    ("Access-Control-Allow-Credentials", "true"),
    ("Access-Control-Expose-Headers", "*"),
    ("Access-Control-Max-Age", "3600"),
)
PREFLIGHT = (
    ("Access-Control-Allow-Origin", "*"),
    ("Access-Control-Allow-Methods", "POST, GET, PUT, OPTIONS, DELETE, PATCH"),
    ("Access-Control-Max-Age", "3600"),
    ("Access-Control-Allow-Headers", "*"),
    ("Access-Control-Allow-Credentials", "true"),
)

Headers = list[tuple[str, str]]


def nginx_page(status: int) -> bytes:
    """nginx's own error page, as APISIX sends it for unrouted paths and crashes (its footer added)."""
    title = f"{status} {_NGINX_REASONS.get(status, 'Error')}"
    return (f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1>"
            "</center>\r\n<hr><center>openresty</center>\r\n"
            '<p><em>Powered by <a href="https://apisix.apache.org/">APISIX</a>.</em></p></body>\r\n'
            "</html>\r\n").encode()


#: nginx's ``charset utf-8`` adds the charset to these types (the admin JSON has none).
HTML, TEXT = "text/html; charset=utf-8", "text/plain; charset=utf-8"
CHARSET_TYPES = ("text/html", "text/xml", "text/plain", "text/vnd.wap.wml", "application/javascript",
                  "application/rss+xml")  # nginx's default charset_types


def json_body(value: Mapping[str, Any]) -> bytes:
    """``core.response.exit(status, table)``: cjson text and a newline."""
    return (cjson_encode(value) + "\n").encode()


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str | None = "application/json"
    cors: bool = True  # the preflight carries its own CORS set
    upstream: dict[str, Any] | None = None  # the data plane's matched upstream (for `forward`)


def nginx_reply(status: int) -> Reply:
    return Reply(status, nginx_page(status), content_type=HTML)


class Planes(Protocol):
    """What a server of the double serves: its version (the Server header) and one plane per port."""

    version: str

    def serve_admin(self, handler: Handler) -> None: ...

    def serve_proxy(self, handler: Handler) -> None: ...


class DoubleServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 double: Planes) -> None:
        self.double = double
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.open_sockets: set[socket.socket] = set()
        self.sockets_lock = threading.Lock()
        super().__init__(address, handler)

    def close_clients(self) -> None:
        """Cut every open connection, as a gateway restart does."""
        with self.sockets_lock:
            for sock in list(self.open_sockets):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self.open_sockets.clear()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes: no delayed-ACK stall
    server: DoubleServer
    plane = "admin"

    def setup(self) -> None:
        super().setup()
        with self.server.sockets_lock:
            self.server.open_sockets.add(self.connection)

    def finish(self) -> None:
        with self.server.sockets_lock:
            self.server.open_sockets.discard(self.connection)
        super().finish()

    def version_string(self) -> str:
        return f"APISIX/{self.server.double.version}"

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the double keeps its own request log (without query strings, which may hold keys)."""

    def _handle(self) -> None:
        double = self.server.double
        if self.plane == "admin":
            double.serve_admin(self)
        else:
            double.serve_proxy(self)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = _handle

    def reply(self, reply: Reply, *, cors: bool = True) -> None:
        self.send_response(reply.status)
        if reply.content_type and reply.status != 204:
            self.send_header("Content-Type", reply.content_type)
        for name, value in reply.headers:
            self.send_header(name, value)
        if cors:
            for name, value in CORS:
                self.send_header(name, value)
        if reply.status != 204:
            self.send_header("Content-Length", str(len(reply.body)))
        if self.close_connection:  # nginx says so (a 413's body was not read): no client reuses it
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD" and reply.status != 204:
            self.wfile.write(reply.body)

    def read_body(self) -> bytes:
        """The request body, by Content-Length or chunked transfer coding (nginx accepts both)."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""


class ProxyHandler(Handler):
    plane = "proxy"
