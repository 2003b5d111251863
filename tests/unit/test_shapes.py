"""Protects load shapes over time: the --rate-shape/--user-shape grammar and JSON files, the rate an
open-loop schedule actually follows, and the user counts a Locust LoadTestShape built from a shape asks for."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from llmload.common.errors import ConfigError
from llmload.shapes import Ramp, Sine, Spike, Steps, parse_shape, rate_offsets

SPECS = [
    "steps:10@0,20@30,40@60;duration=90",
    "steps:0@0,5.5@1.25;duration=2",
    "ramp:1->50;duration=120",
    "ramp:0->8@30;duration=60",
    "spike:base=5,peak=50,at=30,width=10;duration=90",
    "sine:mean=10,amplitude=5,period=60;duration=300",
    "sine:mean=3,amplitude=3,period=40,phase=10;duration=100",
]


@pytest.mark.parametrize("spec", SPECS)
def test_spec_round_trip(spec):
    shape = parse_shape(spec)
    assert shape.spec() == spec
    assert parse_shape(shape.spec()) == shape


def test_spec_values_and_units():
    assert parse_shape("steps:10@0,20@30,40@60;duration=90") == Steps(((10, 0), (20, 30), (40, 60)), 90)
    assert parse_shape(" ramp : 1 -> 50 @ 1m ; duration = 2m ") == Ramp(1, 50, 120, 60)
    assert parse_shape("spike:base=5,peak=50,at=30s,width=10;duration=1.5m") == Spike(5, 50, 30, 10, 90)
    assert parse_shape("sine:mean=10,amplitude=5,period=1h;duration=24h") == Sine(10, 5, 3600, 86400)


def test_json_forms_equal_spec_forms(tmp_path):
    objects = {
        "steps:10@0,20@30,40@60;duration=90": {
            "shape": "steps",
            "steps": [[10, 0], {"value": 20, "at": 30}, [40, "1m"]],
            "duration": 90,
        },
        "ramp:1->50@60;duration=120": {"shape": "ramp", "from": 1, "to": 50, "over": 60, "duration": 120},
        "spike:base=5,peak=50,at=30,width=10;duration=90": {
            "shape": "spike",
            "base": 5,
            "peak": 50,
            "at": 30,
            "width": 10,
            "duration": 90,
        },
        "sine:mean=10,amplitude=5,period=60,phase=15;duration=300": {
            "shape": "sine",
            "mean": 10,
            "amplitude": 5,
            "period": 60,
            "phase": 15,
            "duration": "5m",
        },
    }
    for i, (spec, obj) in enumerate(objects.items()):
        path = tmp_path / f"shape{i}.json"
        path.write_text(json.dumps(obj))
        assert parse_shape(str(path)) == parse_shape(spec)
        assert parse_shape(json.dumps(obj)) == parse_shape(spec)


def test_values_over_time():
    steps = parse_shape("steps:10@0,20@30,40@60;duration=90")
    assert [steps.value(t) for t in (0, 29.999, 30, 59, 60, 89)] == [10, 10, 20, 20, 40, 40]
    ramp = parse_shape("ramp:1->50@60;duration=120")
    assert ramp.value(0) == 1 and ramp.value(30) == pytest.approx(25.5) and ramp.value(90) == 50
    spike = parse_shape("spike:base=5,peak=50,at=30,width=10;duration=90")
    assert [spike.value(t) for t in (29.9, 30, 39.9, 40)] == [5, 50, 50, 5]
    sine = parse_shape("sine:mean=10,amplitude=5,period=60;duration=300")
    assert sine.value(0) == pytest.approx(5)  # the trough first (night)
    assert sine.value(30) == pytest.approx(15)  # the peak half a period later
    assert sine.value(15) == pytest.approx(10)


@pytest.mark.parametrize("spec", SPECS)
def test_cumulative_is_the_integral_of_value(spec):
    shape = parse_shape(spec)
    t = np.linspace(0, shape.duration, 200_001)
    numeric = np.concatenate(
        [[0.0], np.cumsum(np.diff(t) * 0.5 * (shape.values(t[1:]) + shape.values(t[:-1])))]
    )
    # jumps make the trapezoid rule off by at most (jump * step) each
    np.testing.assert_allclose(shape.cumulative(t), numeric, atol=shape.peak() * shape.duration * 1e-5)


@pytest.mark.parametrize(
    "spec",
    [
        "steps:4@0,30@20,0@40,12@50;duration=80",
        "ramp:1->60;duration=60",
        "spike:base=5,peak=80,at=20,width=5;duration=60",
        "sine:mean=20,amplitude=18,period=30;duration=90",
    ],
)
def test_rate_offsets_follow_the_rate(spec):
    shape = parse_shape(spec)
    offsets = rate_offsets(shape, np.random.RandomState(17))
    assert np.all(np.diff(offsets) >= 0)
    assert offsets.min() >= 0 and offsets.max() < shape.duration
    edges = np.linspace(0, shape.duration, 31)
    counts, _ = np.histogram(offsets, edges)
    # expected counts by integrating value() numerically over each bin (independent of cumulative())
    expected = np.array(
        [
            np.trapezoid(shape.values(np.linspace(a, b, 2001)), np.linspace(a, b, 2001))
            for a, b in itertools.pairwise(edges)
        ]
    )
    # Poisson: each count within ~4.5 standard deviations, and the chi-square of all bins plausible
    assert np.all(np.abs(counts - expected) <= 4.5 * np.sqrt(expected) + 2)
    busy = expected > 5
    chi2 = (((counts - expected) ** 2)[busy] / expected[busy]).sum()
    assert chi2 < busy.sum() + 5 * math.sqrt(2 * busy.sum())
    assert np.all(counts[expected == 0] == 0)  # a zero-rate step sends nothing


def test_rate_offsets_total_and_determinism():
    shape = parse_shape("sine:mean=10,amplitude=5,period=60;duration=300")
    totals = [len(rate_offsets(shape, np.random.RandomState(seed))) for seed in range(20)]
    mean = 3000  # mean rate 10 over 300 s
    assert abs(np.mean(totals) - mean) < 4 * math.sqrt(mean / 20)
    a = rate_offsets(shape, np.random.RandomState(5))
    assert a.tolist() == rate_offsets(shape, np.random.RandomState(5)).tolist()
    assert a.tolist() != rate_offsets(shape, np.random.RandomState(6)).tolist()
    assert len(rate_offsets(shape, np.random.default_rng(5))) > 0


def test_burstiness_in_rescaled_time():
    shape = parse_shape("steps:20@0;duration=2000")  # a constant rate: rescaled time = real time * 20
    for b in (0.25, 1.0, 4.0):
        gaps = np.diff(rate_offsets(shape, np.random.RandomState(1), burstiness=b))
        assert gaps.mean() == pytest.approx(1 / 20, rel=0.05)
        assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(b), rel=0.08)


def test_empty_rate_sends_nothing():
    assert len(rate_offsets(parse_shape("steps:0@0;duration=10"), np.random.RandomState(0))) == 0


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("stairs:1@0;duration=9", "steps, ramp, spike, sine"),
        ("steps:10@0,20@30", "duration"),
        ("steps:10@5;duration=90", "first step"),
        ("steps:10@0,20@30,5@20;duration=90", "step 3"),
        ("steps:10@0,20@95;duration=90", "step 2"),
        ("steps:10@0,x@30;duration=90", "step 2 value"),
        ("steps:10@0,20;duration=90", "VALUE@TIME"),
        ("ramp:1..50;duration=90", "FROM->TO"),
        ("ramp:1->50@100;duration=90", "@TIME"),
        ("ramp:-1->50;duration=90", "FROM"),
        ("spike:base=5,peak=50,at=30;duration=90", "width"),
        ("spike:base=5,peak=50,at=30,width=10,height=3;duration=90", "height"),
        ("spike:base=5,peak=50,at=100,width=10;duration=90", "at="),
        ("sine:mean=1,amplitude=5,period=60;duration=300", "amplitude"),
        ("sine:mean=10,amplitude=5,period=0;duration=300", "period"),
        ("sine:mean=10,amplitude=5,period=60;duration=5y", "duration"),
        ("sine:mean=10,amplitude=5,period=60;duration=300;every=3", "every"),
        ('{"shape": "ramp", "from": 1, "duration": 5}', "'to'"),
        ('{"shape": "ramp", "from": 1, "to": 2, "duration": 3, "speed": 4}', "speed"),
        ('{"shape": "steps", "steps": [[1, 0, 3]], "duration": 3}', "steps[0]"),
        ("{not json", "invalid JSON"),
        ("missing-shape.json", "not found"),
    ],
)
def test_errors_name_the_bad_part(text, names):
    with pytest.raises(ConfigError) as info:
        parse_shape(text, "--rate-shape")
    message = str(info.value)
    assert message.startswith("--rate-shape")
    assert names in message
    assert "\n" not in message


def test_user_shape_class_ticks():
    """Run in a child process: importing locust monkey-patches the interpreter with gevent."""
    code = textwrap.dedent(
        """
        import json, time
        from locust.util.load_locustfile import is_shape_class
        from llmload.shapes import parse_shape, user_shape_class

        cls = user_shape_class(parse_shape("steps:2@0,10@30,4@60;duration=90"), spawn_rate=5)
        fast = user_shape_class(parse_shape("ramp:0->50;duration=100"))
        out = {"is_shape": is_shape_class(cls), "ticks": [], "default_rate": fast().tick()[1]}
        shape = cls()
        for t in (0.5, 29.5, 30.5, 59.5, 61, 89.5, 90.5):
            shape.start_time = time.perf_counter() - t
            out["ticks"].append(shape.tick())
        ramp = fast()
        ramp.start_time = time.perf_counter() - 50.2
        out["ramp"] = ramp.tick()
        print(json.dumps(out))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["is_shape"] is True  # locust -f picks it up from a locustfile's globals
    assert out["ticks"] == [[2, 5], [2, 5], [10, 5], [10, 5], [4, 5], [4, 5], None]
    assert out["ramp"] == [25, 50]  # round(0 + 50 * 50.2 / 100); default spawn rate = the peak per second
    assert out["default_rate"] == 50
