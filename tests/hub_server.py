"""A tiny local stand-in for the Hugging Face Hub HTTP API that records what a client sends.

It answers the calls ``HfApi.create_repo`` + ``HfApi.upload_folder`` make — repo creation, the README YAML validation,
the ``preupload`` query (every file is told to go as a *regular* git blob, so no LFS/Xet transfer
is involved), and the ndjson ``commit`` whose file entries carry base64 contents — and records
each request. Any other request gets a 404 and is recorded too, so a test sees protocol drift.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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

            def do_GET(self) -> None:
                hub.requests.append({"method": "GET", "path": self.path, "auth": self.headers.get("authorization")})
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
                if "/commit/" in path:
                    lines = [json.loads(x) for x in raw.decode().splitlines() if x.strip()]
                    entry["ndjson"] = lines
                    for item in lines:
                        if item.get("key") == "file":
                            hub.files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                    repo = path.split("/api/models/")[1].split("/commit/")[0]
                    return self._reply(200, {"commitUrl": f"http://{self.headers['Host']}/{repo}/commit/{'0' * 40}",
                                             "commitOid": "0" * 40,
                                             "pullRequestUrl": None})
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
