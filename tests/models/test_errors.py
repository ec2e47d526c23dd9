"""What a provider's failed answer means: the model's fault (key refused, no such model:
the sweep stops the model), the provider's (down: retried), or the request's (neither)."""

from __future__ import annotations

import json

import pytest

from hangar.models.errors import classify
from hangar.testing.scripted import not_found


@pytest.mark.parametrize(
    "path", ["/v1/chat/completions", "/v1/responses", "/v1/messages",
             "/v1beta/models/gemini-9:generateContent"],
)  # fmt: skip
def test_each_api_s_own_404_for_a_model_stops_it(path: str) -> None:
    body = json.dumps(not_found(path, "gemini-9"))
    error = classify(404, body, "gemini-9", "KEY")
    assert error is not None and error.kind == "not_found" and error.stops_model
    assert "gemini-9" in error.message and "HTTP 404" in error.message


@pytest.mark.parametrize(
    "body",
    [
        '{"error": {"message": "Invalid URL (POST /v1/responses)"}}',
        '{"detail": "Not Found"}',
        "",
    ],
)
def test_a_404_of_a_route_the_provider_lacks_says_nothing_of_the_model(body: str) -> None:
    assert classify(404, body, "gpt-4o", "KEY") is None


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ('{"error": {"message": "The model `gpt-4o-mni` does not exist"}}', "not_found"),
        ('{"error": {"code": "model_not_found"}}', "not_found"),
        ('{"error": {"message": "max_tokens is too large"}}', None),  # the request's fault
    ],
)
def test_a_400_stops_the_model_only_in_the_words_for_no_such_model(
    body: str, kind: str | None
) -> None:
    error = classify(400, body, "gpt-4o-mni", "KEY")
    assert (error.kind if error else None) == kind


def test_a_refused_key_stops_and_an_outage_does_not() -> None:
    refused = classify(401, "bad key", "m", "OPENAI_API_KEY")
    assert refused is not None and refused.kind == "auth" and refused.stops_model
    assert refused.key_env == "OPENAI_API_KEY"
    for status in (429, 500, 503):
        down = classify(status, "overloaded", "m", "KEY")
        assert down is not None and down.kind == "unavailable" and not down.stops_model
    timeout = classify(None, "ReadTimeout", "m", "KEY", transient=True)
    assert timeout is not None and timeout.kind == "unavailable"
