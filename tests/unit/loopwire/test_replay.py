"""What a replay reads from a recorded session (loopwire/replay/recording.py) on transcripts
the router's core writes: each run's start, its inputs and the points they were applied
at, its decisions; and the comparison of two sessions (comparison.py, the testing helper's
assertion)."""

from __future__ import annotations

import pytest

from loopwire.replay import compare, recorded_runs
from loopwire.shared.contract.protocol import StartRun
from loopwire.testing import assert_replay_holds
from tests.router_driver import Recorder, call

pytestmark = pytest.mark.unit


def recorded() -> Recorder:
    """Run 1: started with a list input, a steer during its tool call, a follow-up taken
    at the outer boundary; run 2 (a message on the idle session): a checkpoint approved,
    then an abort."""
    d = Recorder()
    d.start(input=[{"role": "user", "content": "My code is A7."}, {"role": "assistant", "content": "Noted."},
                   {"role": "user", "content": "Add 1 and 2."}],
            system="be brief", model={"primary": "m1", "fallbacks": ["m2"], "max_tokens": 300},
            tool_permissions={"rm": "approve"}, limits={"max_turns": 7})
    d.answer("Adding.", call("t1"))
    d.steer("Use 5 and 5.")
    d.answer("Adding again.", call("t2", inp={"a": 5, "b": 5}))
    d.message("Then say done.")  # queued: taken at the outer boundary after turn 3
    d.tools("10")
    d.answer("It is 10.")
    d.answer("Done.")
    d.message("Remove the file.")
    d.answer("Removing.", call("t3", "rm", {"path": "/tmp/x"}))
    (asked,) = d.of("approval.requested")[-1:]
    d.decision(asked["checkpoint_id"], "approve", note="fine")
    d.abort("enough")
    return d


def test_each_run_its_start_its_inputs_at_their_points_and_its_decisions() -> None:
    one, two = recorded_runs(recorded().transcript)
    start = one.start_body()
    assert StartRun.model_validate(start).input[-1].content == [{"type": "text", "text": "Add 1 and 2."}]
    assert [m["role"] for m in start["input"]] == ["user", "assistant", "user"]
    assert start["system"] == "be brief" and start["limits"]["max_turns"] == 7
    assert start["model"] == {"primary": "m1", "fallbacks": ["m2"], "max_tokens": 300}
    assert start["tool_permissions"] == {"rm": "approve"}
    assert [(i.verb, i.after_turns, i.body["content"][0]["text"]) for i in one.inputs] == [
        ("steer", 1, "Use 5 and 5."), ("message", 2, "Then say done.")], "the points they were applied at"
    assert one.ended is not None and one.ended["status"] == "completed"
    assert [c["name"] for c in one.tool_calls] == ["add", "add"] and one.models == ["m1"]

    assert two.start_body()["input"] == "Remove the file.", "a message on the idle session opened run 2"
    assert two.decisions == [{"decision": "approve", "note": "fine"}]
    assert [(i.verb, i.body) for i in two.inputs] == [("abort", {"reason": "enough"})]
    other = two.start_body(model="m9", system="new prompt")
    assert other["model"]["primary"] == "m9" and "fallbacks" not in other["model"] and other["system"] == "new prompt"


def test_the_comparison_and_the_assertion_of_the_testing_helper() -> None:
    runs = recorded_runs(recorded().transcript)
    same = compare(runs, runs, source_session="a", replay_session="b", tools="recorded")
    assert not same.differs
    assert_replay_holds(same, final_text=True, tool_calls=True)
    changed = recorded_runs(recorded().transcript)
    assert changed[0].ended is not None
    changed[0].ended = {**changed[0].ended, "final_text": "It is eleven.", "status": "max_turns"}
    changed[1].tool_calls = []
    report = compare(runs, changed, source_session="a", replay_session="b", tools="recorded", model="m9")
    assert report.differs and report.runs[0].status_differs and report.runs[1].tool_calls_differ
    assert "+It is eleven." in report.runs[0].text_diff()
    with pytest.raises(AssertionError, match="run 1: status completed -> max_turns"):
        assert_replay_holds(report)
    text = str(report)
    assert "run 1" in text and "≠" in text and "the replay differs" in text
    missing = compare(runs, runs[:1], source_session="a", replay_session="b", tools="live")
    assert missing.differs and missing.runs[1].replay is None, "a run the replay never had"
    assert missing.to_dict()["runs"][1]["status_differs"] is True
