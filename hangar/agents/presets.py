"""Ready configs for real agent CLIs, run as command agents through the model relay.

Use one in an agents file as ``name: {preset: codex}``, with the preset's options beside
it (``{preset: codex, reasoning_effort: low, sandbox_mode: workspace-write}``); other
fields (``env``, ``collect``) override the preset's. The preset and its options stay in
the agent's config, so they are part of its digest, its trial keys and every result.

No image needs the CLI: each preset's CLI is a bundle (`hangar.sandbox.bundles`: the CLI,
its runtime and its C library, built once per node from pinned packages) mounted
read-only into whatever image the trial runs in, its commands first on the command's
PATH; the bundle's recipe digest (``bundle``) is part of the agent's settings. What each
CLI is pointed at and what it collects:

- ``codex``: OpenAI Codex CLI (``codex exec``), the Responses API, as a custom provider.
  Options: ``reasoning_effort``, ``approval_policy``, ``sandbox_mode`` (without it Codex's
  own sandbox is bypassed: hangar's container is the sandbox). Skills in
  ``~/.agents/skills``; sessions ``~/.codex/sessions``.
- ``claude``: Claude Code (``claude -p --output-format stream-json``), the Messages API.
  Option: ``permission_mode``. Skills in ``~/.claude/skills``; transcripts
  ``~/.claude/projects``.
- ``gemini``: Gemini CLI (``gemini -p ... -o stream-json``), the Gemini API
  (``GOOGLE_GEMINI_BASE_URL``). Option: ``approval_mode``. Usage statistics, telemetry,
  update checks and its web tools off; chat files ``~/.gemini/tmp``.
- ``qwen``: Qwen Code, the OpenAI Chat Completions API. Option: ``approval_mode``.
- ``opencode``: OpenCode (``opencode run --format json``), Chat Completions, the relay as
  a provider ``hangar``. Option: ``variant``.
- ``mini-swe-agent`` and ``aider``: from PyPI, on a CPython of the bundle's own.
"""

from __future__ import annotations

import difflib
import functools
import re
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict

from hangar.errors import ConfigError
from hangar.plugins import load_target, plugin_targets


class Option(BaseModel):
    """One setting of a preset and the command-line text it becomes."""

    model_config = ConfigDict(frozen=True)

    values: tuple[str, ...] = ()
    """The values the CLI accepts."""
    pattern: str = ""
    """A regular expression the value must match instead (a count: ``[1-9][0-9]*``)."""
    meaning: str = ""
    """What a value matching `pattern` is, in words (for the error that refuses one)."""
    flag: str
    """The text added to the command, ``{value}`` standing for the (quoted) value."""
    replaces: str = ""
    """Text of the default command that the option takes the place of."""


class Preset(BaseModel):
    """A ready agent config: its command, what it collects, its options."""

    model_config = ConfigDict(frozen=True)

    command: str
    """The command line, ``{options}`` marking where option flags go."""
    collect: tuple[str, ...] = ()
    """Folders copied into the evidence."""
    env: dict[str, str] = {}
    """Extra environment."""
    options: dict[str, Option] = {}
    """Settings the preset takes."""
    skills: str = "~/.agents/skills"
    """Where the CLI finds skills natively (a routing suite's catalog goes there)."""
    mcp: str = ""
    """The text that points the CLI at its MCP servers' config (``{tools}``: their tool
    patterns), put at ``{mcp}`` in the command when the agent has servers."""
    apis: tuple[str, ...] = ()
    """The model APIs it speaks (what its models' ``provider`` may be)."""

    def render(self, chosen: dict[str, str], where: str) -> str:
        """The command with the `chosen` options in it (each checked)."""
        command, flags = self.command, []
        for name, value in chosen.items():
            option = self.options.get(name)
            if option is None:
                known = ", ".join(self.options) or "none"
                near = difflib.get_close_matches(name, list(self.options), n=1, cutoff=0.6)
                hint = f"did you mean {near[0]!r}? " if near else ""
                raise ConfigError(
                    f"{where}: unknown option {name!r} ({hint}this preset takes: {known})"
                )
            if option.pattern and not re.fullmatch(option.pattern, value):
                raise ConfigError(f"{where}: {name} must be {option.meaning}, got {value!r}")
            if not option.pattern and value not in option.values:
                raise ConfigError(
                    f"{where}: {name} must be one of {', '.join(option.values)}, got {value!r}"
                )
            if option.replaces:
                command = command.replace(option.replaces, "")
            flags.append(option.flag.format(value=shlex.quote(value)))
        return re.sub(" +", " ", command.replace("{options}", " ".join(flags)))

    def with_servers(self, command: str, names: list[str]) -> str:
        """`command` pointed at its MCP servers (`names`), or as it was without any."""
        tools = ",".join(f"mcp__{n}" for n in names)
        text = self.mcp.format(tools=shlex.quote(tools)) if names and self.mcp else ""
        return re.sub(" +", " ", command.replace("{mcp}", text))


