"""A worker's per-call machinery, on a real event loop and a real Redis: the process's item runners
shared by every batch, the limiter's slots (plain async context managers), and the quota board's
one read per endpoint however many calls ask at once."""
from __future__ import annotations

import asyncio
import signal

import pytest

from conftest import RedisServer


def test_runners_keep_order_cap_in_flight_and_serve_batches_first_come():
    from evalfarm.executors.celery.runners import Runners

    running, most, started = 0, 0, []

    async def call(tag: str, i: int, delay: float = 0.01) -> str:
        nonlocal running, most
        started.append(tag)
        running += 1
        most = max(most, running)
        await asyncio.sleep(delay * (1 + (i % 3)))  # finishing out of order
        running -= 1
        return f"{tag}{i}"

    async def scenario() -> None:
        pool = Runners(4)
        a = [lambda i=i: call("a", i) for i in range(4)]
        b = [lambda i=i: call("b", i) for i in range(6)]
        got_a, got_b = await asyncio.gather(pool.run(a), pool.run(b))
        assert got_a == [f"a{i}" for i in range(4)] and got_b == [f"b{i}" for i in range(6)]
        assert most == 4  # the two batches together, never more than the runners
        assert started[:4] == ["a"] * 4  # the first batch's calls all started before the second's

    asyncio.run(scenario())


def test_a_failed_call_reaches_its_batch_and_the_runners_go_on():
    from evalfarm.executors.celery.runners import Runners

    async def boom() -> None:
        raise ValueError("the call's own error")

    async def fine(i: int) -> int:
        await asyncio.sleep(0)
        return i

    async def scenario() -> None:
        pool = Runners(2)
        with pytest.raises(ValueError, match="the call's own error"):
            await pool.run([lambda: fine(0), boom, lambda: fine(2)])
        assert await pool.run([lambda i=i: fine(i) for i in range(5)]) == list(range(5))
        assert all(not t.done() for t in pool.tasks)  # no runner died of the error

    asyncio.run(scenario())


def test_a_cancelled_batch_drops_the_calls_it_had_not_started():
    from evalfarm.executors.celery.runners import Runners

    ran: list[int] = []

    async def slow(i: int) -> int:
        ran.append(i)
        await asyncio.sleep(0.05)
        return i

    async def scenario() -> None:
        pool = Runners(1)
        batch = asyncio.ensure_future(pool.run([lambda i=i: slow(i) for i in range(5)]))
        await asyncio.sleep(0.01)  # the first call runs; four wait in the queue
        batch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await batch
        assert await pool.run([lambda: slow(99)]) == [99]
        assert ran == [0, 99]

    asyncio.run(scenario())


def test_slots_hold_the_process_cap_and_a_failed_fleet_slot_gives_back_the_process_one(tmp_path):
    from evalfarm.errors import InfrastructureError
    from evalfarm.executors.celery.limits import RedisLimiter
    from evalfarm.providers.limits import LocalLimiter, Limits, set_process_cap

    server = RedisServer(tmp_path)
    server.start()
    set_process_cap(3)
    try:
        free = RedisLimiter(server.url, "free", Limits())
        capped = RedisLimiter(server.url, "capped", Limits(max_in_flight=2))
        local = LocalLimiter(Limits())
        running, most = 0, 0

        async def one(limiter) -> None:
            nonlocal running, most
            async with limiter.slot():
                running += 1
                most = max(most, running)
                await asyncio.sleep(0.005)
                running -= 1

        async def caps() -> None:
            nonlocal most
            for limiter, cap in ((local, 3), (free, 3), (capped, 2)):
                most = 0
                await asyncio.wait_for(asyncio.gather(*(one(limiter) for _ in range(20))), 10)
                assert most == cap, (limiter, most)

        asyncio.run(caps())
        server.stop(signal.SIGKILL)  # a fleet slot cannot be had: an infrastructure error ...
        gone = RedisLimiter(server.url, "gone", Limits(max_in_flight=2))

        async def refused() -> None:
            for _ in range(2):  # each attempt waits out the client's retries (~2 s)
                with pytest.raises(InfrastructureError):
                    await asyncio.wait_for(one(gone), 10)
            sem = gone.local.semaphore()
            assert sem._value == 3  # ... and the process's slot was given back each time

        asyncio.run(refused())
    finally:
        set_process_cap(None)
        server.stop()


