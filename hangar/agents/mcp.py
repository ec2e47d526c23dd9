"""MCP servers as pinned plugins of an agent.

An agent's ``mcp:`` names stdio MCP servers, each pinned: a package from PyPI by exact
version with the sha256 of its wheel (``package: handbook-mcp==0.3.1``), or one Python
file pinned by sha256 (``file: servers/handbook.py``) with the PyPI packages it needs by
exact version (``requirements: [mcp==2.3.0]``) and data files pinned the same way. The
server's identity (pins, versions, arguments) is part of the agent's settings digest, so
a changed server is a new trial.

On each node, `install` resolves the server once (pip on the host, for the sandbox's
Python: ``python``, default 3.11, Debian bookworm's), checks the pinned artifact's
sha256, and keeps it in the node's cache; the trial mounts it read-only at
``/opt/hangar/mcp/<name>`` (`mount`). The server runs in the sandbox, so the network stays
off. Each agent is told of it natively (`native_config`): Codex in ``~/.codex/config.toml``,
Claude Code with ``--mcp-config``, any other command agent in the JSON file named by
``HANGAR_MCP_CONFIG``, and hangar's chat agent as tools (`McpTools`): each call runs a
small client in the sandbox that starts the server, calls the tool and exits.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hangar.errors import ConfigError, HangarError
from hangar.files import check_pin
from hangar.wheels import console_script, install_target, launcher, normal_name

#: Where a server is mounted in the sandbox.
ROOT = "/opt/hangar/mcp"
_REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[^=\s;]+$")


class McpError(HangarError):
    """An MCP server that cannot be installed or does not start."""


class PinnedData(BaseModel):
    """A data file a server reads (an index, a snapshot), pinned by sha256."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str
    """Its path, relative to the file that names the agent."""
    sha256: str
    """``sha256:<hex>`` of its bytes."""
    b64: str = ""
    """Its bytes (base64), read where the agent is parsed (they travel with the agent)."""

    @field_validator("sha256")
    @classmethod
    def _pin(cls, value: str) -> str:
        return check_pin(value)