_CODEX_BYPASS = "--dangerously-bypass-approvals-and-sandbox"
#: Gemini CLI's settings: no usage statistics, no update check, no tool that reaches the
#: world (its web search and fetch), the API key (the relay's trial token) as its auth.
_GEMINI_SETTINGS = (
    '{"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},'
    '"general":{"disableAutoUpdate":true,"disableUpdateNag":true},'
    '"tools":{"exclude":["google_web_search","web_fetch"]},'
    '"security":{"auth":{"selectedType":"gemini-api-key"}}}'
)
#: OpenCode's config: the relay as an OpenAI-compatible provider named hangar (the key
#: read from the environment), the trial's model in it, no sharing, no update, no web
#: fetch tool.
_OPENCODE_CONFIG = (
    '{\\"autoupdate\\":false,\\"share\\":\\"disabled\\",'
    '\\"permission\\":{\\"webfetch\\":\\"deny\\"},'
    '\\"provider\\":{\\"hangar\\":{\\"npm\\":\\"@ai-sdk/openai-compatible\\",'
    '\\"name\\":\\"hangar\\",\\"options\\":{\\"baseURL\\":\\"$OPENAI_BASE_URL\\",'
    '\\"apiKey\\":\\"{env:OPENAI_API_KEY}\\"},'
    '\\"models\\":{\\"$HANGAR_MODEL\\":{}}}}}'
)
#: Pi's models file: the relay as an OpenAI-compatible provider ``hangar`` with the
#: trial's model, the key read from ``OPENAI_API_KEY``.
_PI_MODELS = (
    '{\\"providers\\":{\\"hangar\\":{\\"baseUrl\\":\\"$OPENAI_BASE_URL\\",'
    '\\"api\\":\\"openai-completions\\",\\"apiKey\\":\\"OPENAI_API_KEY\\",'
    '\\"models\\":[{\\"id\\":\\"$HANGAR_MODEL\\"}]}}}'
)
#: Qwen Code's (Gemini CLI's settings, its own web tools' names).
_QWEN_SETTINGS = (
    '{"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},'
    '"general":{"disableAutoUpdate":true,"disableUpdateNag":true},'
    '"tools":{"exclude":["web_search","web_fetch"]}}'
)
_CLAUDE_SKIP = "--dangerously-skip-permissions"

