"""The input pipeline Seneca caches: where samples come from, how they are transformed, and
how their forms are stored as cache values.

* ``storage``: the dataset's files (an ImageFolder-style list of paths and labels);
* ``transforms``: a transform split into the part before the cache and the part after it;
* ``fingerprint``: the name of the part before the cache in cache keys (what its steps do,
  and the libraries that run them);
* ``codec``: cache values (a small header + raw bytes, decoded zero-copy; no pickle);
* ``malloc``: glibc malloc tuning for the processes that hold the pipeline's buffers.
"""

from seneca.pipeline.codec import decode, encode
from seneca.pipeline.storage import IMAGE_EXTENSIONS, Storage
from seneca.pipeline.transforms import CacheBoundary, split_transform

__all__ = ["IMAGE_EXTENSIONS", "CacheBoundary", "Storage", "decode", "encode", "split_transform"]
