"""The key schema of one dataset's cache: metadata under one hash tag, values spread.

A dataset's metadata lives under the hash tag ``{<dataset>}``, so a Redis Cluster keeps it in
one slot and the engine's functions (``ods.functions``) can touch it atomically. Each value
has a hash tag of its own, so a cluster spreads values over every node.

The encoded and decoded tiers are the dataset's, shared by every job. Augmented copies depend
on the job's transform: each transform is a *view* of the dataset with an augmented tier of its
own (its bitmap, sizes, budget field and values carry ``a:<view>`` where the other tiers carry
their letter; ``<form>`` below). A job's name in the engine ends with ``|<view>``::

    seneca:{<dataset>}:t:<form>          bitmap: samples cached in the tier
    seneca:{<dataset>}:sz:<form>         u32 per sample: bytes charged for its value
    seneca:{<dataset>}:used              hash: units used per tier (<form>), entries n<form>;
                                         samples served, hits:<letter>, subs (running totals)
    seneca:{<dataset>}:jobs              zset: live jobs -> lease expiry (ms)
    seneca:{<dataset>}:pace              hash: how soon each job takes a copy it needs: ticks
                                         (decisions of all jobs); per job t:<job> (the tick of
                                         its latest), g:<job> (ticks between its decisions,
                                         smoothed), c:<job> (cached copies it may use per
                                         sample it asks for)
    seneca:{<dataset>}:info              hash: what the dataset is, for operators (samples,
                                         about, budget:<form>, seen, shard_size where it is in
                                         shards); no function reads it (the budgets
                                         function writes the budgets)
    seneca:{<dataset>}:plan              string: the split the dataset's loaders plan together
                                         (JSON: split, inputs, version); no function reads it
    seneca:{<dataset>}:ref, :doom        'paper' policy: hits per sample, samples to evict
    seneca:{<dataset>}:x:c, :x:g         scratch bitmaps of one call
    seneca:{<dataset>}:gc, :gc:<view>    zsets: evicted entries -> when their value is collected
                                         (encoded and decoded; the view's augmented)
    seneca:{<dataset>}:j:<job>           hash: samples of the job, latest epoch, served per epoch
    seneca:{<dataset>}:r:<job>, :p:<job> bitmaps: unserved in its latest / previous epoch
    seneca:{<dataset>}:g:<job>           bitmap: the job used the current augmented copy
    seneca:{<dataset>}:m:<job>           bitmap: samples the job trains on (absent: all)
    seneca:{<dataset>}:place:<job>:<e>:<b>  hash: each rank of a data-parallel job's consumed
                                         samples when its state was saved after b batches of
                                         epoch e (rank -> bitmap; expires)
    seneca:{<dataset>}:pin:<b>, pinc:<b> pins of fetches decided in pin-lease bucket b
    seneca:{<dataset>}:pend:<b>          bitmap: misses decided in bucket b, not yet offered
    seneca:node                          hash: what the datasets on this node ask of its
                                         memory (want:, need:, samples:, seen:<dataset>);
                                         no function reads it
    seneca:v:{<dataset>:<form>:<i>}      sample i's value in a tier
    seneca:v:{<dataset>:<form>:<i>}:s:<token>  a value staged for admission (expires)

Without a view (``view=""``, payload-free simulation) the augmented form is plain ``a``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ods import defaults
from seneca_base.errors import ConfigError
from seneca_base.tiers import LETTER, TIERS

__all__ = [
    "BUDGET_FIELD",
    "BUDGET_VERSION",
    "DECLARED_JOB_KEYS",
    "JOB_KEYS",
    "SHARD_MARK",
    "SHARD_SIZE_FIELD",
    "Keys",
    "glob_escape",
    "lua_layout",
]

#: A job's keys (``<meta><k>:<job>``) and the type each holds.
JOB_KEYS: dict[str, str] = {"j": "hash", "r": "string", "p": "string", "g": "string", "m": "string"}
#: The fields of a dataset's ``info`` hash holding the budgets in force: this, then the form.
BUDGET_FIELD = "budget:"
#: The field of a dataset's ``info`` hash holding the version of the plan whose budgets are in
#: force (absent: none said; see ``budgets.lua``)
BUDGET_VERSION = "budget_version"
#: The field of a dataset's ``info`` hash holding the samples per shard of its metadata, where
#: it is kept in shards (absent: one store; see ``ods.shards``)
SHARD_SIZE_FIELD = "shard_size"
#: What joins a dataset's name and a shard's number in the shard's own dataset name
#: (``<dataset>#<k>``; :func:`ods.shardmap.shard_names`).
SHARD_MARK = "#"
#: The keys a call declares for each live job, after the layout's (:meth:`Keys.layout`).
DECLARED_JOB_KEYS: tuple[str, ...] = ("r", "g", "m")


def glob_escape(text: str) -> str:
    """``text`` with SCAN glob characters escaped."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


