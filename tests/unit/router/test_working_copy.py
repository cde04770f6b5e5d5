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
