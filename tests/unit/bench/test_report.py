"""tests/bench: the floors' plan from a trace, the targets' verdicts and the doc rendered from a results file.

The bench itself is not a test (`make bench`); these check the arithmetic it reports with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopwire.shared.contract import keys
from tests.bench import report
from tests.bench.console import console_table
from tests.bench.floor import plan_from_json, plan_from_trace, plan_to_json
from tests.bench.targets import TARGETS
from tests.bench.trace import key_space

pytestmark = pytest.mark.unit


def _layout(name: str, p50: float, tps: float, kind: str = "loopwire", cpu: float = 1.5, **extra: Any) -> dict[str, Any]:
    run = {"sessions": 200, "turns": 20, "wall_s": 4000 / tps, "turns_per_s": tps, "p50_ms": p50, "p90_ms": p50 * 1.2,
           "p99_ms": p50 * 2, "n_latencies": 100, "n_failures": 0, "failures": []}
    return {"name": name, "kind": kind, "single": run, "load": {**run, "p50_ms": p50 * 50},
            "load_rates": [tps - 10, tps, tps + 10], "cpu_ms": {"a": cpu - 0.5, "nats-server": 0.5},
            "cpu_share": {"a": 0.5, "nats-server": 0.25}, "other_ms": 0.1, "other_share": 0.05,
            "wire": {"nats_in_msgs": 20.0, "nats_out_msgs": 25.0, "nats_in_bytes": 9000.0,
                     "stored": {"work": 5.0, "events": 6.0}, "redis_commands": 40.0, "redis_reads": 15.0,
                     "redis_scripts": 9.0, "redis_by_command": {"evalsha": 9.0, "get": 4.0}}, **extra}


def _lean(rss: float = 70.0, ready: float = 0.6) -> dict[str, Any]:
    facts = {"rss_mb": rss, "idle_cpu_share": 0.002}
    return {"window_s": 5.0, "after_start": {"router": facts, "router 2": facts, "tools": facts},
            "after_load": {"router": {**facts, "rss_mb": rss + 4}, "router 2": facts, "tools": facts},
            "ready_s": {"router": ready, "tools": 0.9}}


def results() -> dict[str, Any]:
    return {
        "version": 3, "date": "2026-12-01 12:00 UTC", "command": "make bench", "duration_s": 420.0,
        "machine": {"git": "abc1234", "cpus": "2", "cpus_usable": "2", "cpu_model": "x", "python": "3.11",
                    "platform": "linux"},
        "servers": {"nats": "nats-server (sync_interval: always)", "redis": "redis (appendonly yes)"},
        "params": {"sessions": 200, "turns": 20, "single": 5, "warmup": 40, "load_runs": 3, "quick": False},
        "order": ["workers", "split", "split_nats_r3", "floor_durable", "floor_raw"],
        "layouts": {
            # 7 ms against a durable floor of 5: 1.4×, within 1.5×; 420 turns/s ≥ 1.3 × 300.
            "workers": _layout("loopwire up --workers 2", 7.0, 420.0, targets=TARGETS["workers"].as_dict(),
                               trace={"nats_msgs": {"event message": 1.0}, "redis_cmds": {"evalsha lw:s": 2.0},
                                      "lua_cmds": {"hset": 3.0}, "timeline": [[0.0, "NATS event message"]]}),
            # 11 ms: 2.2×, over 1.5×; 260 turns/s < 0.9 × 300; CPU 4.4 ms vs 3.0: 1.47×, within 1.5×.
            "split": _layout("6 × loopwire serve (2 routers)", 11.0, 260.0, cpu=4.4, targets=TARGETS["split"].as_dict(),
                             lean=_lean()),
            "split_nats_r3": _layout("split, 3-node NATS (R3)", 14.0, 300.0, nats_nodes=3,
                                     stream_leaders={"n0": ["LOOPWIRE_WORK"],
                                                     "n1": ["LOOPWIRE_EVENTS", "LOOPWIRE_INGRESS"], "n2": []}),
            "floor_durable": _layout("durable floor", 5.0, 300.0, kind="floor", cpu=3.0),
            "floor_raw": _layout("raw floor", 2.5, 1000.0, kind="floor"),
        },
        "bytes": {"20": {"total": 20 * 2900, "keys": 40}, "100": {"total": 100 * 2900, "keys": 200},
                  "200": {"total": 200 * 2900, "keys": 400}},
        "notes": ["a note"], "consume_us": {"raw nats-py": 6.0},
        "floor_plan": [["tools", ["claim"], []], ["router", ["commit"], ["tool.result"]]],
        "floor_plan_from": "6 × loopwire serve (2 routers)", "floor_sizes": [300, 400],
        "default_sync": {
            "servers": {"nats": "nats-server (sync_interval: default)"},
            "order": ["split", "floor_durable"], "notes": [],
            "layouts": {
                # 500 turns/s ≥ 0.6 × 800 (480), which the 0.9× of the first pass would not meet.
                "split": _layout("6 × loopwire serve (2 routers)", 8.0, 500.0, cpu=4.0,
                                 targets=TARGETS["split"].as_dict()),
                "floor_durable": _layout("durable floor", 6.0, 800.0, kind="floor", cpu=2.5)}},
    }


def test_each_target_is_judged_against_the_durable_floor() -> None:
    got = {target: (measured, met) for target, measured, met in report.verdicts(results())}
    assert got["`loopwire up --workers 2`: p50 (single session) ≤ 1.5× the durable floor"] == \
        ("7.00 ms vs 5.00 ms = 1.40×", True)
    assert got["`loopwire up --workers 2`: tool-turns/s ≥ 1.3× the durable floor (200 sessions × 20 tool-turns)"] \
        == ("420 vs 300 turns/s = 1.40× (median of 3 runs: 410, 420, 430)", True)
    assert got["`6 × loopwire serve (2 routers)`: p50 (single session) ≤ 1.5× the durable floor"] == \
        ("11.00 ms vs 5.00 ms = 2.20×", False)
    assert got["`6 × loopwire serve (2 routers)`: CPU per tool-turn ≤ 1.5× the durable floor"] == \
        ("4.40 ms vs 3.00 ms = 1.47×", True)
    assert got["`6 × loopwire serve (2 routers)`: tool-turns/s ≥ 0.9× the durable floor (200 sessions × 20 "
               "tool-turns)"][1] is False
    assert got["(reference) the durable floor vs the raw floor, p50 (single session)"] == \
        ("5.00 ms vs 2.50 ms = 2.00×", None)
    assert got["Redis bytes linear in turns"][1] is True
    # The second pass: the same targets, its own floor, 0.6× for the split layout's turns/s.
    assert got["with nats-server's default sync: `6 × loopwire serve (2 routers)`: tool-turns/s ≥ 0.6× the "
               "durable floor (200 sessions × 20 tool-turns)"] == ("500 vs 800 turns/s = 0.62× (median of 3 runs: "
                                                                    "490, 500, 510)", True)
    assert got["with nats-server's default sync: `6 × loopwire serve (2 routers)`: CPU per tool-turn ≤ 1.5× the "
               "durable floor"] == ("4.00 ms vs 2.50 ms = 1.60×", False)


def test_a_layout_is_judged_against_the_floor_that_took_turns_with_it() -> None:
    """The floor's sessions and load runs measured in turns with the layout's (`single_floor`,
    `floor_alongside`) are its yardstick, not the floor's own row measured minutes later."""
    res = results()
    beside = _layout("durable floor", 10.0, 200.0, kind="floor", cpu=4.0)
    res["layouts"]["split"].update(single_floor=beside["single"],
                                   floor_alongside={k: beside[k] for k in ("load", "load_rates", "cpu_ms")})
    got = {target: (measured, met) for target, measured, met in report.verdicts(res)}
    assert got["`6 × loopwire serve (2 routers)`: p50 (single session) ≤ 1.5× the durable floor"] == \
        ("11.00 ms vs 10.00 ms = 1.10× (the floor's sessions alternating with these)", True)
    assert got["`6 × loopwire serve (2 routers)`: CPU per tool-turn ≤ 1.5× the durable floor"] == \
        ("4.40 ms vs 4.00 ms = 1.10× (the floor's load runs taking turns with these: median of 3 runs: "
         "190, 200, 210)", True)
    assert got["`6 × loopwire serve (2 routers)`: tool-turns/s ≥ 0.9× the durable floor (200 sessions × 20 "
               "tool-turns)"] == ("260 vs 200 turns/s = 1.30× (median of 3 runs: 250, 260, 270) (the floor's load "
                                  "runs taking turns with these: median of 3 runs: 190, 200, 210)", True)
    # A layout without them (workers here) is still judged against the floor's own row.
    assert got["`loopwire up --workers 2`: p50 (single session) ≤ 1.5× the durable floor"] == \
        ("7.00 ms vs 5.00 ms = 1.40×", True)
    table = "\n".join(report.beside_table(res))
    assert "| 6 × loopwire serve (2 routers) | 11.00 ms | 10.00 ms | 260 (median of 3 runs: 250, 260, 270) | " \
           "200 (median of 3 runs: 190, 200, 210) | 4.40 | 4.00 |" in table
    assert "loopwire up --workers 2" not in table


