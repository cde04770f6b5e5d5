"""`<prefix>.api.limits.usage` (docs/protocol.md, "Model limits"): every key of
LOOPWIRE_MODEL_LIMITS with what it holds now across the llm replicas (requests in flight and
waiting, the last 60 s of requests and input tokens, a cooldown), read from the budget's
keys (shared/stores/model_budget.py)."""

from __future__ import annotations

from loopwire.shared.contract.model_limits import ModelLimits
from loopwire.shared.contract.protocol import PROTOCOL_VERSION, LimitsUsageRequest
from loopwire.shared.contract.query_replies import LimitsUsage
from loopwire.shared.stores.model_budget import ModelLimitStore


async def limits_usage(req: LimitsUsageRequest, store: ModelLimitStore, table: ModelLimits) -> LimitsUsage:
    names = list(table.entries)
    if req.model is not None:
        key = table.key_for(req.model)
        names = [key] if key is not None else []
    return {"v": PROTOCOL_VERSION, "limits": [await store.usage(name, table.entries[name]) for name in names]}
