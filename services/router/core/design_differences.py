"""The rows of docs/profiles.md's table "Where loopwire follows the designs and where it
differs", and where in the repository each one is carried out.

The designs are the loop's three templates: the stage/profile pipeline, the agent loop
(outer and inner loop, steering, loop detection) and the strategy loop (interpret → … →
summarize). Each point where loopwire is partial or differs from them has a row there:
what the design says, what loopwire does, and why. The table's row ids are exactly these
keys, in this order (tests/unit/docs/test_design_differences.py), so a point is never in
the code's list without its reasons, nor left out of the table.
"""

from __future__ import annotations

DESIGN_DIFFERENCES: dict[str, str] = {
    "phases-from-init": "services/router/core/profiles.py",
    "accumulated-answers": "services/router/core/answers.py",
    "turn-by-turn-routing": "services/router/core/approval.py",
    "model-tiers": "services/router/core/step_requests.py",
    "context-fields": "services/tools/invoke.py",
    "inner-cap-tool-rounds": "services/router/core/tool_batches.py",
    "outer-cap-follow-ups": "services/router/core/tool_batches.py",
    "steering-sources": "services/router/core/steering.py",
    "looping-turns-dropped": "services/router/core/loop_detection.py",
    "unbuildable-workflow": "services/tools/staging.py",
    "summary-record": "services/router/core/run_lifecycle.py",
    "converge-fallback": "services/router/core/finish.py",
    "strategy-precedence": "services/router/core/strategy.py",
    "cleared-finding": "services/router/core/finish.py",
    "journal-resume": "services/router/core/journal_resume.py",
    "inner-caps-per-profile": "services/router/core/profiles.py",
    "breaker-threshold": "services/llm/breaker.py",
    "compaction-threshold": "services/memory/context_guard.py",
    "limits-converge": "services/router/core/budget.py",
    "executor-progress": "services/router/core/executor_profiles.py",
}
"""Row id -> the file or folder (from the repository's root) that carries the row out."""