def test_calls_starting_together_read_the_fleet_quota_board_once(tmp_path):
    import redis

    from evalfarm.executors.celery.quota import RedisQuotaBoard

    server = RedisServer(tmp_path)
    server.start()
    try:
        board = RedisQuotaBoard(server.url)
        r = redis.Redis.from_url(server.url)
        r.config_resetstat()

        async def scenario() -> list:
            return await asyncio.gather(*(board.exhausted("ep") for _ in range(64)))

        assert asyncio.run(scenario()) == [None] * 64
        gets = r.info("commandstats").get("cmdstat_get", {}).get("calls", 0)
        assert gets == 1, gets
        r.set(RedisQuotaBoard.key("ep2"), '{"since": "x", "until": "y"}')
        board2 = RedisQuotaBoard(server.url)

        async def marked() -> list:
            return await asyncio.gather(*(board2.exhausted("ep2") for _ in range(8)))

        assert all(m == {"since": "x", "until": "y"} for m in asyncio.run(marked()))
    finally:
        server.stop()


def test_each_endpoint_has_its_own_runners_and_idle_ones_are_let_go(monkeypatch):
    """The cap holds per endpoint, as each endpoint's limiter does: two endpoints' calls keep ``size``
    in flight each; a worker that has called many endpoints keeps at most KEEP_IDLE sets of runners."""
    from evalfarm.executors.celery import runners as mod

    in_flight: dict[str, int] = {"a": 0, "b": 0}
    most: dict[str, int] = {"a": 0, "b": 0}

    async def call(lane: str, i: int) -> str:
        in_flight[lane] += 1
        most[lane] = max(most[lane], in_flight[lane])
        await asyncio.sleep(0.01)
        in_flight[lane] -= 1
        return f"{lane}{i}"

    async def scenario() -> None:
        lanes = ["a", "b"] * 10
        calls = [lambda i=i, ln=ln: call(ln, i) for i, ln in enumerate(lanes)]
        assert await mod.run_in_lanes(3, calls, lanes) == [f"{ln}{i}" for i, ln in enumerate(lanes)]
        assert most == {"a": 3, "b": 3}
        monkeypatch.setattr(mod, "IDLE_S", -1.0)  # idle at once (a minute without a batch, in a worker)
        for n in range(mod.KEEP_IDLE + 5):  # endpoints called once, then never again
            await mod.run_in_lanes(2, [lambda: asyncio.sleep(0), lambda: asyncio.sleep(0)], [f"ep{n}", f"ep{n}"])
        loop = id(asyncio.get_running_loop())
        assert len([k for k in mod._RUNNERS if k[0] == loop]) <= mod.KEEP_IDLE
        # a batch over many lanes: a lane's set taken for it is not let go before its calls are in
        many = [f"lane{n}" for n in range(mod.KEEP_IDLE + 3)]
        monkeypatch.setattr(mod, "IDLE_S", 60.0)
        got = await asyncio.wait_for(mod.run_in_lanes(2, [lambda n=n: asyncio.sleep(0, n) for n in range(len(many))],
                                                      many), 10)
        assert got == list(range(len(many)))

    asyncio.run(scenario())


def test_an_adapter_and_a_judge_are_laned_by_their_endpoint():
    from evalfarm.executors.celery.work import lane
    from evalfarm.engine import build_engine
    from evalfarm.spec import EvalSpec

    spec = EvalSpec.model_validate({
        "name": "lanes", "prompts": [{"id": "p", "text": "hi"}],
        "adapters": [{"id": "x", "model": "m", "base_url": "http://127.0.0.1:9/v1"},
                     {"id": "y", "model": "m2", "base_url": "http://127.0.0.1:9/v1"},
                     {"id": "z", "model": "m", "base_url": "http://127.0.0.1:8/v1"}, "mock"],
        "judge": {"model": "j", "base_url": "http://127.0.0.1:8/v1"}})
    engine = build_engine(spec)
    x, y, z, mock = (lane(engine.adapters[a]) for a in ("x", "y", "z", "mock"))
    assert x == y != z and mock == ""  # the same endpoint shares its runners, as it shares its limiter
    assert lane(engine.judge_) not in ("", x)
