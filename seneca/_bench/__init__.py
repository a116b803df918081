"""Measurement harnesses behind ``seneca bench``, ``validate-model``, ``accuracy``, ``hit-path``,
``demo`` and ``mdp profile``. Nothing in the loader imports them.

* ``harness``: concurrent training jobs over one cache, per loader (``seneca bench``);
* ``fresh``: the bench's jobs as fresh interpreters, started together, reporting once;
* ``training``: what a job does per batch: nothing, an emulated step or a model's step;
* ``gpu_busy``: how busy the GPU was (NVML);
* ``baselines``: the loaders compared (DataLoader, MINIO, Quiver, MDP, Seneca, none);
* ``torch_loaders``: the DataLoader baselines, counted as SenecaLoader counts, and the
  no-loader ceiling;
* ``report``: the bench's tables and plots;
* ``splits``: the planned split against fixed ones, from one bench run;
* ``timeline``: the planned split and throughput as jobs join and leave;
* ``validate``: the MDP model's predictions against measured throughput;
* ``accuracy``: a small training run per loader;
* ``hitpath``: the cache-hit path against raw Redis reads;
* ``profile``: measured inputs of an MDP cluster spec (``mdp profile``);
* ``demo``: the two-minute demo (``make demo``);
* ``synthetic``: synthetic JPEG datasets;
* ``throttle``: emulated storage bandwidth;
* ``provenance``: the command, date, machine and revision each result file records;
* ``spawn``: processes that start together and report once (``mdp profile``, accuracy, demo).
"""

__all__: list[str] = []
