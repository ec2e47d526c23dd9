"""Ready configs for real agent CLIs, run as command agents through the model relay.

Use one in an agents file as ``name: {preset: codex}`` (other fields override the
preset's). The sandbox image must hold the CLI:

- ``codex``: OpenAI Codex CLI (``codex exec``), talking the Responses API to the relay
  as a custom provider. Build the image offline with ``hangar image build-base --with
  codex`` (it installs ``@openai/codex`` from the npm registry on the host and copies the
  binary in); its session files (``~/.codex/sessions``) go into the evidence.
- ``claude``: Claude Code (``claude -p --output-format stream-json``), talking the
  Anthropic Messages API to the relay. Claude Code needs Node.js 22 or newer, which
  Debian bookworm does not ship: build an image from a Dockerfile that adds it (see the
  README); its transcripts (``~/.claude/projects``) go into the evidence.
"""

from __future__ import annotations

from typing import Any

from hangar.errors import ConfigError

_CODEX = (
    'mkdir -p "$HOME/.codex" && codex exec --skip-git-repo-check '
    "--dangerously-bypass-approvals-and-sandbox --json "
    "-c model_provider=hangar -c model_providers.hangar.name=hangar "
    '-c "model_providers.hangar.base_url=\\"$OPENAI_BASE_URL\\"" '
    "-c model_providers.hangar.env_key=OPENAI_API_KEY "
    "-c model_providers.hangar.wire_api=responses "
    '-m "$HANGAR_MODEL" - < "$HANGAR_CONTEXT_FILE"'
)
_CLAUDE = (
    "claude -p --output-format stream-json --verbose --dangerously-skip-permissions "
    '--model "$HANGAR_MODEL" < "$HANGAR_CONTEXT_FILE"'
)

PRESETS: dict[str, dict[str, Any]] = {
    "codex": {"command": _CODEX, "collect": ["~/.codex/sessions"]},
    "claude": {
        "command": _CLAUDE,
        "collect": ["~/.claude/projects"],
        "env": {"DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1"},
    },
}


def expand_preset(data: dict[str, Any], where: str) -> dict[str, Any]:
    """An agent config with its ``preset`` replaced by the preset's fields."""
    name = data.get("preset")
    if name is None:
        return data
    if name not in PRESETS:
        raise ConfigError(f"{where}: unknown agent preset {name!r} (known: {', '.join(PRESETS)})")
    rest = {k: v for k, v in data.items() if k != "preset"}
    return {**PRESETS[name], **rest}
