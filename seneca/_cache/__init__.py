"""The Redis plumbing of Seneca: connections, the wire protocol and the servers Seneca starts.
The cache engine itself (key schema, budgets, the server-side functions) is ``ods``.

* ``client``: cache URLs and fail-fast, fork-safe redis-py clients;
* ``resp``: replies read straight into their own buffers (the zero-copy read path);
* ``server``: redis-server configuration and the standalone cache node;
* ``embedded``: the machine-local cache shared by this machine's jobs (and, for an idle time,
  by the next ones);
* ``shares``: one node, one budget: the datasets on a node share its memory under one rule;
* ``status``, ``maintenance``, ``metrics``: for operators (``seneca cache``): what a cache
  holds, its garbage collection and clearing, its figures as Prometheus metrics (``replies``:
  plain replies read as text, the server's clock).
"""

from seneca._cache.client import CacheClient, redact_url, validate_url
from seneca._cache.embedded import acquire_embedded

__all__ = [
    "CacheClient",
    "acquire_embedded",
    "redact_url",
    "validate_url",
]
