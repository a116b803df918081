"""Both forms of a dataset's store (OdsStore, ShardedStore) answer ods.store_api.Store: every
member, each with the protocol's parameters and return type, and nothing public beside it but
what this file names."""

import inspect

import pytest

from ods.shards import ShardedStore, open_store
from ods.store import OdsStore
from ods.store_api import Store

FORMS = (OdsStore, ShardedStore)
#: what each form has beside the protocol, and why
EXTRAS = {
    # the engine's own calls, the one-store form's alone (the sharded form makes them per shard)
    OdsStore: {
        "admission_seed",
        "call",
        "command",
        "declared_jobs",
        "load",
        "prefix",
        "recover",
        "unlink_values",
    },
    ShardedStore: {"changed", "commands"},  # for ods simulate: which shards a call touched
}
EXTRAS[OdsStore] |= {"tier_key", "used_command"}  # for ods simulate and the node's shares
#: members whose return type a form narrows (the protocol's is what both return)
NARROWED = {"decide", "collect", "client"}


def _members() -> list[str]:
    names = {n for n in dir(Store) if not n.startswith("_")} | set(Store.__annotations__)
    return sorted(names)


def _signature(obj: object) -> inspect.Signature:
    if isinstance(obj, property):
        return inspect.signature(obj.fget)
    return inspect.signature(obj)


def _by_place(sig: inspect.Signature) -> list[inspect.Parameter]:
    return [p for p in sig.parameters.values() if p.kind is not p.KEYWORD_ONLY]


def _by_name(sig: inspect.Signature) -> dict[str, inspect.Parameter]:
    return {n: p for n, p in sig.parameters.items() if p.kind is p.KEYWORD_ONLY}


@pytest.mark.parametrize("form", FORMS, ids=lambda c: c.__name__)
def test_each_form_has_every_member_with_the_protocols_signature(form):
    for name in _members():
        want = inspect.getattr_static(Store, name, None)
        if want is None:  # a data member (samples, outbox): set on every instance
            continue
        got = inspect.getattr_static(form, name, None)
        if got is None and isinstance(want, property):
            continue  # set on every instance (test_open_store_gives_a_store_in_either_form)
        assert got is not None, f"{form.__name__} has no {name}"
        assert isinstance(got, property) == isinstance(want, property), name
        w, g = _signature(want), _signature(got)
        wanted, given = _by_place(w), _by_place(g)
        for k, p in enumerate(wanted):  # in their places
            assert k < len(given), f"{form.__name__}.{name} lacks {p.name}"
            if p.kind is not p.POSITIONAL_ONLY:  # the protocol's positional-only: any name
                assert given[k].name == p.name, f"{form.__name__}.{name}: {given[k]} for {p}"
            assert given[k].default == p.default, f"{form.__name__}.{name}: {given[k]} for {p}"
        named = _by_name(g)
        for p in _by_name(w).values():  # keyword-only: by name
            assert p.name in named, f"{form.__name__}.{name} lacks {p.name}"
            assert named[p.name].default == p.default, f"{form.__name__}.{name}: {p.name}"
        extras = given[len(wanted) :] + [p for n, p in named.items() if n not in _by_name(w)]
        for extra in extras:  # a form's own: optional only
            assert extra.default is not extra.empty, f"{form.__name__}.{name}: {extra}"
        if name not in NARROWED:
            assert str(g.return_annotation) == str(w.return_annotation), f"{name}: {g} for {w}"


@pytest.mark.parametrize("form", FORMS, ids=lambda c: c.__name__)
def test_nothing_public_beside_the_protocol_but_the_named_extras(form):
    public = {n for n in dir(form) if not n.startswith("_")}
    assert public - set(_members()) == EXTRAS[form]


def test_open_store_gives_a_store_in_either_form(redis_proc):
    one = open_store(redis_proc.client, "api-one", 100, shard_size=100)
    sharded = open_store(redis_proc.client, "api-sharded", 100, shard_size=40)
    assert type(one) is OdsStore and type(sharded) is ShardedStore
    for store in (one, sharded):
        assert isinstance(store, Store)
        assert all(hasattr(store, name) for name in _members())
        assert store.samples == 100
        assert store.join("job") == (-1, 0)
        store.start_epoch("job", 0)
        decision = store.decide("job", 10)
        assert len(decision.indices) == 10
        store.release("job", decision)
        store.leave("job")
