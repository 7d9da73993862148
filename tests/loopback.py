"""A loopback HTTP server for the tests' stand-ins of a running vLLM or SGLang server (tests/test_server_standin.py,
tests/test_server_live.py, tests/test_sglang_parsing.py): the handler, the threading server and the shutdown,
written once. Standard library only: the core tier (scripts/test.sh, no vLLM or torch) imports it too."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

# (method, path, the request's JSON body or None for a GET) -> (status, body) or (status, body, content type);
# a str body is sent as it is, anything else as JSON
Answer = Callable[[str, str, Any], tuple]


class Loopback:
    """Serves `answer` on 127.0.0.1 (a free port, `.url`) from a daemon thread until `close()`; also a context
    manager."""

    def __init__(self, answer: Answer):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep pytest's output clean
                pass

            def _reply(self, code: int, body: Any, ctype: str = "application/json") -> None:
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._reply(*answer("GET", self.path, None))

            def do_POST(self):
                self._reply(*answer("POST", self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "Loopback":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
