"""A minimal tool-calling agent (standard library only), for the relay's end-to-end path.

It talks OpenAI Chat Completions to $OPENAI_BASE_URL with $OPENAI_API_KEY (inside a
sandbox: the relay's loopback address and the trial token), offers one `bash` tool,
runs the model's tool calls, and stops when the model answers without one. Real agent
CLIs (Codex, Claude Code) do the same over the same relay.
"""

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command in the repository.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def call(messages: list) -> dict:
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps(
            {"model": os.environ["HANGAR_MODEL"], "messages": messages, "tools": [BASH]}
        ).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return json.load(reply)
    except urllib.error.HTTPError as exc:
        sys.exit(f"model call failed: HTTP {exc.code}: {exc.read().decode()[:300]}")


messages = [{"role": "user", "content": os.environ["HANGAR_CONTEXT"]}]
for _ in range(int(os.environ.get("TOOLLOOP_TURNS", "10"))):
    message = call(messages)["choices"][0]["message"]
    messages.append(message)
    if not message.get("tool_calls"):
        print(message.get("content") or "")
        break
    for tool_call in message["tool_calls"]:
        command = json.loads(tool_call["function"]["arguments"])["command"]
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
        print(f"$ {command}\n{done.stdout}{done.stderr}", end="")
        messages.append(
            {
                "role": "tool",
                "tool_call_id": tool_call["id"],
                "content": (done.stdout + done.stderr)[-8000:],
            }
        )
