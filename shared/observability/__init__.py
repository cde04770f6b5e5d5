"""The observability layer: metrics, tracing, logs and the HTTP endpoints.

Above the runtime: the runtime reports through its hooks (runtime/hooks.py), which the
modules imported here fill in, so that any use of this layer installs them.
"""

from . import consume_scope as _consume_scope  # noqa: F401  (fills the consume-scope hook)
from . import metrics as _metrics  # noqa: F401  (fills the chain-count hooks)
from .tracing import propagation as _propagation  # noqa: F401  (fills the trace-headers hook)
