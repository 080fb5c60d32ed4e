"""The HTTP endpoints of a following run (``--metrics-port``): ``/metrics`` (Prometheus, from
prometheus_client's registry), ``/healthz`` (200 while the process runs) and ``/readyz`` (200 while the
run follows its change log and every checkpoint it handed to the destination more than a bound ago has
been committed; 503 with the reason otherwise: loading, starting again, or the destination behind).

Served on a thread of their own, quietly (no request is logged to stderr)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # stderr carries olake's own lines only
        pass


def serve_endpoints(host: str, port: int, registry: CollectorRegistry,
                    readiness: Callable[[], str | None]) -> WSGIServer:
    """Serve the endpoints on ``host``:``port`` (OSError if that cannot be bound); ``readiness`` says why
    the run is not ready, or None when it is."""
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict, start_response: Callable) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            return _answer(start_response, "200 OK", "ok")
        if path == "/readyz":
            reason = readiness()
            return _answer(start_response, "200 OK", "ready") if reason is None else \
                _answer(start_response, "503 Service Unavailable", reason)
        return metrics_app(environ, start_response)

    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    server_class = type("EndpointServer", (_Server,), {"address_family": family})
    server = make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="olake-endpoints", daemon=True).start()
    return server


def _answer(start_response: Callable, status: str, text: str) -> list[bytes]:
    body = (text + "\n").encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
    return [body]
