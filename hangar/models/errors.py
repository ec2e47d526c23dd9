"""What a provider's failed answer means for a sweep: the request's own fault, or the
model's (its key refused, no such model), or the provider's (down, overloaded)."""

from __future__ import annotations

import re

from hangar.results import ProviderError

#: How providers say a model does not exist in a 400.
_NOT_FOUND = re.compile(
    r"model[_ ]not[_ ]found|not[_ ]found[_ ]error|does not exist|is not found|"
    r"unknown model|invalid model|model identifier is invalid|no such model",
    re.IGNORECASE,
)


def not_found(status: int | None, message: str) -> bool:
    """Whether a provider's answer says the model does not exist: a 404 that speaks of
    the model (a 404 of a route the provider lacks, ``Invalid URL (POST /v1/x)`` or
    ``Not Found``, says nothing of it), or a 400 in the words an API uses for it."""
    if status == 404:
        return "model" in message.lower()
    return status == 400 and bool(_NOT_FOUND.search(message))


def classify(
    status: int | None, message: str, model: str, key_env: str, *, transient: bool = False
) -> ProviderError | None:
    """The provider's failure a status (and its words) stands for, or None when the
    request itself was at fault (a 400 of another kind). `transient`: the call failed
    without an answer (a timeout, a dropped connection)."""
    words = message.strip()[:300]
    if status in (401, 403):
        return ProviderError(
            kind="auth",
            model=model,
            status=status,
            key_env=key_env,
            message=f"the provider refused the key in {key_env} for model {model!r} "
            f"(HTTP {status}): {words}",
        )
    if not_found(status, message):
        return ProviderError(
            kind="not_found",
            model=model,
            status=status,
            key_env=key_env,
            message=f"the provider has no model {model!r} (HTTP {status}): {words}",
        )
    if transient or status == 429 or (status or 0) >= 500:
        return ProviderError(
            kind="unavailable",
            model=model,
            status=status,
            message=f"model {model!r} failed upstream: {words}",
        )
    return None