PRESETS: dict[str, Preset] = {
    "codex": Preset(
        command=(
            f'mkdir -p "$HOME/.codex" && codex exec --skip-git-repo-check {_CODEX_BYPASS} '
            # Its hosted web search would be refused by the relay: not offered at all.
            "--json -c web_search=disabled {options} "
            "-c model_provider=hangar -c model_providers.hangar.name=hangar "
            '-c "model_providers.hangar.base_url=\\"$OPENAI_BASE_URL\\"" '
            "-c model_providers.hangar.env_key=OPENAI_API_KEY "
            "-c model_providers.hangar.wire_api=responses "
            '-m "$HANGAR_MODEL" - < "$HANGAR_CONTEXT_FILE"'
        ),
        collect=("~/.codex/sessions",),
        apis=("openai (responses)",),
        options={
            "reasoning_effort": Option(
                values=("minimal", "low", "medium", "high", "xhigh"),
                flag="-c model_reasoning_effort={value}",
            ),
            "approval_policy": Option(
                values=("untrusted", "on-failure", "on-request", "never"),
                flag="-c approval_policy={value}",
            ),
            "sandbox_mode": Option(
                values=("read-only", "workspace-write", "danger-full-access"),
                flag="--sandbox {value}",
                replaces=_CODEX_BYPASS,
            ),
        },
    ),
    "claude": Preset(
        command=(
            # Its side calls (titles, summaries) go to the trial's model, never another.
            'ANTHROPIC_SMALL_FAST_MODEL="$HANGAR_MODEL" '
            f"claude -p --output-format stream-json --verbose {_CLAUDE_SKIP} {{options}} {{mcp}} "
            # WebSearch is run by the provider (the relay refuses it: it reaches the world).
            '--disallowedTools WebSearch --model "$HANGAR_MODEL" < "$HANGAR_CONTEXT_FILE"'
        ),
        collect=("~/.claude/projects",),
        apis=("anthropic (messages)",),
        skills="~/.claude/skills",
        mcp='--mcp-config "$HOME/.hangar/mcp.json" --strict-mcp-config --allowedTools {tools}',
        env={
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            # It refuses to skip its permission prompts as root (a Harbor task's default
            # user) unless told it is in a sandbox, which it is.
            "IS_SANDBOX": "1",
        },
        options={
            "permission_mode": Option(
                values=("default", "acceptEdits", "plan", "bypassPermissions"),
                flag="--permission-mode {value}",
                replaces=_CLAUDE_SKIP,
            ),
        },
    ),
    "gemini": Preset(
        command=(
            f"mkdir -p \"$HOME/.gemini\" && printf '%s' '{_GEMINI_SETTINGS}' "
            '> "$HOME/.gemini/settings.json" && '
            "gemini --skip-trust --approval-mode yolo {options} "
            '-m "$HANGAR_MODEL" -o stream-json -p "$HANGAR_CONTEXT" < /dev/null'
        ),
        collect=("~/.gemini/tmp",),
        apis=("google (gemini)",),
        env={"GEMINI_CLI_NO_RELAUNCH": "true", "GEMINI_SANDBOX": "false", "NO_BROWSER": "true"},
        skills="~/.gemini/skills",
        options={
            "approval_mode": Option(
                values=("default", "auto_edit", "yolo", "plan"),
                flag="--approval-mode {value}",
                replaces="--approval-mode yolo",
            ),
        },
    ),
    "qwen": Preset(
        command=(
            f"mkdir -p \"$HOME/.qwen\" && printf '%s' '{_QWEN_SETTINGS}' "
            '> "$HOME/.qwen/settings.json" && '
            "qwen --auth-type openai --approval-mode yolo {options} "
            '--openai-base-url "$OPENAI_BASE_URL" -m "$HANGAR_MODEL" -o stream-json '
            '"$HANGAR_CONTEXT" < /dev/null'
        ),
        collect=("~/.qwen/projects", "~/.qwen/tmp"),
        env={
            "QWEN_CODE_NO_RELAUNCH": "true",
            "GEMINI_CLI_NO_RELAUNCH": "true",
            "NO_BROWSER": "true",
        },
        apis=("openai (chat)",),
        skills="~/.qwen/skills",
        options={
            "approval_mode": Option(
                values=("plan", "default", "auto-edit", "auto", "yolo"),
                flag="--approval-mode {value}",
                replaces="--approval-mode yolo",
            ),
        },
    ),
    "opencode": Preset(
        command=(
            "mkdir -p \"$HOME/.config/opencode\" && printf '%s' "
            f'"{_OPENCODE_CONFIG}" > "$HOME/.config/opencode/opencode.json" && '
            "opencode run --format json --auto {options} "
            '-m "hangar/$HANGAR_MODEL" "$HANGAR_CONTEXT" < /dev/null'
        ),
        collect=("~/.local/share/opencode",),
        env={
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        },
        apis=("openai (chat)",),
        skills="~/.config/opencode/skills",
        options={
            "variant": Option(
                values=("minimal", "low", "medium", "high", "max"), flag="--variant {value}"
            ),
        },
    ),
    "copilot": Preset(
        command=(
            # Its own provider (BYOK) pointed at the relay; offline: nothing of GitHub's.
            'COPILOT_PROVIDER_BASE_URL="$OPENAI_BASE_URL" '
            'COPILOT_PROVIDER_API_KEY="$OPENAI_API_KEY" '
            'copilot -p "$HANGAR_CONTEXT" --allow-all --no-ask-user {options} '
            '--model "$HANGAR_MODEL" < /dev/null'
        ),
        collect=("~/.copilot/session-state", "~/.copilot/logs"),
        env={
            "COPILOT_OFFLINE": "true",
            "COPILOT_PROVIDER_TYPE": "openai",
            "COPILOT_AUTO_UPDATE": "false",
            "NO_COLOR": "1",
        },
        apis=("openai (chat)",),
        skills="~/.copilot/skills",
        options={},
    ),
    "cline": Preset(
        command=(
            # The relay as its OpenAI-compatible provider, in its own state folder.
            'cline auth -p openai -k "$OPENAI_API_KEY" -m "$HANGAR_MODEL" '
            '-b "$OPENAI_BASE_URL" > /dev/null && '
            'cline --json --auto-approve true {options} "$HANGAR_CONTEXT" < /dev/null'
        ),
        collect=("~/.cline/data",),
        apis=("openai (chat)",),
        skills="~/.cline/skills",
        options={
            "thinking": Option(
                values=("none", "low", "medium", "high", "xhigh"), flag="--thinking {value}"
            ),
        },
    ),
    "kilo": Preset(
        command=(
            "mkdir -p \"$HOME/.config/kilo\" && printf '%s' "
            f'"{_OPENCODE_CONFIG}" > "$HOME/.config/kilo/kilo.json" && '
            "kilo run --format json --auto {options} "
            '-m "hangar/$HANGAR_MODEL" "$HANGAR_CONTEXT" < /dev/null'
        ),
        collect=("~/.local/share/kilo",),
        env={
            "KILO_DISABLE_AUTOUPDATE": "1",
            "KILO_DISABLE_MODELS_FETCH": "1",
            "KILO_DISABLE_LSP_DOWNLOAD": "1",
            "KILO_DISABLE_DEFAULT_PLUGINS": "1",
            "KILO_DISABLE_SHARE": "1",
            "KILO_DISABLE_SESSION_INGEST": "1",
            "KILO_DISABLE_CODEBASE_INDEXING": "1",
            "KILO_DISABLE_CLAUDE_CODE": "1",
        },
        apis=("openai (chat)",),
        skills="~/.config/kilo/skills",
        options={
            "variant": Option(
                values=("minimal", "low", "medium", "high", "max"), flag="--variant {value}"
            ),
        },
    ),
    "pi": Preset(
        command=(
            # The relay as a provider of Pi's own (its key read from the environment).
            "mkdir -p \"$HOME/.pi/agent\" && printf '%s' "
            f'"{_PI_MODELS}" > "$HOME/.pi/agent/models.json" && '
            'pi -p --mode json --offline --provider hangar --model "$HANGAR_MODEL" {options} '
            '"$HANGAR_CONTEXT" < /dev/null'
        ),
        collect=("~/.pi/agent/sessions",),
        env={"PI_OFFLINE": "1"},
        apis=("openai (chat)",),
        skills="~/.pi/agent/skills",
        options={
            "thinking": Option(
                values=("off", "minimal", "low", "medium", "high", "xhigh"),
                flag="--thinking {value}",
            ),
        },
    ),
    "openhands": Preset(
        command='openhands "$HANGAR_CONTEXT" < /dev/null',
        collect=("~/.openhands/conversations",),
        env={
            "OPENHANDS_SUPPRESS_BANNER": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "OH_DISABLE_TELEMETRY": "1",
        },
        apis=("openai (chat)",),
    ),
    "mini-swe-agent": Preset(
        command=(
            'MSWEA_GLOBAL_CONFIG_DIR="$HOME/.mini-swe-agent" mini '
            # its cost limit off: litellm knows no price of the trial's model; the sweep's
            # budget and the per-model caps are hangar's
            "--agent-class default --cost-limit 0 -c mini.yaml {options} "
            '-c "model.model_kwargs.api_base=$OPENAI_BASE_URL" -m "openai/$HANGAR_MODEL" '
            '-o "$HOME/.mini-swe-agent/trajectory.traj.json" -t "$HANGAR_CONTEXT" < /dev/null'
        ),
        collect=("~/.mini-swe-agent",),
        env={
            "MSWEA_CONFIGURED": "true",
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        },
        apis=("openai (chat)",),
        options={
            "step_limit": Option(
                pattern="[1-9][0-9]{0,4}",
                meaning="a number of steps (1 to 99999)",
                flag="-c agent.step_limit={value}",
            ),
            "reasoning_effort": Option(
                values=("minimal", "low", "medium", "high"),
                flag="-c model.model_kwargs.reasoning_effort={value}",
            ),
        },
    ),
    "aider": Preset(
        command=(
            # its model-price download answered from a cache it believes fresh (the
            # network is off); the rest said by its own switches
            'mkdir -p "$HOME/.aider/caches" && printf \'{"offline": {}}\' '
            '> "$HOME/.aider/caches/model_prices_and_context_window.json" && '
            'aider --model "openai/$HANGAR_MODEL" --openai-api-base "$OPENAI_BASE_URL" '
            "--edit-format diff {options} --yes-always --no-auto-commits --no-dirty-commits "
            "--no-gitignore --no-check-update --no-show-release-notes --analytics-disable "
            "--no-show-model-warnings --no-detect-urls --no-stream --no-pretty "
            "--no-fancy-input --no-notifications --env-file /dev/null "
            '--chat-history-file "$HOME/.aider/chat.history.md" '
            '--input-history-file "$HOME/.aider/input.history" '
            '--llm-history-file "$HOME/.aider/llm.history" '
            '--message "$HANGAR_CONTEXT" < /dev/null; '
            # its repository map's cache, which it keeps in the repository's root: the
            # tool's own file, not the agent's work (not in the diff, not in the scope)
            "code=$?; rm -rf .aider.tags.cache.v*; exit $code"
        ),
        collect=("~/.aider",),
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "AIDER_ANALYTICS": "false"},
        apis=("openai (chat)",),
        options={
            "edit_format": Option(
                values=("diff", "diff-fenced", "udiff", "whole", "architect"),
                flag="--edit-format {value}",
                replaces="--edit-format diff",
            ),
            "map_tokens": Option(
                pattern="[0-9]{1,6}",
                meaning="a number of tokens for its repository map (0: none)",
                flag="--map-tokens {value}",
            ),
            "reasoning_effort": Option(
                values=("minimal", "low", "medium", "high"), flag="--reasoning-effort {value}"
            ),
        },
    ),
}