def test_the_idle_processes_are_judged_by_the_worst_one() -> None:
    got = {target: (measured, met) for target, measured, met in report.verdicts(results())}
    assert got["every idle `loopwire serve NAME`: RSS ≤ 90 MB"] == ("at most 74 MB (router)", True)
    assert got["every idle `loopwire serve NAME`: ≤ 1% of a core"][1] is True
    assert got["every `loopwire serve NAME`: ready ≤ 2 s after exec"] == ("router 0.60 s, tools 0.90 s", True)
    res = results()
    res["layouts"]["split"]["lean"] = _lean(rss=95.0, ready=2.5)
    got = {target: met for target, _measured, met in report.verdicts(res)}
    assert got["every idle `loopwire serve NAME`: RSS ≤ 90 MB"] is False
    assert got["every `loopwire serve NAME`: ready ≤ 2 s after exec"] is False


def test_bytes_that_grow_faster_than_the_turns_are_not_linear() -> None:
    res = results()
    res["bytes"]["200"]["total"] = 200 * 2900 + 100 * 5000
    (verdict,) = [v for v in report.verdicts(res) if v[0] == "Redis bytes linear in turns"]
    assert verdict[2] is False


def test_a_fork_of_a_thousand_events_is_judged_by_its_p50() -> None:
    res = results()
    res["fork"] = {"layout": "split", "events": 1014, "messages": 468, "forks": 20, "p50_ms": 26.0, "p99_ms": 120.0}
    target = "forking a session of 1,000 events (p50, one Redis)"
    assert dict((t, met) for t, _, met in report.verdicts(res))[target] is True
    res["fork"]["p50_ms"] = 101.0
    assert dict((t, met) for t, _, met in report.verdicts(res))[target] is False
    res["fork"].update(p50_ms=20.0, events=400)
    assert dict((t, met) for t, _, met in report.verdicts(res))[target] is False, "a session that was too short"


