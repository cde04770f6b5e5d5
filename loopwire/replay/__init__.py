"""Replaying a recorded session against another model or system prompt, and comparing the
two (`loopwire replay`, `loopwire.testing.replay_session`): driver.py runs it,
recording.py reads what a session was made of, comparison.py puts the two side by side."""

from .comparison import ReplayReport, RunComparison, compare
from .driver import ReplayError, replay_session
from .recording import RunRecord, recorded_runs

__all__ = ["ReplayError", "ReplayReport", "RunComparison", "RunRecord", "compare", "recorded_runs", "replay_session"]