class McpServer(BaseModel):
    """One pinned stdio MCP server (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    package: str | None = None
    """``NAME==VERSION`` on PyPI (its wheel is the pinned artifact)."""
    file: str | None = None
    """Or one Python file, relative to the file that names the agent."""
    sha256: str
    """``sha256:<hex>`` of the package's wheel, or of the file."""
    requirements: tuple[str, ...] = ()
    """More PyPI packages it needs, each ``NAME==VERSION``."""
    data: tuple[PinnedData, ...] = ()
    """Data files it reads, mounted beside it (``/opt/hangar/mcp/<name>/data/<file name>``)."""
    command: str | None = None
    """The package's console script to run (default: its only one)."""
    args: tuple[str, ...] = ()
    """Its arguments."""
    env: dict[str, str] = Field(default_factory=dict)
    """Its environment (never a secret: the sandbox sees it)."""
    python: str = "3.11"
    """The sandbox's Python, ``MAJOR.MINOR``: what the server's wheels are resolved for."""
    source_b64: str = ""
    """The file's bytes (base64), read where the agent is parsed."""

    @field_validator("sha256")
    @classmethod
    def _pin(cls, value: str) -> str:
        return check_pin(value)

    @field_validator("requirements")
    @classmethod
    def _exact(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for req in value:
            if not _REQUIREMENT.match(req):
                raise ValueError(f"a requirement is NAME==VERSION (exact), got {req!r}")
        return value

    @field_validator("python")
    @classmethod
    def _python(cls, value: str) -> str:
        if not re.fullmatch(r"3\.\d{1,2}", value):
            raise ValueError(f"python is MAJOR.MINOR (3.11), got {value!r}")
        return value

    @model_validator(mode="after")
    def _one(self) -> McpServer:
        if (self.package is None) == (self.file is None):
            raise ValueError("give either `package: NAME==VERSION` or `file: PATH`")
        if self.package is not None and not _REQUIREMENT.match(self.package):
            raise ValueError(f"package is NAME==VERSION (exact), got {self.package!r}")
        if self.file is not None and not self.file.endswith(".py"):
            raise ValueError(f"a server file is a Python file (.py), got {self.file!r}")
        return self

    @property
    def requirement_list(self) -> list[str]:
        """Everything pip resolves for it."""
        return [*([self.package] if self.package else []), *self.requirements]

    def identity(self) -> dict[str, Any]:
        """What the settings record of it (pins and versions, not the bytes)."""
        return self.model_dump(
            mode="json",
            exclude={"source_b64": True, "data": {"__all__": {"b64"}}},
            exclude_defaults=True,
        )


#: What the digest of an agent leaves out of its servers (their bytes are pinned by sha256).
DIGEST_EXCLUDE: dict[str, Any] = {
    "mcp": {"__all__": {"source_b64": True, "data": {"__all__": {"b64"}}}}
}


def read_pinned(data: dict[str, Any], base: Path | None, where: str) -> dict[str, Any]:
    """An agent's raw ``mcp:`` mapping with each file's bytes read in and checked against
    its pin (relative to `base`, the folder of the file naming the agent)."""
    servers = data.get("mcp")
    if not servers:
        return data
    if not isinstance(servers, dict):
        raise ConfigError(f"{where}: `mcp` maps server names to servers")
    out: dict[str, Any] = {}
    for name, raw in servers.items():
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: mcp server {name!r} must be a mapping")
        server = dict(raw)
        if server.get("file"):
            server["source_b64"] = _read(base, str(server["file"]), server.get("sha256"), where)
        server["data"] = [
            {**d, "b64": _read(base, str(d.get("file")), d.get("sha256"), where)}
            for d in server.get("data") or []
            if isinstance(d, dict)
        ]
        out[str(name)] = server
    return {**data, "mcp": out}


def _read(base: Path | None, file: str, pin: Any, where: str) -> str:
    path = (base or Path()) / file
    if not path.is_file():
        raise ConfigError(f"{where}: mcp file not found: {path}")
    raw = path.read_bytes()
    got = "sha256:" + hashlib.sha256(raw).hexdigest()
    if pin != got:
        raise ConfigError(
            f"{where}: {path} has sha256 {got}, its pin says {pin}: pin the file you mean"
        )
    return base64.b64encode(raw).decode("ascii")


# -- installing on a node --------------------------------------------------------------


class Installed(BaseModel):
    """A server ready for an agent: resolved on this node (its folder and how it
    starts), or a task's own (a command of its image, or an address on the trial's
    network)."""

    name: str
    folder: Path | None = None
    """The host folder mounted at `target` (None: nothing to mount, a task's server)."""
    argv: list[str] = Field(default_factory=list)
    """Its command line in the sandbox (stdio)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Its environment in the sandbox."""
    wheels: dict[str, str] = Field(default_factory=dict)
    """Every wheel installed for it -> its sha256."""
    transport: Literal["stdio", "sse", "streamable-http"] = "stdio"
    """How it is spoken to: its stdin and stdout, or HTTP at `url`."""
    url: str | None = None
    """Its address, for the HTTP transports."""

    @property
    def target(self) -> str:
        """Where it is mounted in the sandbox."""
        return f"{ROOT}/{self.name}"


def install(name: str, server: McpServer, cache: Path) -> Installed:
    """`server` resolved on this node, once (see the module docstring); an artifact whose
    sha256 is not the pin, or a resolution that fails, is an `McpError` saying so."""
    key = hashlib.sha256(json.dumps([name, server.model_dump(mode="json")]).encode())
    folder = cache / "mcp" / key.hexdigest()[:32]
    record = folder / "installed.json"
    if record.is_file():
        return Installed.model_validate_json(record.read_text())
    work = Path(tempfile.mkdtemp(prefix="mcp-", dir=_ensure(cache / "mcp")))
    try:
        site = work / "site"
        wheels = work / "wheels"
        if server.requirement_list:
            install_target(server.requirement_list, server.python, wheels, site, McpError)
        found = {
            w.name: "sha256:" + hashlib.sha256(w.read_bytes()).hexdigest()
            for w in sorted(wheels.glob("*.whl"))
        }
        target = f"{ROOT}/{name}"
        env = {
            "PYTHONPATH": f"{target}/site",
            "PYTHONDONTWRITEBYTECODE": "1",
            **server.env,
        }
        if server.package is not None:
            pkg = normal_name(server.package.split("==")[0])
            version = server.package.split("==")[1]
            mine = [w for w in found if normal_name(w.split("-")[0]) == pkg and f"-{version}-" in w]
            if not mine:
                raise McpError(
                    f"no wheel of {server.package} was resolved (wheels: {sorted(found)})"
                )
            if found[mine[0]] != server.sha256:
                raise McpError(
                    f"the artifact of {server.package} ({mine[0]}) has {found[mine[0]]}; the pin "
                    f"says {server.sha256}: pin the artifact you mean"
                )
            entry = console_script(site, server.package, server.command, McpError)
            argv = ["python3", "-c", launcher(entry), *server.args]
        else:
            raw = base64.b64decode(server.source_b64)
            if "sha256:" + hashlib.sha256(raw).hexdigest() != server.sha256:
                raise McpError(f"the server file of {name} does not match its pin")
            (work / "server.py").write_bytes(raw)
            argv = ["python3", f"{target}/server.py", *server.args]
        if server.data:
            (work / "data").mkdir()
        for d in server.data:
            raw = base64.b64decode(d.b64)
            if "sha256:" + hashlib.sha256(raw).hexdigest() != d.sha256:
                raise McpError(f"the data file {d.file} of {name} does not match its pin")
            (work / "data" / PurePosixPath(d.file).name).write_bytes(raw)
        shutil.rmtree(wheels, ignore_errors=True)
        _compile(work, server.python)
        installed = Installed(name=name, folder=folder, argv=argv, env=env, wheels=found)
        (work / "installed.json").write_text(installed.model_dump_json())
        _make_readable(work)
        try:
            work.rename(folder)
        except OSError:  # another trial of this node installed it first
            shutil.rmtree(work, ignore_errors=True)
        return Installed.model_validate_json(record.read_text())
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def _compile(folder: Path, python: str) -> None:
    """Byte-compile the server's code when this host's Python is the sandbox's (the mount
    is read-only: without it each start compiles everything again, seconds an agent CLI
    may not wait before it asks the server for its tools)."""
    import compileall

    if f"{sys.version_info.major}.{sys.version_info.minor}" == python:
        compileall.compile_dir(str(folder), quiet=2, workers=1)


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _make_readable(root: Path) -> None:
    """Every file readable (and folders enterable) by the sandbox user."""
    for dirpath, _dirs, files in os.walk(root):
        Path(dirpath).chmod(0o755)  # the sandbox user reads it (a read-only mount)
        for f in files:
            (Path(dirpath) / f).chmod(0o644)


# -- telling agents of their servers --------------------------------------------------


class NativeConfig(NamedTuple):
    """A file to write in the sandbox before the agent starts, and env to give it."""

    path: str
    """``~`` for the sandbox HOME."""
    text: str
    env: dict[str, str]


def mcp_json(servers: list[Installed]) -> str:
    """The ``mcpServers`` JSON Claude Code (and most MCP clients) read."""
    return json.dumps({"mcpServers": {s.name: _entry(s) for s in servers}}, indent=1)


def _entry(server: Installed) -> dict[str, Any]:
    if server.transport == "stdio":
        return {"command": server.argv[0], "args": server.argv[1:], "env": server.env}
    return {"type": "sse" if server.transport == "sse" else "http", "url": server.url}


def codex_toml(servers: list[Installed]) -> str:
    """Codex's ``[mcp_servers.<name>]`` tables (JSON strings are TOML basic strings)."""
    lines = []
    for s in servers:
        if s.transport != "stdio":
            lines += [f"[mcp_servers.{json.dumps(s.name)}]", f"url = {json.dumps(s.url)}", ""]
            continue
        lines += [
            f"[mcp_servers.{json.dumps(s.name)}]",
            f"command = {json.dumps(s.argv[0])}",
            f"args = [{', '.join(json.dumps(a) for a in s.argv[1:])}]",
            "startup_timeout_sec = 60",
            "env = { " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}"
                               for k, v in s.env.items()) + " }",
            "",
        ]  # fmt: skip
    return "\n".join(lines)


