"""What the ingress fuzzing publishes (tests/e2e/test_operator_policy.py, issue 13, item 8).

Hypothesis generates bodies that are each bad in one way (not JSON, not an object, wrong
types, missing fields, unknown enum values, sizes around LOOPWIRE_MAX_BODY_BYTES,
nesting beyond LOOPWIRE_MAX_BODY_DEPTH, `v` other than 1, loopwire's internal fields in
content, odd unicode everywhere), for every ingress verb (and unknown verbs) and for the
queries; and subjects whose session id holds `*`, `>`, `.` or other characters a
session id may not have. The counts are recorded in docs/testing.md.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

MAX_BYTES = 4096
INGRESS_EXAMPLES = 2000
QUERY_EXAMPLES = 600
SUBJECT_EXAMPLES = 200
VERBS = ("start", "message", "steer", "abort", "decision")

# -- strategies ------------------------------------------------------------------------------
ODD = ["\u0000", "\u202e", "\ufeff", "\U0001f4a5", "e\u0301", "\u2028", "\uffff", "\U0010ffff", "\\", "\"", "%s",
       "..", ".*>", "null"]
odd_text = st.one_of(st.text(max_size=24), st.sampled_from(ODD),
                     st.lists(st.sampled_from(ODD), min_size=1, max_size=6).map("".join))
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64),
                    st.floats(allow_nan=False, allow_infinity=False), odd_text)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(odd_text, inner, max_size=4)),
                      max_leaves=6)
non_objects = st.one_of(scalars, st.lists(values, max_size=3))
extras = st.dictionaries(odd_text.map(lambda k: f"x{k}"), values, max_size=2)
"""Unknown fields (ignored by the contract), never one of the contract's own names."""


def dumps(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")


def not_a_str_or_list(allow_list: bool = False) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                     st.dictionaries(odd_text, scalars, max_size=3),
                     *( [st.lists(st.integers(), min_size=1, max_size=3)] if allow_list else []))


def nested(depth: int, leaf: Any) -> Any:
    for n in range(depth):
        leaf = {"k": leaf} if n % 2 else [leaf]
    return leaf


@st.composite
def wrong_types(draw: st.DrawFn, verb: str) -> bytes:
    body: dict[str, Any] = draw(extras)
    if verb == "start":
        body["input"] = draw(st.one_of(
            not_a_str_or_list(), st.just(""), st.just("   "), st.just([]),
            st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "tool", "", "assistant"]),
                                            "content": odd_text}), min_size=1, max_size=3)))
        if draw(st.booleans()):
            body["profile"] = draw(odd_text.filter(lambda p: p not in {"agentic", "conversational"}))
    elif verb in ("message", "steer"):
        if draw(st.booleans()):
            body["content"] = draw(st.one_of(not_a_str_or_list(allow_list=True), st.just(""), st.just([])))
    elif verb == "decision":
        body["checkpoint_id"] = draw(st.one_of(not_a_str_or_list(), odd_text))
        body["decision"] = draw(st.one_of(scalars.filter(lambda d: d not in ("approve", "deny"))))
    else:  # abort: any body is an error on a session without a run (no_active_run)
        if draw(st.booleans()):
            body["reason"] = draw(st.one_of(not_a_str_or_list(), odd_text))
    return dumps(body)


def valid_body(verb: str, text: str) -> dict[str, Any]:
    return {"start": {"input": text}, "message": {"content": text}, "steer": {"content": text},
            "abort": {"reason": text}, "decision": {"checkpoint_id": "c", "decision": "approve"}}[verb]


