"""Unit tests of the backend-independent pieces of the sandbox contract."""

from __future__ import annotations

import pytest

from hangar.files import parse_size
from hangar.sandbox.base import SandboxLimits, TailBuffer, command_argv, timeout_argv


@pytest.mark.parametrize(
    ("text", "expected"),
    [("512m", 512 * 2**20), ("2g", 2 * 2**30), ("2GiB", 2 * 2**30), ("1.5k", 1536), ("100", 100)],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


def test_parse_size_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")
    with pytest.raises(ValueError):
        SandboxLimits(memory="lots")


def test_tail_buffer_keeps_last_bytes() -> None:
    buf = TailBuffer(10)
    for i in range(100):
        buf.write(str(i % 10).encode())
    assert buf.getvalue() == b"0123456789" and buf.truncated


def test_tail_buffer_exact_fit_is_not_truncated() -> None:
    buf = TailBuffer(4)
    buf.write(b"ab")
    buf.write(b"cd")
    assert buf.getvalue() == b"abcd" and not buf.truncated
    big = TailBuffer(4)
    big.write(b"abcdef")
    assert big.getvalue() == b"cdef" and big.truncated


def test_tail_buffer_decodes_with_replacement() -> None:
    buf = TailBuffer(3)
    buf.write("é".encode() * 2)  # 4 bytes; the cut splits the first character
    assert buf.text() == "\ufffdé"


def test_command_argv() -> None:
    assert command_argv("echo hi") == ["/bin/sh", "-c", "echo hi"]
    assert command_argv(["echo", "hi"]) == ["echo", "hi"]
    with pytest.raises(ValueError, match="empty"):
        command_argv([])


def test_timeout_argv() -> None:
    assert timeout_argv(["x"], None, 5) == ["x"]
    assert timeout_argv(["x"], 2.5, 5) == ["timeout", "-k", "5s", "2.5s", "x"]
