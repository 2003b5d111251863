"""A built Schedule makes each entry when it is read (issue 37): the same entries, ids and classes as one made
whole, without an object or a string kept per request."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llmload.core.conversation import request_count, turn_count
from llmload.core.schedule import (
    Schedule,
    Scheduled,
    ScheduleEntries,
    ScheduleSpec,
    assign_classes,
    request_ids,
)
from llmload.datasets.base import SampleRequest

ids = st.lists(st.sampled_from(["", "a", "b", "1", "2", "a#1"]), min_size=1, max_size=12)


@settings(max_examples=80, deadline=None)
@given(ids, st.integers(min_value=1, max_value=60))
def test_ids_are_those_of_request_ids(own: list[str], count: int) -> None:
    samples = [SampleRequest(prompt=f"p{k}", prompt_len=3, expected_output_len=4, request_id=i)
               for k, i in enumerate(own)]
    spec = ScheduleSpec(request_rate=10.0, seed=7)
    made = Schedule.build(spec, samples)
    assert isinstance(made.entries, ScheduleEntries)
    whole = request_ids(samples, len(made))
    assert [e.request_id for e in made] == whole
    assert len(made) == len(samples)  # one request per sample without a rate shape
    # a pool shorter than the run (a rate shape's count): the ids cycle as request_ids' do
    longer = ScheduleEntries(samples, made.offsets.repeat(1 + count // len(samples))[:count], ("",), None)
    assert [e.request_id for e in longer] == request_ids(samples, count)


def test_entries_match_a_whole_schedule_with_classes_and_slices() -> None:
    samples = [SampleRequest(prompt=f"p{k}", prompt_len=3 + k, expected_output_len=4, request_id=f"r{k % 3}")
               for k in range(7)]
    classes = [("Chat", 3.0), ("Code", 1.0)]
    spec = ScheduleSpec(request_rate=5.0, burstiness=0.5, seed=3)
    made = Schedule.build(spec, samples, classes)
    names = assign_classes(classes, len(made), spec.seed)
    want = [Scheduled(i, float(made.offsets[i]), samples[i % 7], rid, names[i])
            for i, rid in enumerate(request_ids(samples, len(made)))]
    assert list(made) == want
    assert made[3] == want[3] and made[-1] == want[-1] and made.entries[2:5] == want[2:5]
    assert made.share(1, 3) == [want[i] for i in made.share_indices(1, 3)]
    assert {e.user_class for e in made} == {"Chat", "Code"}


def test_the_request_count_is_counted_over_the_pool() -> None:
    from llmload.datasets.base import Turn

    chat = SampleRequest(prompt="hi", prompt_len=1, expected_output_len=2,
                         turns=[Turn("hi", 1, "yo", 1), Turn("and", 1, "so", 1), Turn("bye", 1, "ok", 1)])
    plain = SampleRequest(prompt="x", prompt_len=1, expected_output_len=2)
    made = Schedule.build(ScheduleSpec(request_rate=1.0), [chat, plain, plain])
    entries = list(made)
    assert request_count(made) == sum(turn_count(e.sample) for e in entries) == 5


def test_a_compact_job_carries_every_request_of_a_share_through_locust_s_wire() -> None:
    import msgpack

    from llmload.core.messages import JobRequests, job_items, job_requests
    from llmload.core.protocol import Job

    samples = [SampleRequest(prompt=f"prompt {k}", prompt_len=2, expected_output_len=5 + k,
                             request_id=["", "x", "x"][k % 3]) for k in range(5)]
    made = Schedule.build(ScheduleSpec(request_rate=20.0, seed=1), samples * 3, [("A", 1.0), ("B", 2.0)])
    indices = made.share_indices(1, 2)
    job = Job(job_items(made, indices), 0.0)
    # as Locust's rpc Message serializes a message's data (msgpack, bytes as bin)
    wire = msgpack.loads(msgpack.dumps(("llm_job", job.data(), "m")), raw=False, strict_map_key=False)
    got = job_requests(Job.from_data(wire[1]).items)
    assert isinstance(got, JobRequests) and len(got) == len(indices)
    want = [made[i] for i in indices]

    def seen(e: Scheduled) -> tuple:
        return (e.index, e.offset, e.request_id, e.user_class, e.sample.prompt, e.sample.prompt_len,
                e.sample.expected_output_len)

    assert [seen(e) for e in got] == [seen(e) for e in want]
    assert seen(got[-1]) == seen(want[-1]) and [seen(e) for e in got[1:3]] == [seen(e) for e in want[1:3]]
    assert request_count(got) == request_count(want)
    assert len({id(e.sample) for e in got}) <= 5  # one sample object per pool sample, not per request


def test_random_samples_are_made_when_read_and_the_same_each_time() -> None:
    """``random``'s prompts are made from their draws when read: the same requests however they are read, the
    schedule's ids and counts without making any, and a big workload holds no prompt (issue 37)."""
    import tracemalloc

    from llmload.datasets import sample_random
    from llmload.datasets.base import SamplesOnRead
    from llmload.tokenizer import load_counting_tokenizer

    tok = load_counting_tokenizer("builtin")
    samples = sample_random(tok, 300, 5, input_len=24, output_len=8, range_ratio=0.5, prefix_len=3)
    assert isinstance(samples, SamplesOnRead)
    whole = list(samples)
    assert [samples[i] for i in reversed(range(300))] == whole[::-1]
    assert samples[-1] == whole[-1] and samples[10:20] == whole[10:20] and samples == whole
    assert [samples.request_id(i) for i in range(300)] == [s.request_id for s in whole]
    schedule = Schedule.build(ScheduleSpec(request_rate=50.0, seed=5), samples)
    assert [e.request_id for e in schedule] == request_ids(whole, 300)
    assert request_count(schedule) == sum(turn_count(s) for s in whole)

    tracemalloc.start()
    try:
        big = sample_random(tok, 200_000, 1, input_len=64, output_len=16)
        schedule = Schedule.build(ScheduleSpec(request_rate=100.0, seed=1), big)
        assert len(schedule) == 200_000 and request_count(schedule) == 200_000
        assert schedule[123_456].request_id == "random-123456"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the draws (12 bytes a request), the offsets (8) and working arrays; a prompt each would be ~40 MB
    assert peak < 20 * 2**20, peak


def test_a_job_of_samples_made_when_read_carries_each_ones_own_prompt(monkeypatch) -> None:
    """A worker's job from a random workload made as it is read: each request keeps its own prompt (a made sample
    is a new object each time; the job's pool must not take one for another that had the same id)."""
    from llmload.core.messages import job_items, job_requests
    from llmload.datasets import random_dataset
    from llmload.tokenizer import load_counting_tokenizer

    monkeypatch.setattr(random_dataset, "MADE_AHEAD_TOKENS", 0)
    tok = load_counting_tokenizer("builtin")
    samples = random_dataset.sample_random(tok, 400, 2, input_len=12, output_len=5, range_ratio=0.5)
    schedule = Schedule.build(ScheduleSpec(request_rate=100.0, seed=2), samples)
    indices = list(range(1, 400, 2))
    got = job_requests(job_items(schedule, indices))
    want = [schedule[i] for i in indices]
    assert [(r.index, r.request_id, r.sample.prompt, r.sample.prompt_len) for r in got] == [
        (r.index, r.request_id, r.sample.prompt, r.sample.prompt_len) for r in want]
