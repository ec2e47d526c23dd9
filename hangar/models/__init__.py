"""Models: what a trial calls, where its key comes from, what it costs.

A sweep names models by id (``gpt-4o-mini``) or in full:

```yaml
models:
  - none                          # agents that call no model
  - gpt-4o-mini                   # provider guessed: claude-* is anthropic, the rest openai
  - gemini-2.5-flash              # gemini-* is google (the Gemini API)
  - id: my-model
    provider: openai              # openai (any OpenAI-compatible endpoint) | anthropic | google
    base_url: http://127.0.0.1:8000/v1   # vLLM, Ollama, a gateway, the scripted server
                                  # (default: the host's OPENAI_BASE_URL / ANTHROPIC_BASE_URL,
                                  # else the provider's public API)
    api_key_env: MY_GATEWAY_KEY   # the host variable holding the key
    api: chat                     # chat | responses | messages | gemini (what chat agents use)
    price: {input: 0.15, output: 0.60, cached_input: 0.075}   # USD per 1M tokens
```

Keys come only from the host environment, on every node that runs trials: they never
enter a sandbox, a result, a bundle or a log. A missing key is an error before any trial
starts.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hangar.errors import ConfigError
from hangar.models.pricing import Price

NO_MODEL = "none"
_DEFAULT_BASE = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "google": "https://generativelanguage.googleapis.com",
}
_DEFAULT_KEY = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "google": "GEMINI_API_KEY",
    "azure": "AZURE_OPENAI_API_KEY",
}
_DEFAULT_API = {
    "openai": "chat",
    "anthropic": "messages",
    "google": "gemini",
}
_FAMILY = {"anthropic": "anthropic", "google": "google"}
_PRICES = {"bedrock": "aws"}
#: Where the providers' own tools look for a base URL, besides ``<PROVIDER>_BASE_URL``.
_BASE_ENV = {
    "google": ("GOOGLE_GEMINI_BASE_URL", "GEMINI_BASE_URL"),
    "azure": ("AZURE_OPENAI_ENDPOINT",),
}


class ModelSpec(BaseModel):
    """One model a sweep runs against."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    """Model id as the provider knows it (``none``: no model)."""
    provider: Literal["openai", "anthropic", "google", "azure", "bedrock", "vertex", "none"] = (
        "openai"
    )
    """API family; ``openai`` covers every OpenAI-compatible endpoint; ``google`` is the
    Gemini API (``models/{model}:generateContent``); ``azure`` is Azure OpenAI (OpenAI's
    API at a deployment: `deployment`, `api_version`); ``bedrock`` is Amazon Bedrock
    (Claude by the Messages API, the other models by Chat Completions translated to
    Converse; signed with the node's AWS credentials: `region`);
    ``vertex`` is Google Vertex AI (Claude models by Anthropic's API, Gemini models by
    Gemini's, with the node's Google credentials: `project`, `region`). See
    `hangar.models.dialects`."""
    base_url: str | None = None
    """Endpoint (default: the provider's public API)."""
    api_key_env: str | None = None
    """Host environment variable with the key (default OPENAI_API_KEY / ANTHROPIC_API_KEY;
    for google GEMINI_API_KEY, else GOOGLE_API_KEY)."""
    api: Literal["chat", "responses", "messages", "gemini"] | None = None
    """The API chat agents use (default: chat for openai, messages for anthropic, gemini
    for google)."""
    deployment: str | None = None
    """Azure OpenAI: the deployment serving the model (default: the model id)."""
    api_version: str | None = None
    """Azure OpenAI: the ``api-version`` of the deployments API (``2024-10-21``); without
    one, Azure's v1 API (``/openai/v1``)."""
    region: str | None = None
    """Amazon Bedrock: the AWS region (default: ``AWS_REGION``, else ``AWS_DEFAULT_REGION``);
    Vertex AI: the location (default: ``CLOUD_ML_REGION``, else ``us-east5``; ``global``)."""
    project: str | None = None
    """Vertex AI: the Google Cloud project (default: ``GOOGLE_CLOUD_PROJECT``, else
    ``ANTHROPIC_VERTEX_PROJECT_ID``)."""
    price: Price | None = None
    """USD per 1M tokens; default: the genai-prices table."""
    price_provider: str | None = None
    """Provider id for the price table, when it differs from `provider` (e.g. a gateway)."""
    timeout_s: float = Field(default=600.0, gt=0)
    """Longest wait for one model call before the agent gets a 504."""
    max_request_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    """Largest request body the relay takes from the agent (bytes; the providers' own
    limits are about 32 MB). A larger one gets a 413 before a byte of it is read."""
    request_fields: tuple[str, ...] = ()
    """Request fields the relay passes on beyond its own list for this API (a compatible
    server's own sampling settings, such as ``mirostat``). Every other field it does not
    know is refused: name only settings here, never one that makes the provider use a
    tool, a URL, another model or the account's state."""

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = {"id": data}
        if isinstance(data, dict) and "provider" not in data:
            mid = str(data.get("id", ""))
            data = {
                **data,
                "provider": "none"
                if mid == NO_MODEL
                else "anthropic"
                if mid.startswith("claude")
                else "google"
                if mid.startswith("gemini")
                else "openai",
            }
        return data

    @property
    def endpoint(self) -> str:
        """The base URL requests go to: `base_url`, else the host's ``OPENAI_BASE_URL`` /
        ``ANTHROPIC_BASE_URL`` (as the providers' SDKs read them), else the public API (for
        Bedrock, the region's runtime endpoint)."""
        names = (f"{self.provider.upper()}_BASE_URL", *_BASE_ENV.get(self.provider, ()))
        from_env = next((os.environ[n] for n in names if os.environ.get(n)), "")
        public = _DEFAULT_BASE.get(self.provider, "")
        if self.provider == "bedrock" and self.aws_region:
            public = f"https://bedrock-runtime.{self.aws_region}.amazonaws.com"
        if self.provider == "vertex":
            where = self.vertex_location
            host = "aiplatform" if where == "global" else f"{where}-aiplatform"
            public = f"https://{host}.googleapis.com"
        return (self.base_url or from_env or public).rstrip("/")

    @property
    def family(self) -> str:
        """The API its callers speak: ``openai``, ``anthropic`` or ``google`` (Azure
        OpenAI speaks OpenAI's; Bedrock Anthropic's for Claude, OpenAI's Chat Completions
        for the others (Converse behind it); Vertex AI its model's maker's)."""
        if self.provider == "vertex":  # `api` says, else the id (claude-sonnet-4-5@2025...)
            if self.api in ("messages", "gemini"):
                return "anthropic" if self.api == "messages" else "google"
            return "anthropic" if "claude" in self.id else "google"
        if self.provider == "bedrock":  # Claude by the Messages API, the rest by Converse
            if self.api is not None:
                return "anthropic" if self.api == "messages" else "openai"
            return "anthropic" if "anthropic." in self.id or "claude" in self.id else "openai"
        return _FAMILY.get(self.provider, "openai")

    @property
    def price_table(self) -> str:
        """The provider id of its prices: `price_provider`, else the provider's (a cloud's
        own: Bedrock's are ``aws``; Vertex AI's, its model's maker's)."""
        if self.price_provider:
            return self.price_provider
        if self.provider == "vertex":
            return self.family
        return _PRICES.get(self.provider, self.provider)

    @property
    def aws_region(self) -> str:
        """Bedrock's region: `region`, else the environment's."""
        env = os.environ
        return self.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or ""

    @property
    def vertex_location(self) -> str:
        """Vertex AI's location: `region`, else ``CLOUD_ML_REGION``, else ``us-east5``."""
        return self.region or os.environ.get("CLOUD_ML_REGION") or "us-east5"

    @property
    def vertex_project(self) -> str:
        """Vertex AI's project: `project`, else the environment's ('' when none)."""
        env = os.environ
        found = env.get("GOOGLE_CLOUD_PROJECT") or env.get("ANTHROPIC_VERTEX_PROJECT_ID")
        return self.project or found or ""

    @property
    def key_env(self) -> str:
        """The environment variable holding the key (google: GEMINI_API_KEY, else
        GOOGLE_API_KEY when only that one is set, as Google's SDK reads them)."""
        if self.api_key_env:
            return self.api_key_env
        google = self.provider == "google" and not os.environ.get("GEMINI_API_KEY")
        if google and os.environ.get("GOOGLE_API_KEY"):
            return "GOOGLE_API_KEY"
        return _DEFAULT_KEY.get(self.provider, "")

    @property
    def chat_api(self) -> str:
        """The API a chat agent uses."""
        return self.api or _DEFAULT_API.get(self.family, "chat")

    def api_key(self) -> str:
        """The key, from this host's environment; a clear error when it is not set.
        Bedrock and Vertex AI have none: the node's cloud credentials sign each call, or
        give its token (checked here); nor Azure OpenAI without one (an Entra ID token).
        '' stands for the credentials."""
        if self.provider == "bedrock":
            from hangar.models.dialects import aws_credentials

            aws_credentials(self)
            return ""
        if self.provider == "vertex":
            from hangar.models.dialects import google_token

            google_token(self)
            return ""
        if self.provider == "azure" and not os.environ.get(self.key_env):
            from hangar.models.dialects import azure_token

            azure_token(self)  # no key: an Entra ID token
            return ""
        key = os.environ.get(self.key_env, "")
        if not key:
            raise ConfigError(
                f"model {self.id!r} needs its API key in the environment variable "
                f"{self.key_env}, which is not set on this machine (set it, or name another "
                "variable with `api_key_env` in the sweep)"
            )
        return key


def check_keys(models: list[ModelSpec]) -> None:
    """Every model that calls a provider has its key here, and an endpoint where the
    provider has no public one (before any trial starts)."""
    for model in models:
        if model.provider != "none":
            model.api_key()
        if model.provider == "azure" and not model.endpoint:
            raise ConfigError(
                f"model {model.id!r} (Azure OpenAI) needs its resource's endpoint: "
                "`base_url: https://RESOURCE.openai.azure.com` in the sweep, or "
                "AZURE_OPENAI_ENDPOINT in the environment"
            )
