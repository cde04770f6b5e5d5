"""Loaded by every Python process started with this folder on PYTHONPATH
(tests/bench/timeline.py): notes each nats-py socket write and read and each write and read
of the script channel (shared/stores/script_channel.py), with the monotonic clock (one
clock for every process) and the process's CPU. SIGUSR2 starts the notes afresh, SIGUSR1
writes them to LW_BENCH_TIMELINE/<pid>.tsv. Inert unless that variable is set."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

OUT = os.environ.get("LW_BENCH_TIMELINE")

if OUT:
    from nats.aio import transport
    from nats.protocol import parser

    out_dir: str = OUT
    notes: list[tuple[float, float, str, str]] = []

    def note(kind: str, data: bytes) -> None:
        first = bytes(data[:90]).split(b"\r\n")[0].decode("latin1")
        notes.append((time.perf_counter(), time.process_time(), kind, first))

    _writelines = transport.TcpTransport.writelines

    def writelines(self: Any, payload: list[bytes]) -> None:
        for part in payload:
            note("nats>", part)
        _writelines(self, payload)

    _parse = parser.Parser.parse

    async def parse(self: Any, data: bytes = b"") -> None:
        note("nats<", data)
        await _parse(self, data)

    transport.TcpTransport.writelines = writelines  # type: ignore[method-assign]
    parser.Parser.parse = parse  # type: ignore[method-assign]

    from loopwire.shared.stores import script_channel

    _flush = script_channel._Link._flush
    _received = script_channel._Link.data_received

    def flush(self: Any) -> None:
        if self._out:
            note("redis>", b"%d calls: " % len(self._out) + self._out[0][:60].replace(b"\r\n", b" "))
        _flush(self)

    def data_received(self: Any, data: bytes) -> None:
        note("redis<", data.replace(b"\r\n", b" "))
        _received(self, data)

    script_channel._Link._flush = flush  # type: ignore[method-assign]
    script_channel._Link.data_received = data_received  # type: ignore[method-assign]

    def start(*_: Any) -> None:
        notes.clear()

    def write(*_: Any) -> None:
        path = os.path.join(out_dir, f"{os.getpid()}.tsv")
        with open(path + ".part", "w") as f:
            for at, cpu, kind, what in notes:
                f.write(f"{at:.6f}\t{cpu:.6f}\t{kind}\t{what}\n")
        os.replace(path + ".part", path)

    signal.signal(signal.SIGUSR2, start)
    signal.signal(signal.SIGUSR1, write)
