"""The rows of docs/profiles.md's table "Where loopwire follows the designs and where it
differs", and where in the repository each one is carried out.

The designs are the seed documents of the loop: the stage/profile pipeline, the agent
loop (outer and inner loop, steering, loop detection) and the strategy loop (interpret →
… → summarize). Every point where a reading of them found loopwire partial or different
has a row there: what the design says, what loopwire does, and why. The table's row ids
are exactly these keys, in this order (tests/unit/docs/test_design_differences.py), so a
point is never added to the code's list without its reasons, nor left out of the table.
"""

from __future__ import annotations

DESIGN_DIFFERENCES: dict[str, str] = {
    # issue 26, one row per item
    "phases-from-init": "services/router/profiles.py",
    "accumulated-answers": "services/router/answers.py",
    "turn-by-turn-routing": "services/router/approval.py",
    "model-tiers": "services/router/model_tiers.py",
    "context-fields": "services/tools/invoke.py",
    "inner-cap-tool-rounds": "services/router/tool_batches.py",
    "outer-cap-follow-ups": "services/router/iteration_limits.py",
    "steering-sources": "services/router/steering.py",
    "looping-turns-dropped": "services/router/loop_detection.py",
    "unbuildable-workflow": "services/tools/staging.py",
    "summary-record": "services/router/run_lifecycle.py",
    "converge-fallback": "services/router/technical_summary.py",
    "strategy-precedence": "services/router/strategy.py",
    "cleared-finding": "services/router/finish.py",
    "journal-resume": "services/router/journal_resume.py",
    # earlier deliberate differences
    "inner-caps-per-profile": "services/router/profiles.py",
    "breaker-threshold": "services/llm/breaker.py",
    "compaction-threshold": "services/memory/context_guard.py",
    "limits-converge": "services/router/budget.py",
}
"""Row id -> the file or folder (from the repository's root) that carries the row out."""
