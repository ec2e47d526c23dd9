"""Which trial goes next: the sweep driver's dispatch logic, without Ray and without a clock.

`Dispatch` holds the trials not yet sent: the sweep's pending specs (read lazily, so a
sweep of 10^5 trials is never all in memory), those held back by a model's in-flight
cap, and infra_error attempts waiting out their backoff (a heap by ready time). It
enforces the window (trials in flight at once) and the per-model caps, skips trials
already final in the store (resume), numbers attempts after earlier runs', and drops the
trials of a model whose key its provider refused. The caller passes the time in, so
tests drive it with a fake clock; `scheduler/driver.py` is the Ray glue around it.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Mapping

from hangar.results import ProviderError, TrialResult
from hangar.scheduler.sweep import RetryPolicy
from hangar.trials import TrialSpec


class Dispatch:
    """The queue of a sweep's trials; see the module docstring."""

    def __init__(
        self,
        pending: Iterable[TrialSpec],
        *,
        window: int,
        policy: RetryPolicy,
        caps: Mapping[str, int] | None = None,
        final: set[str] | None = None,
        last_attempt: Mapping[str, int] | None = None,
    ) -> None:
        self._pending = iter(pending)
        self.window = window
        self.policy = policy
        self.caps = dict(caps or {})
        self.final = final if final is not None else set()
        self.last_attempt = last_attempt or {}
        self._deferred: dict[str, deque[TrialSpec]] = defaultdict(deque)
        self._held = 0  # specs in _deferred
        self._retries: list[tuple[float, int, TrialSpec]] = []
        self._tiebreak = itertools.count()
        self._exhausted = False
        self.in_flight = 0
        self.per_model: Counter[str] = Counter()
        self.skipped = 0
        """Trials found final in the store while reading the sweep."""
        self.stopped: dict[str, ProviderError] = {}
        """Models whose provider refused the key: none of their trials is sent again."""

    # -- what the driver asks -------------------------------------------------------------

    def next(self, now: float) -> TrialSpec | None:
        """The next trial to send now, or None (window full, all capped, backing off, or
        nothing left). Call `started` when it is sent."""
        if self.in_flight >= self.window:
            return None
        if self._retries and self._retries[0][0] <= now and self._room(self._retries[0][2]):
            return heapq.heappop(self._retries)[2]
        for queue in self._deferred.values():
            if queue and self._room(queue[0]):
                self._held -= 1
                return queue.popleft()
        while not self._exhausted and self._held < self.window:
            spec = next(self._pending, None)
            if spec is None:
                self._exhausted = True
                break
            if spec.trial_key in self.final:
                self.skipped += 1
                continue
            if spec.model in self.stopped:
                continue
            spec = spec.model_copy(update={"attempt": self.last_attempt.get(spec.trial_key, 0) + 1})
            if self._room(spec):
                return spec
            self._deferred[spec.model].append(spec)
            self._held += 1
        return None

    def started(self, spec: TrialSpec) -> None:
        """`spec` was sent."""
        self.in_flight += 1
        self.per_model[spec.model] += 1

    def finished(self, spec: TrialSpec, result: TrialResult, now: float) -> bool:
        """`spec` came back with `result`; True when it is queued to be sent again (an
        infra_error or verifier_error within the retry policy, after its backoff)."""
        self.in_flight -= 1
        self.per_model[spec.model] -= 1
        error = result.provider_error
        if error is not None and error.stops_model and spec.model not in self.stopped:
            self.stop_model(spec.model, error)
        if not self.will_retry(result):
            return False
        again = spec.model_copy(update={"attempt": spec.attempt + 1})
        ready_at = now + self.policy.backoff(again.attempt)
        heapq.heappush(self._retries, (ready_at, next(self._tiebreak), again))
        return True

    def dropped(self, spec: TrialSpec) -> None:
        """`spec` came back without running (the sweep is stopping)."""
        self.in_flight -= 1
        self.per_model[spec.model] -= 1

    def will_retry(self, result: TrialResult) -> bool:
        """Whether a result is an attempt that is sent again (so not final)."""
        return (
            not result.verdict.final
            and result.attempt <= self.policy.infra_retries
            and result.model not in self.stopped
        )

    def stop_model(self, model: str, error: ProviderError) -> None:
        """Send no more trials of `model` (its key was refused, or it does not exist)."""
        self.stopped[model] = error
        dropped = self._deferred.pop(model, None)
        self._held -= len(dropped or ())
        self._retries = [r for r in self._retries if r[2].model != model]
        heapq.heapify(self._retries)

    @property
    def idle(self) -> bool:
        """Nothing left to send: the sweep is read, nothing held back or backing off."""
        return self._exhausted and not self._held and not self._retries

    def next_ready_at(self) -> float | None:
        """When the earliest backing-off attempt may be sent (None: none is waiting)."""
        return self._retries[0][0] if self._retries else None

    def _room(self, spec: TrialSpec) -> bool:
        cap = self.caps.get(spec.model)
        return cap is None or self.per_model[spec.model] < cap