def test_the_doc_block_is_rendered_from_the_results_file(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\nkept above\n\n{report.START}\nold numbers\n{report.END}\n\nkept below\n")
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(results()))
    assert report.main([str(path), "--doc", str(doc)]) == 0
    text = doc.read_text()
    assert "kept above" in text and "kept below" in text and "old numbers" not in text
    block = text[text.index(report.START):text.index(report.END)]
    for name in ("loopwire up --workers 2", "6 × loopwire serve (2 routers)", "durable floor", "raw floor"):
        assert f"| {name} |" in block
    # The targets table says which are met, the layouts table gives both ratios.
    assert "| `6 × loopwire serve (2 routers)`: p50 (single session) ≤ 1.5× the durable floor | 11.00 ms vs 5.00 " \
        "ms = 2.20× | **no** |" in block
    assert "| router | 70 MB | 0.20% | 74 MB | 0.20% | 0.60 s |" in block
    assert "### The same with nats-server's default `sync_interval`" in block
    assert block.count("| 6 × loopwire serve (2 routers) | 8.00 ms | 16.00 ms | 1.33× |") == 1  # its layout table
    assert "| loopwire up --workers 2 | 7.00 ms | 14.00 ms | 1.40× | 2.80× |" in block
    assert "| JetStream messages stored: work | 5.00 | 5.00 | 5.00 | 5.00 | 5.00 |" in block
    # The clustered layout: which node leads which stream, a node leading none said so.
    assert "| split, 3-node NATS (R3) | n1 | `LOOPWIRE_EVENTS`, `LOOPWIRE_INGRESS` |" in block
    assert "| split, 3-node NATS (R3) | n2 | — |" in block
    assert "stream leaders, split, 3-node NATS (R3): n0: LOOPWIRE_WORK; n1: LOOPWIRE_EVENTS, LOOPWIRE_INGRESS; n2: —" \
        in console_table(results())
    assert "`abc1234`" in block