#: Agent CLIs people compare that cannot be presets, and why (`hangar agents list`).
UNRUNNABLE: dict[str, str] = {
    "crush": "Crush's npm package downloads its binary from GitHub when installed (no "
    "registry holds it), which no offline build reaches",
    "amp": "Amp's npm package downloads its binary when installed, and Amp's models are "
    "served only through Amp's own service: it cannot be pointed at a model endpoint",
    "auggie": "Auggie runs only against Augment's own service (a login to it), not a model "
    "endpoint",
}

#: Fields of an agent config that are not a preset's options.
_AGENT_FIELDS = {
    "preset", "command", "env", "collect", "kind", "name", "script", "mcp", "cli", "bundle",
}  # fmt: skip


@functools.cache
def presets() -> dict[str, Preset]:
    """Every preset: hangar's (`PRESETS`) and installed packages' (entry points of
    ``hangar.agent_presets``, `hangar.plugins`: a `Preset` each; its command brings its
    own CLI, as a command agent's does, since only hangar's presets have bundles)."""
    found = dict(PRESETS)
    for name, target in plugin_targets("hangar.agent_presets", PRESETS).items():
        preset = load_target(target)
        if not isinstance(preset, Preset):
            raise ConfigError(
                f"entry point {name} = {target} of hangar.agent_presets is not a Preset"
            )
        found[name] = preset
    return found


