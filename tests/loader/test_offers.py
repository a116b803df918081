"""What a batch offers the cache, and which of its values are written with the offer (staged
before the admission decides) or only once admitted: a staged value the admission refuses is
memory the server held for nothing, so values are staged only while their tier's room holds
what the other writers may stage at once."""

from seneca.loader._samples import Offers


def _units(size):
    """What a value of ``size`` bytes is charged here: its bytes."""
    return size


def _offer(offers, count, size=100, tier="decoded"):
    return [offers.offer(k, tier, b"x" * size, encoded=True) for k in range(count)]


def test_values_are_staged_while_their_tier_keeps_room_for_the_other_writers():
    offers = Offers({"decoded": 1000}, _units, reserve=2)  # two values like these elsewhere
    assert _offer(offers, 11) == [True] * 10 + [False]
    assert offers.later == [8, 9]  # past 200 units of room: written once admitted
    assert offers.room["decoded"] == 0


def test_alone_every_value_with_room_is_staged():
    offers = Offers({"decoded": 1000}, _units)
    assert _offer(offers, 11) == [True] * 10 + [False]
    assert offers.later == []


def test_a_tier_offered_even_when_full_writes_the_rest_once_admitted():
    offers = Offers({"encoded": 300}, _units, always={"encoded"}, reserve=1)
    assert _offer(offers, 5, tier="encoded") == [True] * 5
    assert offers.later == [2, 3, 4]  # 2: within the room, not its reserve; 3, 4: past it
    rest = offers.rest()  # the rest of the batch: the room left, the same reserve
    assert rest.items == [] and rest.reserve == 1 and rest.room is offers.room
