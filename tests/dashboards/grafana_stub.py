"""A stand-in for the Grafana HTTP API (no Grafana server can run here).

It keeps folders, datasources and dashboards in memory, answers the endpoints
`hangar dashboards push` uses with the shapes Grafana's HTTP API documentation gives
(https://grafana.com/docs/grafana/latest/developers/http_api/), checks the bearer token,
and records every exchange (method, path, status) so a test can compare a push with the
recorded exchange in tests/fixtures/grafana-push.json.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class GrafanaStub(ThreadingHTTPServer):
    """The stub server; `exchanges` lists (method, path, status) in order."""

    daemon_threads = True

    def __init__(self, token: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.token = token
        self.folders: dict[str, dict[str, Any]] = {}
        self.datasources: dict[str, dict[str, Any]] = {}
        self.dashboards: dict[str, dict[str, Any]] = {}
        self.exchanges: list[tuple[str, str, int]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> GrafanaStub:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self


class _Handler(BaseHTTPRequestHandler):
    server: GrafanaStub

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        # Recorded before the reply: the client may be done the moment it has the reply.
        self.server.exchanges.append((self.command, self.path.split("?")[0], status))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")

    def _authorised(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {self.server.token}":
            return True
        self._send(401, {"message": "invalid API key"})
        return False

    def do_GET(self) -> None:
        path, s = self.path.split("?")[0], self.server
        if path == "/api/health":
            self._send(200, {"database": "ok", "version": "11.0.0"})
            return
        if path == "/api/frontend/settings":  # grafana-client reads the version here
            self._send(200, {"buildInfo": {"version": "11.0.0"}})
            return
        if not self._authorised():
            return
        if path.startswith("/api/folders/"):
            uid = path.rsplit("/", 1)[1]
            if uid in s.folders:
                self._send(200, s.folders[uid])
            else:
                self._send(404, {"message": "folder not found"})
        elif path.startswith("/api/datasources/uid/"):
            uid = path.rsplit("/", 1)[1]
            if uid in s.datasources:
                self._send(200, s.datasources[uid])
            else:
                self._send(404, {"message": "Data source not found"})
        elif path.startswith("/api/dashboards/uid/"):
            uid = path.rsplit("/", 1)[1]
            if uid in s.dashboards:
                self._send(200, s.dashboards[uid])
            else:
                self._send(404, {"message": "Dashboard not found"})
        else:
            self._send(404, {"message": f"no route {path}"})

    def do_POST(self) -> None:
        path, s = self.path.split("?")[0], self.server
        if not self._authorised():
            return
        body = self._body()
        if path == "/api/folders":
            folder = {"id": len(s.folders) + 1, "uid": body["uid"], "title": body["title"]}
            s.folders[body["uid"]] = folder
            self._send(200, folder)
        elif path == "/api/datasources":
            ds = {k: v for k, v in body.items() if k != "secureJsonData"}
            ds["id"] = len(s.datasources) + 1
            s.datasources[body["uid"]] = ds
            self._send(200, {"id": ds["id"], "message": "Datasource added", "name": ds["name"]})
        elif path == "/api/dashboards/db":
            dash, uid = body["dashboard"], body["dashboard"]["uid"]
            version = s.dashboards.get(uid, {}).get("dashboard", {}).get("version", 0) + 1
            s.dashboards[uid] = {
                "dashboard": {**dash, "id": 7, "version": version},
                "meta": {"folderUid": body.get("folderUid"), "version": version},
            }
            self._send(200, {"id": 7, "uid": uid, "status": "success", "version": version})
        else:
            self._send(404, {"message": f"no route {path}"})

    def do_PUT(self) -> None:
        path, s = self.path.split("?")[0], self.server
        if not self._authorised():
            return
        body = self._body()
        if path.startswith("/api/datasources/uid/"):
            uid = path.rsplit("/", 1)[1]
            s.datasources[uid] = {
                **{k: v for k, v in body.items() if k != "secureJsonData"},
                "id": s.datasources[uid]["id"],
            }
            self._send(200, {"message": "Datasource updated"})
        elif path.startswith("/api/folders/"):
            uid = path.rsplit("/", 1)[1]
            s.folders[uid] = {**s.folders[uid], "title": body["title"]}
            self._send(200, s.folders[uid])
        else:
            self._send(404, {"message": f"no route {path}"})
