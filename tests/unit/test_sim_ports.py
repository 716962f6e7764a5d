"""The sim's listeners take ports below the ephemeral range, so a restarted sim can bind them again."""

from __future__ import annotations

import random

import pytest

from edgeagent.sim import links, ports
from edgeagent.sim.links import Link
from tests.conftest import SimFactory


def test_ports_come_from_below_the_ephemeral_range() -> None:
    floor = ports.ephemeral_floor()
    for _ in range(20):
        port = ports.free_stable_port("127.0.0.1")
        assert 20000 <= port < floor


def test_a_taken_port_is_skipped() -> None:
    taken: list[int] = []

    def bind(port: int) -> int:
        if not taken:
            taken.append(port)
            raise OSError(98, "Address already in use")
        return port

    port = ports.bind_stable(bind, rng=random.Random(1))
    assert port != taken[0] and port < ports.ephemeral_floor()


async def test_a_link_listens_below_the_ephemeral_range_and_can_listen_there_again() -> None:
    link = Link("edge-1", "127.0.0.1", 1, bind="127.0.0.1")
    await link.start()
    port = link.port
    assert port < ports.ephemeral_floor()
    await link.close()
    again = Link("edge-1", "127.0.0.1", 1, bind="127.0.0.1")
    await again.start(port)
    assert again.port == port
    await again.close()


def test_no_room_below_falls_back_to_the_ephemeral_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_floor", lambda: 20500)  # fewer than 1000 ports below: not worth it
    asked: list[int] = []

    def bind(port: int) -> int:
        asked.append(port)
        return port

    assert ports.bind_stable(bind) == 0 and asked == [0]


class _FirstPick(random.Random):
    """Picks `first` before anything else: the port another sim's link happens to listen on."""

    def __init__(self, first: int) -> None:
        super().__init__(1)
        self.first = [first]

    def randrange(self, *args: int) -> int:  # type: ignore[override]
        return self.first.pop() if self.first else super().randrange(*args)


async def test_a_new_link_never_shares_a_port_another_link_listens_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Links bind with SO_REUSEPORT (to listen again beside their reservation), which lets a second link of the
    same user bind the very same port; the kernel then splits connections between the two sims (an agent of
    one test listed another test's pods). A port another link listens on is skipped like any taken port."""
    other = Link("edge-1", "127.0.0.1", 1, bind="127.0.0.1")
    await other.start()
    monkeypatch.setattr(links, "bind_stable",
                        lambda bind, span=None: ports.bind_stable(bind, rng=_FirstPick(other.port), span=span))
    new = Link("edge-1", "127.0.0.1", 1, bind="127.0.0.1")
    try:
        await new.start()
        assert new.port != other.port and new.port < ports.ephemeral_floor()
    finally:
        await new.close()
        await other.close()


async def test_a_restarted_link_whose_port_another_link_took_fails_instead_of_sharing_it() -> None:
    other = Link("edge-1", "127.0.0.1", 1, bind="127.0.0.1")
    await other.start()
    again = Link("edge-1", "127.0.0.1", 1, bind="127.0.0.1")
    try:
        with pytest.raises(OSError):
            await again.start(other.port)
    finally:
        await again.close()
        await other.close()


def test_a_port_range_is_kept_and_a_full_one_is_a_clear_error() -> None:
    asked: list[int] = []

    def bind(port: int) -> int:
        asked.append(port)
        if len(asked) < 5:
            raise OSError(98, "Address already in use")
        return port

    assert 12000 <= ports.bind_stable(bind, span=(12000, 12009)) <= 12009
    assert all(12000 <= port <= 12009 for port in asked)

    def never(port: int) -> int:
        raise OSError(98, "Address already in use")

    with pytest.raises(OSError, match="no free port in --port-range 12000-12009"):
        ports.bind_stable(never, span=(12000, 12009))


async def test_a_sim_with_a_port_range_listens_only_there(sim_factory: SimFactory) -> None:
    """`edgeagent sim --port-range`: the soak restarts its sim on the same 200-odd ports while a test run's sims
    draw theirs from the default range; with a range of its own none of them can take one meanwhile."""
    sim = await sim_factory(node_names=["edge-1", "edge-2", "edge-3"], port_range=(17500, 17599))
    bound = [int(sim.url.rsplit(":", 1)[1]), *(link.port for link in sim.links.values())]
    assert len(bound) == 4 and all(17500 <= port <= 17599 for port in bound), bound
