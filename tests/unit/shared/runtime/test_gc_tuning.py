"""shared/runtime/gc_tuning.py: the collector's thresholds and the freeze after start-up."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from loopwire.settings import Settings
from loopwire.shared.runtime import gc_tuning


@pytest.fixture
def collector() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


def test_thresholds_and_freeze_are_applied(collector: None) -> None:
    gc_tuning.apply("20000,20,20", freeze=True)
    assert gc.get_threshold() == (20000, 20, 20)
    assert gc.get_freeze_count() > 1000  # at least the modules imported so far


def test_empty_keeps_the_thresholds_and_no_freeze_freezes_nothing(collector: None) -> None:
    before = gc.get_threshold()
    gc_tuning.apply("", freeze=False)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


@pytest.mark.parametrize("text", ["a,b", "1,2,3,4", "-1", "700,,10"])
def test_bad_thresholds_fail_at_start_up(text: str) -> None:
    with pytest.raises(ValidationError, match="thresholds|invalid literal"):
        Settings(gc_thresholds=text)


def test_defaults_are_the_measured_ones() -> None:
    settings = Settings()
    assert gc_tuning.parse_thresholds(settings.gc_thresholds) == (100000, 20, 20) and settings.gc_freeze


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_the_idle_collector_collects_once_when_a_burst_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    collected: list[int] = []
    monkeypatch.setattr(gc_tuning.gc, "collect", lambda *a: collected.append(1) or 0)
    idle = gc_tuning.IdleCollector(interval_s=0.5)
    assert not idle.check(), "quiet from the start: nothing to give back"
    _spin(0.05)  # 10% of a core over the interval: busy
    assert not idle.check() and collected == []
    assert idle.check() and collected == [1], "the first quiet look after a busy one collects"
    assert not idle.check() and not idle.check() and collected == [1], "then nothing while idle"
    _spin(0.05)
    assert not idle.check()
    assert idle.check() and idle.collections == 2


def test_the_idle_collector_frees_cyclic_garbage(collector: None) -> None:
    gc.set_threshold(100000, 20, 20)
    gc.collect()
    ref = weakref.ref(_Cycle())
    assert ref() is not None, "a cycle waits for a collection"
    idle = gc_tuning.IdleCollector(interval_s=0.5)
    _spin(0.05)
    idle.check()
    assert idle.check() and ref() is None
