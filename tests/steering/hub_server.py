"""A tiny local stand-in for the Hugging Face Hub HTTP API that records what a client sends.

It answers the calls ``HfApi.create_repo`` + ``HfApi.upload_folder`` make, and serves the files
committed to it back to ``snapshot_download`` (repo info and ``resolve`` downloads) — repo creation, the README YAML validation,
the ``preupload`` query (every file is told to go as a *regular* git blob, so no LFS/Xet transfer
is involved), and the ndjson ``commit`` whose file entries carry base64 contents — and records
each request. Any other request gets a 404 and is recorded too, so a test sees protocol drift.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


#: the commit every answer names
COMMIT = "0" * 40


class RecordingHub:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.files: dict[str, bytes] = {}
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def _reply(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _file(self, head: bool) -> bool:
                """Serve a file committed earlier (``/{repo}/resolve/{revision}/{path}``), as the Hub
                does for ``hf_hub_download``; False when the path is no such request."""
                path = self.path.split("?")[0]
                if "/resolve/" not in path:
                    return False
                name = path.split("/resolve/", 1)[1].split("/", 1)[1]
                data = hub.files.get(name)
                if data is None:
                    self._reply(404, {"error": "not found"})
                    return True
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
                self.end_headers()
                if not head:
                    self.wfile.write(data)
                return True

            def do_HEAD(self) -> None:
                hub.requests.append({"method": "HEAD", "path": self.path, "auth": self.headers.get("authorization")})
                if not self._file(head=True):
                    self._reply(404, {"error": "not found"})

            def do_GET(self) -> None:
                hub.requests.append({"method": "GET", "path": self.path, "auth": self.headers.get("authorization")})
                if self._file(head=False):
                    return
                path = self.path.split("?")[0]
                if "/tree/" in path:  # list_repo_tree: the committed files
                    return self._reply(200, [{"type": "file", "path": f, "size": len(data),
                                              "oid": hashlib.sha1(data).hexdigest()} for f, data in hub.files.items()])
                if "/revision/" in path:  # repo_info, as snapshot_download asks it: the committed files
                    repo = path.split("/api/models/")[1].split("/revision/")[0]
                    return self._reply(200, {"id": repo, "sha": COMMIT, "siblings": [{"rfilename": f} for f in hub.files]})
                if "/discussions/" in path:  # the pull request opened by create_pr=True
                    repo = path.split("/api/models/")[1].split("/discussions/")[0]
                    num = int(path.rsplit("/", 1)[1])
                    return self._reply(200, {
                        "title": "steered", "num": num, "author": {"name": "alice"}, "status": "draft",
                        "createdAt": "2026-01-01T00:00:00.000Z", "repo": {"name": repo, "type": "model"},
                        "isPullRequest": True, "events": [], "filesWithConflicts": [],
                        "changes": {"base": "refs/heads/main"}})
                self._reply(404, {"error": "not found"})

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                entry = {"method": "POST", "path": self.path, "auth": self.headers.get("authorization")}
                hub.requests.append(entry)
                path = self.path.split("?")[0]
                if path == "/api/repos/create":
                    body = json.loads(raw)
                    entry["json"] = body
                    repo = f"{body.get('organization')}/{body['name']}" if body.get("organization") else body["name"]
                    return self._reply(200, {"url": f"http://{self.headers['Host']}/{repo}", "name": repo})
                if path == "/api/validate-yaml":  # upload_folder checks the README's YAML first
                    entry["json"] = json.loads(raw)
                    return self._reply(200, {"warnings": [], "errors": []})
                if "/preupload/" in path:
                    body = json.loads(raw)
                    entry["json"] = body
                    return self._reply(200, {"files": [
                        {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in body["files"]]})
                if path.endswith("/discussions"):  # create_pull_request
                    entry["json"] = json.loads(raw)
                    return self._reply(200, {"num": 1})
                if "/branch/" in path:  # create_branch
                    entry["branch"] = path.rsplit("/branch/", 1)[1]
                    return self._reply(200, {})
                if "/commit/" in path:
                    entry["revision"] = path.rsplit("/commit/", 1)[1]
                    entry["create_pr"] = "create_pr=1" in self.path
                    lines = [json.loads(x) for x in raw.decode().splitlines() if x.strip()]
                    entry["ndjson"] = lines
                    for item in lines:
                        if item.get("key") == "file":
                            hub.files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                    repo = path.split("/api/models/")[1].split("/commit/")[0]
                    return self._reply(200, {"commitUrl": f"http://{self.headers['Host']}/{repo}/commit/{'0' * 40}",
                                             "commitOid": "0" * 40,
                                             "pullRequestUrl": f"http://{self.headers['Host']}/{repo}/discussions/1"
                                             if entry["create_pr"] else None})
                self._reply(404, {"error": "not found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "RecordingHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class SilentEndpoint:
    """An endpoint that accepts TCP connections (the kernel completes the handshake for the listen
    backlog) but never reads or answers: a client without a timeout waits forever."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def __enter__(self) -> "SilentEndpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()


def refused_url() -> str:
    """A local URL whose port has no listener (connections are refused at once)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"
