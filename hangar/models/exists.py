"""Whether each model of a sweep exists, asked of its provider before any trial is paid.

A model id with a typo (``gpt-4o-mni``) would otherwise be sent to every trial, each
answered ``404 model not found`` and each charged to the agent as a ``fail``. `start_checks`
asks each provider once per model, with the relay's own client and rules (`complete`: one
call of one output token, metered, its cost recorded): a provider that says the model does
not exist (404, or its API's 400 saying so) or refuses the key stops that model before
any of its trials, with the provider's words; one that is down only warns (its trials
meet it themselves).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

from pydantic import BaseModel

from hangar.models import ModelSpec
from hangar.models.complete import complete
from hangar.results import CHECK_SYSTEM, CHECK_USER, ProviderError, Usage

CHECK_TIMEOUT_S = 30.0
"""How long a check waits for its provider: one that does not answer in time only warns."""


class ModelCheck(BaseModel):
    """What a provider answered about one model."""

    model: str
    """The model id."""
    ok: bool
    """Whether the provider answered the call (or failed it for another reason)."""
    error: ProviderError | None = None
    """The provider's failure, when it said something of the model or its key."""
    note: str = ""
    """Another failure of the call, in words (it does not stop the model)."""
    usage: Usage = Usage()
    """What the call cost."""


def check_model(model: ModelSpec) -> ModelCheck:
    """Ask `model` for one output token (see the module docstring)."""
    done = complete(model, CHECK_SYSTEM, CHECK_USER, max_output_tokens=1, timeout_s=CHECK_TIMEOUT_S)
    if done.provider_error is not None:
        error = done.provider_error
        return ModelCheck(model=model.id, ok=not error.stops_model, error=error, usage=done.usage)
    return ModelCheck(model=model.id, ok=True, note=done.error, usage=done.usage)


def start_checks(models: list[ModelSpec]) -> Callable[[], list[ModelCheck]]:
    """Each model of `models` that calls a provider checked once, all at once in threads
    of their own; returns the wait for the checks (in the models' order). The caller goes
    on meanwhile: a sweep attaches Ray and runs its preflight. The threads are daemons: a
    run stopped meanwhile does not wait for them."""
    asked: dict[str, ModelSpec] = {}
    for model in models:
        if model.provider != "none":
            asked.setdefault(model.id, model)
    checks: list[Future[ModelCheck]] = []
    for model in asked.values():
        check: Future[ModelCheck] = Future()
        checks.append(check)
        threading.Thread(target=_ask, args=(model, check), daemon=True).start()
    return lambda: [check.result() for check in checks]


def _ask(model: ModelSpec, into: Future[ModelCheck]) -> None:
    try:
        into.set_result(check_model(model))
    except BaseException as exc:  # the caller meets it when it takes the checks
        into.set_exception(exc)
