"""Which model or LoRA adapter each request names: the options' rules, the draw (the same in every process),
and the simulator's adapter slots (what a swap costs)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from llmload.common.errors import ConfigError
from llmload.core.models import ModelMix, model_mix
from llmload.core.settings import UserSettings
from llmload.sim.lora import AdapterSlots


def test_one_model_is_no_mix() -> None:
    assert model_mix("m", None, None, None, None, 0) is None
    assert model_mix(None, None, None, None, None, 0) is None


def test_round_robin_follows_the_schedule_index() -> None:
    mix = model_mix("a,b,c", None, None, None, None, 0)
    assert [mix.pick(i, f"r{i}") for i in range(6)] == ["a", "b", "c", "a", "b", "c"]
    adapters = model_mix("base", None, None, ["x", "y"], "round-robin", 0)
    assert [adapters.pick(i, "") for i in range(4)] == ["x", "y", "x", "y"]


def test_weighted_and_random_draws_are_per_request_and_follow_the_weights() -> None:
    mix = model_mix("a,b,c", None, "5,3,2", None, None, 11)
    assert mix.selection == "weighted"
    ids = [f"synth_{k:05d}" for k in range(30_000)]
    counts = Counter(mix.pick(None, i) for i in ids)
    for name, weight in zip("abc", (0.5, 0.3, 0.2), strict=True):
        assert abs(counts[name] / len(ids) - weight) < 4 * math.sqrt(weight * (1 - weight) / len(ids)), counts
    again = model_mix("a,b,c", "weighted", "5,3,2", None, None, 11)
    assert [again.pick(7, i) for i in ids[:300]] == [mix.pick(7, i) for i in ids[:300]]  # index ignored
    lora = model_mix(None, None, None, ["x", "y", "z"], None, 11)  # vLLM's default assignment: random
    assert lora.selection == "random" and set(Counter(lora.pick(None, i) for i in ids[:3000])) == {"x", "y", "z"}


@pytest.mark.parametrize(("args", "message"), [
    (("a,b", None, "1", None, None), "--model-weights needs 2 non-negative numbers"),
    (("a,b", None, "0,0", None, None), "not all 0"),
    (("a,b", "round-robin", "1,2", None, None), "--model-weights applies to --model-selection weighted"),
    (("a", "random", None, None, None), "need several models"),
    (("a", None, "1", ["x"], None), "--model-weights goes with --model a,b,c"),
])
def test_bad_options_are_one_line(args: tuple, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        model_mix(*args, 0)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_mix_travels_to_workers_in_the_user_settings() -> None:
    mix = ModelMix(("a", "b"), "weighted", (2.0, 1.0), 4)
    settings = UserSettings("vllm", None, "a", False, "content", None, 1.0, 2.0, None, "X-Session-ID", None, None,
                            mix)
    assert UserSettings.from_message(settings.to_message()).models == mix


def test_adapter_slots_load_the_least_recently_used_out() -> None:
    slots = AdapterSlots(max_loras=2, load_ms=50)
    waits = [slots.admit(a) for a in ("x", "y", "x", "z", "y", "", "x")]
    # x, y load; x is loaded; z evicts y (least recent); y evicts x; the base model loads nothing; x again
    assert waits == [0.05, 0.05, 0.0, 0.05, 0.05, 0.0, 0.05]
    assert slots.loads == 5 and slots.active == ["y", "x"]


def test_adapter_slots_never_load_out_an_adapter_in_use() -> None:
    slots = AdapterSlots(max_loras=2, load_ms=50)
    slots.admit("x"), slots.admit("y")
    slots.admit("z", in_use={"x"})  # y is the least recently used one not running
    assert slots.active == ["x", "z"]


def test_the_batch_runs_at_most_max_loras_adapters_and_skips_the_rest() -> None:
    from llmload.sim.config import DEFAULT_PROFILE, PROFILES
    from llmload.sim.engine import BatchEngine, Seq

    engine = BatchEngine(PROFILES[DEFAULT_PROFILE], adapters=AdapterSlots(max_loras=1, load_ms=50))
    seqs = [Seq(i, 8, 2, adapter=a) for i, a in enumerate(("a", "b", "a", "", "b"))]
    for seq in seqs:
        engine.add(seq)
    now = engine.plan_step(0.0)
    engine.complete_step(now)
    # one adapter slot: a's two requests and the base model's run; b's two wait, in their order, at the front
    assert [s.key for s in engine.running] == [0, 2, 3] and [s.key for s in engine.waiting] == [1, 4]
    assert seqs[0].ready_at == 0.05 and seqs[2].ready_at == 0.05 and seqs[3].ready_at == 0.0
    steps = 0
    while not engine.idle:
        now += engine.plan_step(now) or 0.001
        running = {s.adapter for s in engine.running if s.adapter}
        assert len(running) <= 1, running
        for seq, _ in engine.complete_step(now):
            assert seq.adapter == "" or now >= seq.ready_at  # no token before its adapter loaded
        steps += 1
        assert steps < 10_000
    # b was admitted only after a's requests left, and had to be loaded (a's slot), 50 ms before its prefill
    assert seqs[1].admitted >= max(seqs[0].admitted, seqs[2].admitted) + 0.05
    assert seqs[1].ready_at == pytest.approx(seqs[1].admitted + 0.05) and engine.adapters.loads == 2
