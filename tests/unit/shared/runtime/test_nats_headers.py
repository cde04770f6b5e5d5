"""shared/runtime/nats_headers.py: the same headers as nats-py's own parser, for any bytes."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client

from loopwire.shared.runtime import nats_headers
from loopwire.shared.runtime.nats_headers import install, parse_header_lines

NATS_PARSER = nats_headers.replaced or Client.__dict__["_parse_header_lines"].__func__
"""nats-py's own, whether or not a test that started the services installed ours."""
assert NATS_PARSER is not parse_header_lines

WORK_HEADERS = (b"Nats-Msg-Id: r:abcdef0123456789:tools\r\nLoopwire-Session-Id: bench-72d95d5247\r\n"
                b"Loopwire-Run-Id: 0123456789abcdef\r\n"
                b"traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n")


def test_a_work_message_headers() -> None:
    assert parse_header_lines(WORK_HEADERS) == {
        "Nats-Msg-Id": "r:abcdef0123456789:tools", "Loopwire-Session-Id": "bench-72d95d5247",
        "Loopwire-Run-Id": "0123456789abcdef",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    assert parse_header_lines(WORK_HEADERS) == NATS_PARSER(WORK_HEADERS)


def test_every_ascii_character_in_a_name_is_judged_as_nats_py_judges_it() -> None:
    for code in range(128):
        raw = b"a" + bytes([code]) + b"b: v\r\n" + bytes([code]) + b"x:y\r\n"
        assert parse_header_lines(raw) == NATS_PARSER(raw), code


@given(st.lists(st.tuples(st.binary(max_size=12), st.sampled_from([b":", b": ", b":\t", b""]),
                          st.binary(max_size=12)), max_size=6),
       st.sampled_from([b"\r\n", b"\n", b"\r\n\r\n"]))
def test_any_lines_parse_as_nats_py_parses_them(lines: list[tuple[bytes, bytes, bytes]], end: bytes) -> None:
    raw = b"\r\n".join(name + sep + value for name, sep, value in lines) + end
    assert parse_header_lines(raw) == NATS_PARSER(raw)


def test_install_replaces_only_a_static_parser() -> None:
    class Parses:
        _parse_header_lines = staticmethod(NATS_PARSER)

    class Other:
        def _parse_header_lines(self, raw: bytes) -> Any:
            return raw

    assert install(Parses) is True
    assert Parses._parse_header_lines is parse_header_lines
    assert install(Other) is False
    assert Other.__dict__["_parse_header_lines"] is not parse_header_lines
