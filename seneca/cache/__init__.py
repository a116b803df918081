"""The Redis side of Seneca: connections, the wire protocol, keys, the cache tiers and the
servers Seneca starts.

* ``client``: cache URLs and fail-fast, fork-safe redis-py clients;
* ``resp``: replies read straight into their own buffers (the zero-copy read path);
* ``keys``: the key schema of a dataset's tiers;
* ``tiers``: budgeted lookups and admissions of a dataset's tiers (``lua/``);
* ``server``: redis-server configuration and the standalone cache node;
* ``embedded``: the machine-local cache shared by this machine's jobs.
"""

from seneca.cache.client import CacheClient, redact_url, validate_url
from seneca.cache.embedded import acquire_embedded
from seneca.cache.keys import KeySpace
from seneca.cache.tiers import AdmitResult, CacheTiers, Lookup

__all__ = [
    "AdmitResult",
    "CacheClient",
    "CacheTiers",
    "KeySpace",
    "Lookup",
    "acquire_embedded",
    "redact_url",
    "validate_url",
]
