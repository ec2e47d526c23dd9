"""OpenHands' own default agent, headless: what a bundle's ``openhands`` command runs.

The OpenHands CLI is a terminal interface over the OpenHands SDK's default agent (its
terminal, file editor and task tracker tools, its condenser, its system prompt); this
runs that agent without the interface: the task from the command line, in the current
folder, its model through the relay as an OpenAI-compatible provider (``openai/<model>``
through litellm), its conversation kept under ``~/.openhands/conversations`` (collected
into the trial's evidence). It exits 0 once the agent finishes, 1 otherwise.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help", "--version"):
        from importlib.metadata import version

        print(f"openhands-sdk {version('openhands-sdk')} (hangar's headless runner)")
        return 0
    from openhands.sdk import LLM, Conversation
    from openhands.tools.preset.default import get_default_agent
    from pydantic import SecretStr

    llm = LLM(
        model=f"openai/{os.environ['HANGAR_MODEL']}",
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key=SecretStr(os.environ["OPENAI_API_KEY"]),
        usage_id="agent",
    )
    agent = get_default_agent(llm=llm, cli_mode=True)
    state = Path(os.environ.get("HOME", "/tmp")) / ".openhands" / "conversations"
    conversation = Conversation(
        agent=agent,
        workspace=str(Path.cwd()),
        persistence_dir=str(state),
        delete_on_close=False,
        max_iteration_per_run=int(os.environ.get("OPENHANDS_MAX_ITERATIONS", "100")),
    )
    conversation.send_message(sys.argv[1])
    conversation.run()
    status = str(getattr(conversation.state, "execution_status", ""))
    print(f"openhands: {status}")
    return 0 if status.lower().endswith("finished") else 1


if __name__ == "__main__":
    sys.exit(main())