@dataclass(frozen=True)
class Keys:
    """Key names of one dataset."""

    dataset: str
    prefix: str = defaults.KEY_PREFIX
    view: str = ""

    def __post_init__(self) -> None:
        if "|" in self.view or ":" in self.view:
            raise ConfigError(f"view: no '|' or ':' allowed, got {self.view!r}")

    def form(self, tier: str) -> str:
        """How ``tier`` is named in keys and budget fields: its letter, for the augmented tier
        with the view (``a:<view>``)."""
        letter = LETTER[tier]
        return f"{letter}:{self.view}" if letter == "a" and self.view else letter

    def budget_field(self, tier: str) -> str:
        """The field of :attr:`info` that holds ``tier``'s budget in force."""
        return BUDGET_FIELD + self.form(tier)

    @staticmethod
    def view_of(name: str) -> str:
        """The view of a job named ``name`` by the engine ("" for none), as lib.lua reads it."""
        return name.rpartition("|")[2] if "|" in name else ""

    def job_name(self, job: str) -> str:
        """``job`` as the engine names it: with its view (``<job>|<view>``)."""
        return f"{job}|{self.view}" if self.view else job

    @staticmethod
    def node(prefix: str = defaults.KEY_PREFIX) -> str:
        """The node's record of the datasets sharing its memory (one per node or cluster)."""
        return f"{prefix}:node"

    @staticmethod
    def everything(prefix: str = defaults.KEY_PREFIX) -> str:
        """A glob matching every key kept under ``prefix`` (SCAN, ACL key patterns)."""
        return f"{glob_escape(prefix)}:*"

    @property
    def meta(self) -> str:
        """The prefix of every metadata key (ends with ``:``)."""
        return f"{_meta_head(self.prefix)}{self.dataset}}}:"

    #: The metadata keys every dataset with metadata has one of at least, by name.
    _MARKS = ("used", "jobs", "info")

    @staticmethod
    def dataset_patterns(prefix: str = defaults.KEY_PREFIX) -> list[str]:
        """SCAN patterns that find every dataset with metadata under ``prefix``: each key is
        one of :meth:`used`, :meth:`jobs` or :meth:`info` (:meth:`dataset_of` names its
        dataset)."""
        return [f"{glob_escape(_meta_head(prefix))}*}}:{mark}" for mark in Keys._MARKS]

    @staticmethod
    def dataset_of(key: str, prefix: str = defaults.KEY_PREFIX) -> str | None:
        """The dataset whose :meth:`used`, :meth:`jobs` or :meth:`info` key ``key`` is (None:
        another key)."""
        head, _, mark = key.rpartition(":")
        start = _meta_head(prefix)
        if mark not in Keys._MARKS or not head.startswith(start) or not head.endswith("}"):
            return None
        return head[len(start) : -1] or None

    def tier(self, tier: str) -> str:
        return self.bitmap(self.form(tier))

    def bitmap(self, form: str) -> str:
        """The bitmap of the tier named ``form`` in keys (:meth:`form`)."""
        return f"{self.meta}t:{form}"

    def view_tiers(self) -> str:
        """SCAN pattern of the augmented tiers' bitmaps of every view (:meth:`view_of_tier`)."""
        return glob_escape(Keys(self.dataset, self.prefix).tier("augmented")) + ":*"

    def view_of_tier(self, key: str) -> str | None:
        """The view whose augmented tier's bitmap is ``key`` (None: another key)."""
        head = Keys(self.dataset, self.prefix).tier("augmented") + ":"
        return key[len(head) :] if key.startswith(head) and len(key) > len(head) else None

    @staticmethod
    def view_of_form(form: str) -> str | None:
        """The view of an augmented tier named ``form`` (``a:<view>``; None: another form)."""
        letter, sep, view = form.partition(":")
        return view if sep and letter == LETTER["augmented"] else None

    def sizes(self, tier: str) -> str:
        return f"{self.meta}sz:{self.form(tier)}"

    @property
    def used(self) -> str:
        return f"{self.meta}used"

    @property
    def info(self) -> str:
        return f"{self.meta}info"

    @property
    def plan(self) -> str:
        return f"{self.meta}plan"

    @property
    def jobs(self) -> str:
        return f"{self.meta}jobs"

    @property
    def pace(self) -> str:
        return f"{self.meta}pace"

    def gc(self) -> list[str]:
        """The zsets of evicted entries: the shared tiers' and the view's augmented ones."""
        return [f"{self.meta}gc", f"{self.meta}gc:{self.form('augmented')}"]

    def job(self, name: str) -> list[str]:
        """The keys of ``name`` (as the engine names it), :data:`JOB_KEYS` in order."""
        return [f"{self.meta}{k}:{name}" for k in JOB_KEYS]

    def job_patterns(self) -> list[str]:
        """SCAN patterns of every job's keys (:data:`JOB_KEYS`; :meth:`job_of` names the job)."""
        return [f"{glob_escape(self.meta)}{k}:*" for k in JOB_KEYS]

    def job_of(self, key: str) -> str | None:
        """The job (as the engine names it) one of whose keys (:meth:`job`) ``key`` is (None:
        another key)."""
        if not key.startswith(self.meta):
            return None
        kind, sep, name = key[len(self.meta) :].partition(":")
        return name if sep and kind in JOB_KEYS and name else None

    def members(self, name: str) -> str:
        return f"{self.meta}m:{name}"

    def place(self, job: str, epoch: int, batches: int) -> str:
        """Where each rank of ``job`` was in ``epoch`` after ``batches`` batches, as its saved
        state says (a hash: rank -> consumed bitmap). A framework that keeps one rank's state
        in its checkpoint (Lightning) has the other ranks read theirs back from here."""
        return f"{self.meta}place:{job}:{int(epoch)}:{int(batches)}"

    def pins(self, bucket: int) -> list[str]:
        """pin and pinc of ``bucket`` and of the bucket before."""
        b = int(bucket)
        return [f"{self.meta}{k}:{x}" for x in (b, b - 1) for k in ("pin", "pinc")]

    def pending(self, bucket: int) -> list[str]:
        """pend of ``bucket`` and of the bucket before: misses being read from storage."""
        b = int(bucket)
        return [f"{self.meta}pend:{x}" for x in (b, b - 1)]

    def declared(self, job: str, bucket: int, jobs: Sequence[str]) -> tuple[str, ...]:
        """Every key a function call may touch, in order: :meth:`layout`'s (the dataset's,
        the caller's job's, its pins' and pending misses'), then :meth:`declared_job`'s for
        each of ``jobs`` (names as the engine gives them). Remembered for the latest few
        arguments: a job's calls declare the same keys until its pin bucket or the live jobs
        change."""
        return _declared(self, job, int(bucket), tuple(jobs))

    def _declare(self, job: str, bucket: int, jobs: Sequence[str]) -> tuple[str, ...]:
        out = [key for _, _, key in self.layout(job, bucket)]
        for name in jobs:
            out += self.declared_job(name)
        return tuple(out)

    def layout(self, job: str, bucket: int) -> list[tuple[str, str, str]]:
        """The keys every function call declares first, in order, each as (the fields of
        ``lib.lua``'s table ``K`` that name it, the Redis type it holds, the key): the one
        declaration the Lua side is generated from (:func:`lua_layout`). A field ``t.a`` is
        ``K.t.a``; a key two fields name is written ``"gc.e gc.d"``."""
        m = self.meta
        out = [(f"t.{LETTER[t]}", "string", self.tier(t)) for t in TIERS]
        out += [(f"sz.{LETTER[t]}", "string", self.sizes(t)) for t in TIERS]
        out += [
            ("used", "hash", self.used),
            ("jobs", "zset", self.jobs),
            ("pace", "hash", self.pace),
            ("info", "hash", self.info),
        ]
        out += [("ref", "string", m + "ref"), ("doom", "set", m + "doom")]
        out += [("xc", "string", m + "x:c"), ("xg", "string", m + "x:g")]
        shared, view = self.gc()
        both = " ".join(f"gc.{LETTER[t]}" for t in TIERS if t != "augmented")
        out += [(both, "zset", shared), (f"gc.{LETTER['augmented']}", "zset", view)]
        out += [(f, JOB_KEYS[f], key) for f, key in zip(JOB_KEYS, self.job(job), strict=True)]
        pins = (("pin", "string"), ("pinc", "hash"), ("pin1", "string"), ("pinc1", "hash"))
        out += [(f, t, key) for (f, t), key in zip(pins, self.pins(bucket), strict=True)]
        pend = zip(("pend", "pend1"), self.pending(bucket), strict=True)
        out += [(f, "string", key) for f, key in pend]
        return out

    def declared_job(self, name: str) -> list[str]:
        """The keys declared for each live job ``name`` after :meth:`layout`'s
        (:data:`DECLARED_JOB_KEYS`)."""
        return [f"{self.meta}{k}:{name}" for k in DECLARED_JOB_KEYS]

    def value(self, tier: str, index: int) -> str:
        """The key of sample ``index``'s value in ``tier``."""
        return f"{self._value_head(tier)}{int(index)}}}"

    def values(self, items: Iterable[tuple[str, int]]) -> list[str]:
        """The keys of the values of ``(tier, index)`` items, as :meth:`value` (a batch's)."""
        heads: dict[str, str] = {}
        out = []
        for tier, index in items:
            head = heads.get(tier)
            if head is None:
                head = heads[tier] = self._value_head(tier)
            out.append(f"{head}{int(index)}}}")
        return out

    def _value_head(self, tier: str) -> str:
        return self._values_head() + self.form(tier) + ":"

    def _values_head(self) -> str:
        return f"{_values_head(self.prefix)}{self.dataset}:"

    def value_of(self, key: str) -> tuple[str, int] | None:
        """(the tier's form, the sample) of a value's key (:meth:`value`); None for another
        key, a staged value's among them."""
        head = self._values_head()
        if not key.startswith(head) or not key.endswith("}"):
            return None
        form, _, index = key[len(head) : -1].rpartition(":")
        return (form, int(index)) if form and index.isdigit() else None

    def staged(self, tier: str, index: int, token: str) -> str:
        """Where a value is staged before its admission (same slot as its key)."""
        return f"{self.value(tier, index)}:s:{token}"

    def patterns(self) -> list[str]:
        """SCAN patterns matching every key of this dataset: metadata, then values (staged
        ones too)."""
        return [glob_escape(self.meta) + "*", glob_escape(self._values_head()) + "*"]

    def shard_patterns(self) -> list[str]:
        """SCAN patterns matching every key of this dataset's shards (the datasets
        ``<dataset>#...``): metadata, then values."""
        shards = glob_escape(self.dataset + SHARD_MARK) + "*"
        return [glob_escape(head(self.prefix)) + shards for head in (_meta_head, _values_head)]


