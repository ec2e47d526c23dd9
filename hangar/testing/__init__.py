"""Test doubles that run the real code paths: `scripted`, an OpenAI- and
Anthropic-compatible model server that answers from a script (the tests, the offline
controls and `make demo` use it when no model API is reachable)."""
