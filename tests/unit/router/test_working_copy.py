"""The transition's working copy: a copy on write of the state's containers, built without
pydantic's model_copy (transition.py `_containers_copied`), so what that shortcut assumes
of the state's models is checked here."""

from __future__ import annotations

from loopwire.router.core.transition import working_copy
from loopwire.shared.contract.run_state import RUN_PARTS, RunState
from loopwire.shared.contract.session_state import SessionState
from tests.router_driver import Driver, call

STATE_MODELS = [SessionState, RunState, *(RunState.model_fields[p].annotation for p in RUN_PARTS)]


def test_the_state_models_have_no_extra_fields_and_no_private_attributes() -> None:
    for model in STATE_MODELS:
        assert model.model_config.get("extra") in (None, "ignore"), model
        assert not model.__private_attributes__, model


def _state_ten_turns_in() -> SessionState:
    d = Driver()
    d.start(input="add 1 and 2", tools=["add"])
    for k in range(10):
        d.answer(call(f"toolu_{k}", inp={"a": k, "b": k}))
        d.tools(content=str(2 * k))
    return d.state


def test_the_copy_equals_the_state_and_shares_no_container() -> None:
    st = _state_ten_turns_in()
    before = st.dump_json()
    copy = working_copy(st)
    assert copy == st and copy.dump_json() == st.dump_json()
    assert copy.model_fields_set == st.model_fields_set and copy.model_fields_set is not st.model_fields_set
    pairs = [(st, copy), (st.run, copy.run)] + [(getattr(st.run, p), getattr(copy.run, p)) for p in RUN_PARTS]
    for original, copied in pairs:
        assert copied is not original
        for name, value in vars(original).items():
            if isinstance(value, list | dict):
                assert vars(copied)[name] is not value, name
    copy.recent_inputs.append("x")
    copy.run.tools.executed[0]["count"] = 99
    assert st.dump_json() == before


def test_an_outbox_entry_is_the_effect_dumped_as_json() -> None:
    """transition._stored keeps a work's envelope as it is instead of dumping it again:
    the entry must be what `model_dump(mode="json")` gives, key order included (it is
    stored), for the effects of a tool-turn's two decisions and of a stored outbox read back."""
    from loopwire.router.core.effects import effect_from_dict
    from loopwire.router.core.transition import _stored as stored_effect

    d = Driver()
    d.start(input="add 1 and 2", tools=["add"])
    decisions = [d.answer(call("toolu_1")), d.tools()]
    effects = [e for decision in decisions for e in decision.effects]
    effects += [effect_from_dict(entry) for entry in d.state.outbox]
    assert {type(e).__name__ for e in effects} >= {"EmitEvent", "PublishWork"}
    for effect in effects:
        entry = stored_effect(effect)
        assert entry == effect.model_dump(mode="json")
        assert list(entry) == list(effect.model_dump(mode="json"))