def native_config(
    preset: str | None, servers: list[Installed], *, flagged: bool = True
) -> NativeConfig:
    """How an agent CLI of `preset` is told of its servers. `flagged`: its command points
    at hangar's config (an agent with servers of its own); without, Claude Code is told in
    its user scope (``~/.claude.json``), as for servers only the task gives."""
    if preset == "codex":
        return NativeConfig("~/.codex/config.toml", codex_toml(servers), {})
    path = "~/.claude.json" if preset == "claude" and not flagged else "~/.hangar/mcp.json"
    return NativeConfig(path, mcp_json(servers), {"HANGAR_MCP_CONFIG": path})


# -- the chat agent's tools: a one-shot client in the sandbox --------------------------

#: The client run in the sandbox (standard library only): start the server, initialize,
#: send one request, print the response as JSON, stop the server.
CLIENT = r"""
import json, os, subprocess, sys, threading
argv, env, method, params = json.loads(sys.argv[1])
if not argv:
    exec(HTTP)
    sys.exit(0)
p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, env={**os.environ, **env}, text=True)
err = []
threading.Thread(target=lambda: err.extend(p.stderr), daemon=True).start()
def send(m):
    p.stdin.write(json.dumps(m) + "\n"); p.stdin.flush()
def recv(i):
    for line in p.stdout:
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if isinstance(m, dict) and m.get("id") == i:
            return m
    return {"error": {"message": "the server ended: " + "".join(err)[-600:]}}
try:
    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "hangar", "version": "1"}}})
    init = recv(1)
    if "error" in init:
        print(json.dumps({"error": init["error"]})); sys.exit(0)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": method, "params": params})
    print(json.dumps(recv(2)))
finally:
    p.kill()
"""