def test_quick_mode_is_marked_as_not_the_issues_load() -> None:
    res = results()
    res["params"]["quick"] = True
    assert "quick mode, not the issue's load" in report.markdown(res)
    assert "QUICK MODE" in console_table(res)


def test_the_floor_plan_puts_each_call_and_event_at_the_service_that_makes_it() -> None:
    redis = {"evalsha lw:claim:tools": 2.0, "evalsha lw:claim:gen": 2.0, "evalsha lw:s": 2.0, "hmget lw:s": 0.1,
             "lrange lw:h": 1.6, "evalsha lw:seq": 1.0}
    events = {"tool.result": 1.0, "tools.progress": 1.0, "generating": 1.0, "message": 1.0, "tool.call": 1.0}
    tools, router_in, memory, llm, router_out = plan_from_trace(redis, events)
    assert tools.redis == ("claim", "claim") and tools.events == ()
    assert router_in.redis == ("commit",) and router_in.events == ("tool.result", "tools.progress")
    assert memory.redis == ("get", "lrange")  # 1.6 LRANGE: one, and the 0.6 left a plain round trip
    assert llm.redis == ("claim", "claim", "event") and llm.events == ("generating",)
    assert router_out.redis == ("commit",) and router_out.events == ("message", "tool.call")


def test_the_floor_stores_as_many_events_as_the_trace_counted() -> None:
    """Fewer than one per tool-turn every so many turns, and a run's own events once per
    run beyond the final answer's `generating`, `message` and `run.ended`, which the floor
    always publishes."""
    events = {"message": 1.0, "tool.call": 1.0, "memory.observation": 0.1, "user.message": 1.0}
    run_events = {"run.started": 1.0, "phase.changed": 2.0, "user.message": 1.0, "generating": 1.0, "message": 1.0,
                  "run.ended": 1.0}
    plan = plan_from_trace({}, events, run_events)
    memory, router_out = plan[2], plan[4]
    assert memory.events == () and memory.occasional == (("memory.observation", 10),)
    assert router_out.per_run == ("phase.changed", "phase.changed", "run.started", "user.message")
    assert memory.events_at(10) == ["memory.observation"] and memory.events_at(11) == []
    assert router_out.events_at(1) == ["message", "tool.call", "phase.changed", "phase.changed", "run.started",
                                       "user.message"]
    assert router_out.events_at(2) == ["message", "tool.call"]
    stored = sum(len(hop.events_at(turn)) for turn in range(1, 21) for hop in plan)
    assert stored == 20 * 3 + 2 + 4  # three a turn, the observations, the run's own
    assert plan_from_json(plan_to_json(plan)) == plan


def test_key_spaces_keep_the_kind_of_step_claimed() -> None:
    assert key_space(keys.step_claim(keys.tool_batch_step("s1", "run:t1"))) == "lw:claim:tools"
    assert key_space(keys.step_claim(keys.generation_step("s1", "run:g1"))) == "lw:claim:gen"
    assert key_space(keys.step_record(keys.generation_step("s1", "run:g1"))) == "lw:step:gen"
    assert key_space(keys.session_state("s1")) == "lw:s"
    assert key_space("other") == ""


def test_a_clustered_layout_reports_its_keys_per_master_and_the_replica_wait() -> None:
    res = results()
    res["order"] = [*res["order"][:2], "split_redis_cluster", *res["order"][2:]]
    res["layouts"]["split_redis_cluster"] = _layout("split, 3-master Redis Cluster", 12.0, 380.0,
                                                    redis_keys_per_master={"127.0.0.1:7001": 310,
                                                                           "127.0.0.1:7000": 290})
    res["replica_wait"] = {"no_wait": {"p50_us": 170.0, "p99_us": 500.0, "per_s": 9500.0, "client_cpu_us": 100.0,
                                       "master_cpu_us": 20.0},
                           "wait_1": {"p50_us": 240.0, "p99_us": 1300.0, "per_s": 7500.0, "client_cpu_us": 123.0,
                                      "master_cpu_us": 24.0}}
    table = console_table(res)
    assert "Redis keys per master, split, 3-master Redis Cluster: 290, 310" in table
    assert "event append, wait_1: p50 240 µs" in table
    doc = report.markdown(res)
    assert "| split, 3-master Redis Cluster | 290, 310 |" in doc
    assert "| wait_1 | 240 µs | 1300 µs | 7500 | 123 | 24 |" in doc