def expand_preset(data: dict[str, Any], where: str) -> dict[str, Any]:
    """An agent config with its ``preset`` turned into the preset's command, env and
    collect (fields given beside it override those); the preset's name and options are
    kept, as ``preset`` and ``options``."""
    name = data.get("preset")
    if name is None:
        return data
    known = presets()
    if name not in known:
        raise ConfigError(f"{where}: unknown agent preset {name!r} (known: {', '.join(known)})")
    preset = known[name]
    chosen = {k: str(v) for k, v in data.items() if k not in _AGENT_FIELDS}
    rest = {k: v for k, v in data.items() if k in _AGENT_FIELDS}
    servers = sorted(data.get("mcp") or {}) if isinstance(data.get("mcp"), dict) else []
    rendered = preset.render(chosen, f"{where}: agent preset {name!r}")
    return {
        "command": preset.with_servers(rendered, servers),
        "collect": list(preset.collect),
        "env": dict(preset.env),
        "cli": cli_pins(name),
        "bundle": bundle_of(name),
        **rest,
        "options": chosen,
    }


def cli_pins(name: str) -> list[str]:
    """The packages preset `name`'s CLI bundle is built from (`hangar.sandbox.bundles`)."""
    from hangar.sandbox.bundles import AGENT_CLIS

    cli = AGENT_CLIS.get(name)
    return list(cli.pins) if cli is not None else []


def bundle_of(name: str) -> str:
    """``<name>@<recipe digest>``: the bundle preset `name`'s CLI runs from ('' if none)."""
    from hangar.sandbox.bundles import AGENT_CLIS, bundle_id

    return bundle_id(name) if name in AGENT_CLIS else ""
