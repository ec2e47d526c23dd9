"""Counting a text's tokens offline: OpenAI's ``o200k_base`` encoding through
``bpe-openai`` (the Rust ``bpe`` crate, its vocabularies compiled in: no network, where
tiktoken would download them). Other providers' tokenizers differ by some percent; what
counts tokens here (a rubric's ``max_tokens`` check, a first run's estimate) says so."""

from __future__ import annotations

import functools
from typing import Any

from hangar.errors import ConfigError

TOKENIZER = "o200k_base (bpe-openai)"


@functools.cache
def _encoding() -> Any:
    try:
        import bpe_openai  # type: ignore[import-untyped]
    except ImportError as exc:  # an install without the dependency
        raise ConfigError(
            "counting tokens needs the bpe-openai package: pip install 'bpe-openai>=0.1.4'"
        ) from exc
    return bpe_openai.get_encoding("o200k_base")


def count_tokens(text: str) -> int:
    """Tokens of `text` in ``o200k_base``."""
    return len(_encoding().encode(text))