def _meta_head(prefix: str) -> str:
    """What every metadata key under ``prefix`` starts with, up to its dataset's name."""
    return f"{prefix}:{{"


def _values_head(prefix: str) -> str:
    """What every value's key under ``prefix`` starts with, up to its dataset's name."""
    return f"{prefix}:v:{{"


@functools.lru_cache(maxsize=64)
def _declared(keys: Keys, job: str, bucket: int, jobs: tuple[str, ...]) -> tuple[str, ...]:
    return keys._declare(job, bucket, jobs)


def lua_layout() -> str:
    """The Lua side of the key contract, generated from :meth:`Keys.layout`: ``declared_keys``
    (``lib.lua``'s table ``K`` from a call's keys), ``declared_job`` (the k-th declared job's
    keys), ``KEY_TYPES`` (the type of each declared key), ``JOB_KEYS`` (a job's keys) and
    ``job_keys_of`` (the keys of any job, declared or not, as :meth:`Keys.job`)."""
    layout = Keys("dataset").layout("job", 0)
    fields: dict[str, str] = {}
    nested: dict[str, dict[str, str]] = {}
    for k, (names, _, _) in enumerate(layout, 1):
        for name in names.split():
            top, _, sub = name.partition(".")
            if sub:
                nested.setdefault(top, {})[sub] = f"keys[{k}]"
            else:
                fields[top] = f"keys[{k}]"
    for top, subs in nested.items():
        fields[top] = "{" + ", ".join(f"{sub} = {v}" for sub, v in subs.items()) + "}"
    table = ",\n    ".join(f"{top} = {v}" for top, v in fields.items())
    first = len(layout)
    per_job = ", ".join(f"{f} = keys[b + {i}]" for i, f in enumerate(DECLARED_JOB_KEYS, 1))
    types = [t for _, t, _ in layout] + [JOB_KEYS[f] for f in DECLARED_JOB_KEYS]
    # a job's keys are the dataset's metadata prefix (K.jobs less its name), kind, ':', job
    probe = Keys("dataset")
    cut = len(probe.jobs) - len(probe.meta)
    assert probe.job("job") == [f"{probe.jobs[:-cut]}{k}:job" for k in JOB_KEYS]
    return (
        "-- generated from ods.keys (Keys.layout): the keys every call declares, by name\n"
        f"local function declared_keys(keys)\n  return {{\n    {table}\n  }}\nend\n"
        f"local function declared_job(keys, k)\n"
        f"  local b = {first} + {len(DECLARED_JOB_KEYS)} * (k - 1)\n"
        f"  return {{{per_job}}}\nend\n"
        f"local FIRST_JOB_KEY, JOB_KEY_COUNT = {first + 1}, {len(DECLARED_JOB_KEYS)}\n"
        "local KEY_TYPES = {" + ", ".join(f"'{t}'" for t in types) + "}\n"
        "local JOB_KEYS = {" + ", ".join(f"'{k}'" for k in JOB_KEYS) + "}\n"
        "local function job_keys_of(K, name)\n"
        f"  local meta, out = string.sub(K.jobs, 1, -{cut + 1}), {{}}\n"
        "  for _, k in ipairs(JOB_KEYS) do out[#out + 1] = meta .. k .. ':' .. name end\n"
        "  return out\nend\n"
        f"local BUDGET_VERSION = '{BUDGET_VERSION}'\n"
    )
