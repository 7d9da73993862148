"""`FakeReadHub`: a stand-in for the Hugging Face Hub's *read* side on 127.0.0.1, for tests that cannot reach the
Hub. It answers the requests huggingface_hub 2.4 makes for `snapshot_download(repo, allow_patterns=...)`,
`HfApi().get_safetensors_metadata(repo, revision=...)` and plain HTTP range reads of a file:

- `GET  /api/models?search=&author=`                   list_models: `id`, `sha` of each repo whose id contains the
  search text (case-insensitive) and whose owner is the author, in the order the repos were given
- `GET  /api/models/{org}/{name}/revision/{rev}`        repo_info: `id`, `sha` (the commit), `siblings`
  (a dataset repository, keyed `datasets/{org}/{name}` in `repos`: the same under `/api/datasets/...` and
  `/datasets/{org}/{name}/resolve/...`, as huggingface_hub asks for `repo_type="dataset"`)
- `GET  /api/models/{org}/{name}/tree/{rev}?recursive=` list_repo_tree: `type`, `path`, `size`, `oid`, `lfs`
- `HEAD /{org}/{name}/resolve/{rev}/{path}`             file metadata: `X-Repo-Commit`, `ETag`, `Content-Length`;
  for `*.safetensors` (stored in LFS on the Hub) a 302 to the storage server with `X-Linked-Etag`/`X-Linked-Size`
- `GET  /{org}/{name}/resolve/{rev}/{path}`             the file (small files), or the same 302 (`*.safetensors`)
- `GET  /blobs/{sha256}` on a *second* server           the storage (CDN) side: honours `Range: bytes=a-b` with 206
  and `Content-Range`, like the Hub's storage. Being another origin, huggingface_hub stops its HEAD there and
  httpx drops the Authorization header on the redirect, as with the real CDN.

Every request is recorded (method, path, Range header, Authorization, status, body bytes actually written), so a
test can assert what was read; `max_in_flight` is the most requests it held at once in the `latency` seconds it
waits before each answer (a client that waits for each answer before asking again never shows more than one). `push(repo, folder)` moves the repo's `main` to a
new commit holding that folder's files; the earlier commits stay readable by their sha, as on the Hub. `fault(request) -> mode | None` makes the storage misbehave on chosen range
requests: "short" / "long" (206 with one byte fewer / more than asked, Content-Range still claiming the asked
range), "full200" (ignores Range: 200 and the whole file), "wrong_range" (206 for another range), "500".
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qs, unquote, urlsplit

RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
CHUNK = 64 * 1024


@dataclass
class Req:
    server: str  # "hub" | "cdn"
    method: str
    path: str
    range: str | None
    auth: str | None
    status: int = 0
    sent: int = 0  # body bytes written to the socket


@dataclass
class RepoFile:
    path: str
    file: Path
    size: int
    sha256: str
    git_sha1: str

    @property
    def lfs(self) -> bool:
        return self.path.endswith(".safetensors")


def _digests(p: Path) -> tuple[str, str]:
    h = hashlib.sha256()
    g = hashlib.sha1(f"blob {p.stat().st_size}\0".encode())
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 22), b""):
            h.update(b)
            g.update(b)
    return h.hexdigest(), g.hexdigest()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a client hanging up mid-body is expected here
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class FakeReadHub:
    def __init__(self, repos: dict[str, Path], *, fault: Callable[[Req], str | None] | None = None,
                 latency: float = 0.0):
        self.requests: list[Req] = []
        self.fault = fault
        self.latency = latency
        self.in_flight = self.max_in_flight = 0
        self.repos: dict[str, tuple[str, dict[str, RepoFile]]] = {}
        self.history: dict[str, dict[str, dict[str, RepoFile]]] = {}  # repo -> earlier commit -> its files
        for repo_id, folder in repos.items():
            self.repos[repo_id] = (hashlib.sha1(repo_id.encode()).hexdigest(), self._scan(folder))
        self.blobs = {f.sha256: f for _, files in self.repos.values() for f in files.values()}
        self._lock = threading.Lock()
        self.hub = _Server(("127.0.0.1", 0), self._handler("hub"))
        self.cdn = _Server(("127.0.0.1", 0), self._handler("cdn"))
        self.url = f"http://127.0.0.1:{self.hub.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self.cdn.server_address[1]}"
        self._threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (self.hub, self.cdn)]

    def __enter__(self) -> "FakeReadHub":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()

    @staticmethod
    def _scan(folder: Path) -> dict[str, RepoFile]:
        files = {}
        for p in sorted(Path(folder).rglob("*")):
            if p.is_file():
                rel = p.relative_to(folder).as_posix()
                sha, sha1 = _digests(p)
                files[rel] = RepoFile(rel, p, p.stat().st_size, sha, sha1)
        return files

    def commit(self, repo_id: str) -> str:
        return self.repos[repo_id][0]

    def push(self, repo_id: str, folder: Path) -> str:
        """`main` of `repo_id` moves to a new commit holding `folder`'s files; returns the new commit sha."""
        files = self._scan(folder)
        with self._lock:
            old, old_files = self.repos[repo_id]
            self.history.setdefault(repo_id, {})[old] = old_files
            commit = hashlib.sha1(f"{repo_id}\0{old}".encode()).hexdigest()
            self.repos[repo_id] = (commit, files)
            self.blobs.update({f.sha256: f for f in files.values()})
        return commit

    def file_requests(self, name: str) -> list[Req]:
        """Every request for one repo file, on the Hub (resolve) and on the storage (by its blob)."""
        blobs = {f"/blobs/{f.sha256}" for _, files in self.repos.values() for p, f in files.items() if p == name}
        return [r for r in self.requests if r.path in blobs or (r.server == "hub" and r.path.endswith("/" + name)
                                                                 and "/resolve/" in r.path)]

    # ------------------------------------------------------------------ handler

    def _handler(self, server: str) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in separate writes: no 40 ms delayed-ACK stall

            def log_message(self, *a):  # keep pytest output clean
                pass

            def _record(self) -> Req:
                req = Req(server, self.command, unquote(urlsplit(self.path).path), self.headers.get("Range"),
                          self.headers.get("Authorization"))
                with hub._lock:
                    hub.requests.append(req)
                return req

            def _send(self, req: Req, code: int, body: bytes = b"", headers: dict | None = None,
                      length: int | None = None) -> None:
                req.status = code
                self.send_response(code)
                hdrs = {"Content-Length": str(len(body) if length is None else length), **(headers or {})}
                for k, v in hdrs.items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command != "HEAD" and body:
                    self.wfile.write(body)
                    req.sent += len(body)

            def _json(self, req: Req, code: int, obj, headers: dict | None = None) -> None:
                self._send(req, code, json.dumps(obj).encode(), {"Content-Type": "application/json", **(headers or {})})

            def _stream_file(self, req: Req, f: RepoFile, start: int, end: int) -> None:
                """Write bytes [start, end) of the file; stop quietly when the client hangs up."""
                try:
                    with open(f.file, "rb") as fh:
                        fh.seek(start)
                        left = end - start
                        while left > 0:
                            b = fh.read(min(CHUNK, left))
                            if not b:
                                break
                            self.wfile.write(b)
                            req.sent += len(b)
                            left -= len(b)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def do_HEAD(self):
                self._route()

            def do_GET(self):
                self._route()

            def _route(self):
                # Counted while waiting, before any answer: a client that waits for each answer before its next
                # request is never counted twice, however the server's threads are scheduled after answering.
                with hub._lock:
                    hub.in_flight += 1
                    hub.max_in_flight = max(hub.max_in_flight, hub.in_flight)
                try:
                    if hub.latency:
                        time.sleep(hub.latency)  # a round trip to a distant Hub, before anything is answered
                finally:
                    with hub._lock:
                        hub.in_flight -= 1
                self._answer()

            def _answer(self):
                req = self._record()
                if server == "cdn":
                    return self._cdn(req)
                url = urlsplit(self.path)
                parts = req.path.split("/")
                if parts == ["", "api", "models"] and self.command == "GET":
                    return self._list(req, parse_qs(url.query))
                if parts[:3] in (["", "api", "models"], ["", "api", "datasets"]) and len(parts) >= 7:
                    kind = "datasets/" if parts[2] == "datasets" else ""
                    return self._api(req, kind + "/".join(parts[3:5]), parts[5], "/".join(parts[6:]),
                                     parse_qs(url.query))
                if len(parts) >= 7 and parts[1] == "datasets" and parts[4] == "resolve":
                    return self._resolve(req, "/".join(parts[1:4]), parts[5], "/".join(parts[6:]))
                if len(parts) >= 6 and parts[3] == "resolve":
                    return self._resolve(req, "/".join(parts[1:3]), parts[4], "/".join(parts[5:]))
                return self._json(req, 404, {"error": f"FakeReadHub: no route {req.path}"})

            def _list(self, req: Req, query: dict) -> None:
                search = (query.get("search") or [""])[0].lower()
                author = (query.get("author") or [None])[0]
                limit = int((query.get("limit") or ["1000"])[0])
                found = [{"id": rid, "modelId": rid, "sha": commit, "private": False, "tags": []}
                         for rid, (commit, _) in hub.repos.items()
                         if not rid.startswith("datasets/")  # list_models lists models only
                         and search in rid.lower() and (author is None or rid.split("/")[0] == author)]
                return self._json(req, 200, found[:limit])

            def _repo(self, req: Req, repo_id: str, rev: str):
                if repo_id not in hub.repos:
                    self._json(req, 401, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                    return None
                commit, files = hub.repos[repo_id]
                if rev in hub.history.get(repo_id, {}):
                    return rev, hub.history[repo_id][rev]
                if rev not in ("main", commit):
                    self._json(req, 404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"})
                    return None
                return commit, files

            def _api(self, req: Req, repo_id: str, action: str, rev: str, query: dict) -> None:
                found = self._repo(req, repo_id, rev)
                if found is None:
                    return
                commit, files = found
                if action == "revision":
                    rid = repo_id.removeprefix("datasets/")
                    return self._json(req, 200, {"id": rid, "modelId": rid, "sha": commit, "private": False,
                                                 "siblings": [{"rfilename": p} for p in files]})
                if action == "tree":
                    return self._json(req, 200, [
                        {"type": "file", "path": f.path, "size": f.size, "oid": f.git_sha1,
                         **({"lfs": {"oid": f.sha256, "size": f.size, "pointerSize": 134}} if f.lfs else {})}
                        for f in files.values()])
                return self._json(req, 404, {"error": f"FakeReadHub: no api {action}"})

            def _resolve(self, req: Req, repo_id: str, rev: str, path: str) -> None:
                found = self._repo(req, repo_id, rev)
                if found is None:
                    return
                commit, files = found
                f = files.get(path)
                if f is None:
                    return self._json(req, 404, {"error": "Entry not found"},
                                      {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit})
                if f.lfs:  # like the Hub: LFS files redirect to the storage, metadata on the redirect itself
                    return self._send(req, 302, b"", {
                        "Location": f"{hub.cdn_url}/blobs/{f.sha256}?X-Amz-Signature=fake", "X-Repo-Commit": commit,
                        "X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size), "ETag": f'"{f.git_sha1}"'})
                headers = {"X-Repo-Commit": commit, "ETag": f'"{f.git_sha1}"', "Accept-Ranges": "bytes"}
                self._send(req, 200, b"", headers, length=f.size)
                if self.command == "GET":
                    self._stream_file(req, f, 0, f.size)

            def _cdn(self, req: Req) -> None:
                f = hub.blobs.get(req.path[len("/blobs/"):]) if req.path.startswith("/blobs/") else None
                if f is None:
                    return self._send(req, 404, b"no such blob")
                base = {"ETag": f'"{f.sha256}"', "Accept-Ranges": "bytes", "Content-Type": "binary/octet-stream"}
                if self.command == "HEAD":
                    return self._send(req, 200, b"", base, length=f.size)
                m = RANGE.match(req.range or "")
                mode = hub.fault(req) if hub.fault is not None else None
                if mode == "500":
                    return self._send(req, 500, b"internal error")
                if m is None or mode == "full200":
                    self._send(req, 200, b"", base, length=f.size)
                    return self._stream_file(req, f, 0, f.size)
                start = int(m.group(1))
                end = min(int(m.group(2)) + 1 if m.group(2) else f.size, f.size)
                if start >= f.size or end <= start:
                    return self._send(req, 416, b"", {"Content-Range": f"bytes */{f.size}"})
                claimed = (start, end)
                if mode == "wrong_range":
                    start, end = start + 1, min(end + 1, f.size)
                    claimed = (start, end)
                if mode in ("short", "long"):  # Content-Range still claims the requested span
                    end = end - 1 if mode == "short" else min(end + 1, f.size)
                self._send(req, 206, b"", {**base, "Content-Range": f"bytes {claimed[0]}-{claimed[1] - 1}/{f.size}"},
                           length=end - start)
                self._stream_file(req, f, start, end)

        return Handler


def hub_read_env(hub: FakeReadHub, home: Path, *, offline: bool = False) -> dict[str, str]:
    """The child process's environment: the fake Hub as HF_ENDPOINT, a fresh HF_HOME, no proxies, no Xet."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and "proxy" not in k.lower()}
    env.update({"HF_ENDPOINT": hub.url, "HF_HOME": str(home), "HF_TOKEN": "hf_fake_token", "HF_HUB_DISABLE_XET": "1",
                "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_ETAG_TIMEOUT": "5", "HF_HUB_DOWNLOAD_TIMEOUT": "5",
                "NO_PROXY": "127.0.0.1,localhost"})
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return env