#: The client's HTTP transports (standard library only): ``env`` holds the transport and
#: the URL. Streamable HTTP posts each message (a JSON or an event-stream answer, the
#: session in ``Mcp-Session-Id``); SSE reads the stream, whose first event names the
#: URL messages are posted to, and answers arrive on the stream.
HTTP = r"""
import urllib.parse, urllib.request
transport, url = env["transport"], env["url"]
ACCEPT = "application/json, text/event-stream"
def events(stream):
    data = []
    for raw in stream:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            yield "\n".join(data)
            data = []
def answer(resp, i):
    if "text/event-stream" not in resp.headers.get("Content-Type", ""):
        body = resp.read()
        return json.loads(body) if body.strip() else None
    for data in events(resp):
        m = json.loads(data)
        if isinstance(m, dict) and m.get("id") == i:
            return m
def post(target, message, session=None):
    headers = {"Content-Type": "application/json", "Accept": ACCEPT}
    if session:
        headers["Mcp-Session-Id"] = session
    req = urllib.request.Request(target, json.dumps(message).encode(), headers)
    return urllib.request.urlopen(req, timeout=50)
init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "hangar", "version": "1"}}}
done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
ask = {"jsonrpc": "2.0", "id": 2, "method": method, "params": params}
try:
    if transport == "streamable-http":
        resp = post(url, init)
        session = resp.headers.get("Mcp-Session-Id")
        got = answer(resp, 1)
        if got is None or "error" in got:
            print(json.dumps({"error": (got or {}).get("error", "no answer")})); sys.exit(0)
        post(url, done, session).read()
        print(json.dumps(answer(post(url, ask, session), 2)))
    else:
        opening = urllib.request.Request(url, headers={"Accept": "text/event-stream"})
        stream = urllib.request.urlopen(opening, timeout=50)
        feed = events(stream)
        target = urllib.parse.urljoin(url, next(feed))
        post(target, init).read()
        def wait(i):
            for data in feed:
                m = json.loads(data)
                if isinstance(m, dict) and m.get("id") == i:
                    return m
        got = wait(1)
        if got is None or "error" in got:
            print(json.dumps({"error": (got or {}).get("error", "no answer")})); sys.exit(0)
        post(target, done).read()
        post(target, ask).read()
        print(json.dumps(wait(2)))
except Exception as e:
    print(json.dumps({"error": {"message": type(e).__name__ + ": " + str(e)}}))
"""