@st.composite
def ingress_case(draw: st.DrawFn) -> tuple[str, bytes]:
    verb = draw(st.sampled_from(VERBS))
    kind = draw(st.sampled_from(["not_json", "not_object", "wrong_types", "too_large", "too_deep", "version",
                                 "internal", "unknown_verb", "workspace"]))
    if kind == "not_json":
        data = draw(st.one_of(
            st.binary(max_size=64).filter(_not_json),
            st.sampled_from([b"", b"{", b'{"input": "x"', b'{"input": "\\ud800"}', b"\xff\xfe{}", b"{'a': 1}",
                             b'{"input": NaN}', b"[1,2,"])))
    elif kind == "not_object":
        data = dumps(draw(non_objects))
    elif kind == "wrong_types":
        data = draw(wrong_types(verb))
    elif kind == "too_large":
        size = draw(st.integers(min_value=MAX_BYTES + 1, max_value=MAX_BYTES + 600))
        body = valid_body(verb, "")
        data = dumps({**body, "pad": "x" * size})
    elif kind == "too_deep":
        depth = draw(st.integers(min_value=33, max_value=400))
        data = dumps({**valid_body(verb, "hi"), draw(st.sampled_from(["metadata", "pad", "input", "content"])):
                      nested(depth, draw(scalars))})
    elif kind == "version":
        v = draw(st.one_of(st.integers().filter(lambda n: n != 1), st.just("1"), st.booleans(),
                           st.just(1.5), st.none(), st.lists(st.just(1), max_size=2)))
        data = dumps({"v": v, **valid_body(verb, "hi")})
    elif kind == "internal":
        key = draw(st.sampled_from(["loopwire_ref", "loopwire_blob", "LOOPWIRE_REF", "loopwire"]))
        block = {"type": "text", "text": draw(odd_text), key: draw(values)}
        verb = draw(st.sampled_from(["start", "message", "steer"]))
        data = dumps({"input": [{"role": "user", "content": [block]}]} if verb == "start" else {"content": [block]})
    elif kind == "workspace":  # never a directory inside the operator's roots
        verb = "start"
        where = draw(st.one_of(odd_text.map(lambda t: f"{t}\x00"), st.sampled_from(["/etc", "/", "..", "../..",
                                                                                   "/proc/self", "a" * 5000]),
                               st.integers(), st.lists(st.just("x"), min_size=1, max_size=2)))
        data = dumps({"input": "hi", "profile": draw(st.sampled_from(["agentic", "agentic_planned"])),
                      "metadata": {"workspace": where, "allowed_roots": ["/"]}})
    else:
        verb = draw(odd_text.filter(lambda v: v not in VERBS and v and all(c not in v for c in ".*> \t\r\n")
                                    and v.isprintable()))
        data = dumps(valid_body("start", "hi"))
    return verb, data


def _not_json(data: bytes) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return True
    return False


@st.composite
def query_case(draw: st.DrawFn) -> tuple[str, bytes]:
    what = draw(st.sampled_from(["session.get", "transcript.get"]))
    kind = draw(st.sampled_from(["not_json", "not_object", "bad_id", "wrong_types", "deep", "version"]))
    if kind == "not_json":
        data = draw(st.binary(max_size=32).filter(_not_json))
    elif kind == "not_object":
        data = dumps(draw(non_objects))
    elif kind == "bad_id":
        data = dumps({"session_id": draw(st.one_of(st.just(""), st.just("x" * 129),
                                                   odd_text.map(lambda t: f"a{t}*.>")))})
    elif kind == "wrong_types":
        body = draw(extras)
        body.pop("session_id", None)
        if draw(st.booleans()):
            body["session_id"] = draw(not_a_str_or_list(allow_list=True))
        if what == "transcript.get" and draw(st.booleans()):
            body = {"session_id": "ok", "limit": draw(st.one_of(st.integers(max_value=0), st.integers(min_value=10001),
                                                                st.just("10")))}
        data = dumps(body)
    elif kind == "deep":
        data = dumps({"session_id": "ok", "x": nested(draw(st.integers(min_value=33, max_value=300)), 1)})
    else:
        data = dumps({"session_id": "ok", "v": draw(st.integers().filter(lambda n: n != 1))})
    return what, data


bad_sids = st.one_of(st.sampled_from(["*", ">", "a.b", "a*b", "x>y", "a b", "\u00e9t\u00e9", "x" * 129, "a\tb"]),
                     st.tuples(st.text(alphabet="ab", min_size=1, max_size=4), st.sampled_from(".*>"),
                               st.text(alphabet="ab", max_size=4)).map("".join))


def generate(strategy: st.SearchStrategy[Any], n: int) -> list[Any]:
    """`n` examples of `strategy`, drawn by Hypothesis (its generation, its edge cases)."""
    out: list[Any] = []

    @settings(max_examples=n, database=None, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(example: Any) -> None:
        out.append(example)

    collect()
    return out