def test_the_summary_holds_the_run_and_its_targets_and_points_at_every_table(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\nmethod\n\n{report.SUMMARY_START}\nold\n{report.SUMMARY_END}\n\nafter\n")
    full = tmp_path / "bench-results.md"
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(results()))
    assert report.main([str(path), "--doc", str(full), "--summary", str(doc)]) == 0
    text = doc.read_text()
    summary = text[text.index(report.SUMMARY_START):text.index(report.SUMMARY_END)]
    assert "method" in text and "after" in text and "old" not in summary
    assert "| `6 × loopwire serve (2 routers)`: p50 (single session) ≤ 1.5× the durable floor |" in summary
    assert "docs/bench-results.md" in summary and "### Every layout" not in summary
    assert "### Every layout against both floors" in full.read_text()


def _provider_run(added_p50: float, rss_kb: float, **fake: Any) -> dict[str, Any]:
    return {"sessions": 1000, "turns": 5, "wall_s": 40.0, "n_failures": 0, "failures": [], "tool_turns": 5000,
            "added_p50_ms": added_p50, "added_p99_ms": 300.0, "rss_per_session_kb": rss_kb,
            "rss_peak_mb": {"router": 90.0, "llm": 150.0}, "cpu_ms_per_tool_turn": {"router": 2.0, "llm": 3.0},
            "fake": {"requests": 6000, "max_in_flight": 1000, "rate_limited": 0, "max_in_60s": 6000, **fake}}


def test_the_provider_bound_pass_is_judged_and_rendered() -> None:
    from tests.bench.targets import provider_verdicts

    limited = {**_provider_run(80.0, 50.0, max_in_flight=50, max_in_60s=600, achieved_rpm=580.0),
               "sessions": 200, "limits": {"max_concurrent": 50, "rpm": 600}}
    res = {"provider_bound": {"model_s": 5.0, "first_token_s": 1.0, "tool_s": 0.5,
                              "load": _provider_run(30.0, 70.0), "limited": limited}}
    verdicts = {target.split(":")[-1].strip(): met for target, _, met in provider_verdicts(res)}
    assert verdicts["every run completed"] is True
    assert verdicts["the same, p99 ≤ 500 ms"] is True
    assert verdicts["RSS per session in flight ≤ 64 KB over loopwire's processes"] is False, "70 KB > 64 KB"
    assert [met for target, _, met in provider_verdicts(res) if "achieved" in target] == [True], "580 ≥ 95% of 600"
    limited["fake"]["rate_limited"] = 1
    assert [met for target, _, met in provider_verdicts(res) if "0 429s" in target] == [False]
    table = "\n".join(report.provider_table(res))
    assert "| no limits | 1000 × 5 | 40.0 s | 30.0 ms | 300.0 ms | 70 KB |" in table
    assert "580/min" in table


def test_the_cost_pass_is_judged_and_rendered() -> None:
    from tests.bench.targets import cost_verdicts

    def run(cost: float, read: int, compactions: int = 0) -> dict[str, Any]:
        return {"status": "completed", "turns": 21, "cost_usd": cost, "compactions": compactions,
                "usage": {"input_tokens": 1000, "cache_read_input_tokens": read}}

    res = {"cost": {"turns": 20, "model": "claude-sonnet-4-5", "cached": run(0.12, 880), "uncached": run(0.55, 0),
                    "compacting": run(0.2, 800, compactions=2), "min_share_from_turn_3": 0.84, "cost_ratio": 0.12 / 0.55,
                    "after_compaction_share": 0.87}}
    assert [met for _, _, met in cost_verdicts(res)] == [True, True, True]
    res["cost"]["after_compaction_share"] = None
    res["cost"]["cost_ratio"] = 0.5
    assert [met for _, _, met in cost_verdicts(res)] == [True, False, False]
    table = "\n".join(report.cost_table(res))
    assert "| cached | completed | 21 | 0.1200 USD | 88% | 0 |" in table