class McpTool(NamedTuple):
    """One tool of one server, as the chat agent offers it."""

    name: str
    """Its name for the model: ``mcp__<server>__<tool>``."""
    server: str
    tool: str
    description: str
    schema: dict[str, Any]


def tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>`` in the characters every API allows (64 at most)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"mcp__{server}__{tool}")[:64]


class McpTools:
    """The MCP servers of a chat agent, reached through the sandbox."""

    def __init__(self, sandbox: Any, servers: list[Installed], timeout: float = 60) -> None:
        self.sandbox, self.timeout = sandbox, timeout
        self.servers = {s.name: s for s in servers}
        self.tools: dict[str, McpTool] = {}

    def request(self, server: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One request to `server` (its response, or ``{"error": ...}``)."""
        s = self.servers[server]
        env = s.env if s.transport == "stdio" else {"transport": s.transport, "url": s.url or ""}
        payload = json.dumps([s.argv, env, method, params])
        script = f"HTTP = {HTTP!r}\n{CLIENT}"
        res = self.sandbox.exec(["python3", "-c", script, payload], timeout=self.timeout)
        try:
            out = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"error": {"message": f"no answer (exit {res.returncode}): {res.stderr[-400:]}"}}
        return out if isinstance(out, dict) else {"error": {"message": "not a JSON object"}}

    def discover(self) -> list[McpTool]:
        """Every server's tools (a server that does not answer is an `McpError`)."""
        for name in self.servers:
            got = self.request(name, "tools/list", {})
            if "error" in got:
                raise McpError(f"mcp server {name} did not list its tools: {_said(got)}")
            for t in (got.get("result") or {}).get("tools") or []:
                if not isinstance(t, dict) or not t.get("name"):
                    continue
                tool = McpTool(
                    name=tool_name(name, str(t["name"])),
                    server=name,
                    tool=str(t["name"]),
                    description=str(t.get("description") or "")[:1024],
                    schema=t.get("inputSchema") or {"type": "object", "properties": {}},
                )
                self.tools[tool.name] = tool
        return list(self.tools.values())

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Call a tool; its result as the model reads it."""
        t = self.tools[name]
        got = self.request(t.server, "tools/call", {"name": t.tool, "arguments": arguments})
        if "error" in got:
            return f"error: {_said(got)}"
        result = got.get("result") or {}
        parts = [
            str(c.get("text", "")) if c.get("type") == "text" else json.dumps(c)
            for c in result.get("content") or []
            if isinstance(c, dict)
        ]
        text = "\n".join(parts)
        return f"error: {text}" if result.get("isError") else text

    def read_resource(self, server: str, uri: str) -> str | None:
        """The text of a resource of `server` (None when it has none at `uri`)."""
        got = self.request(server, "resources/read", {"uri": uri})
        contents = (got.get("result") or {}).get("contents") or []
        texts = [str(c.get("text")) for c in contents if isinstance(c, dict) and "text" in c]
        return "\n".join(texts) if texts else None


def _said(got: dict[str, Any]) -> str:
    error = got.get("error")
    return str(error.get("message") if isinstance(error, dict) else error)[:600]
