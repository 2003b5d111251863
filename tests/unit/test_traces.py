"""Protects trace replay: send offsets of the Azure/BurstGPT/JSONL trace window (time-scaled, re-based),
token sizes honoured exactly by the built prompts, and one-line errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmload.common.errors import ConfigError, DatasetError
from llmload.datasets import load_samples, sample_trace, token_len
from llmload.datasets.traces import detect_format
from llmload.tokenizer import load_counting_tokenizer

REPO = Path(__file__).resolve().parents[2]
#: the first 10 minutes of the Azure LLM inference trace 2023 (conversation), CC BY 4.0: tests/data/README.md
AZURE_CONV = REPO / "tests" / "data" / "azure_conv_excerpt.csv"
SHAREGPT_SAMPLE = REPO / "llmload" / "data" / "sharegpt_sample.json.gz"


@pytest.fixture(scope="module")
def tok():
    return load_counting_tokenizer("builtin")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# -- the real Azure conversation trace -----------------------------------------------------------------


#: the window [first + 450 s, first + 600 s): the excerpt's last 2.5 minutes (751 requests: a window that does not
#: start at the trace's start, and half the tokenizing of the 5 minutes this used to be)
WINDOW_START, WINDOW_END = 450, 600


@pytest.fixture(scope="module")
def azure_window(tok):
    samples = load_samples(
        "trace", str(AZURE_CONV), tok, None, 3, time_scale=20, trace_start=WINDOW_START,
        trace_duration=WINDOW_END - WINDOW_START,
    )
    return samples


def test_azure_window_offsets_are_the_scaled_trace(azure_window):
    pd = pytest.importorskip("pandas")
    df = pd.read_csv(AZURE_CONV)
    stamps = pd.to_datetime(df["TIMESTAMP"])
    seconds = (stamps - stamps.min()).dt.total_seconds().to_numpy()
    in_window = (seconds >= WINDOW_START) & (seconds < WINDOW_END)
    expected = (seconds[in_window] - seconds[in_window][0]) / 20
    assert len(azure_window) == in_window.sum() > 700
    offsets = np.array([s.arrival_s for s in azure_window])
    np.testing.assert_allclose(offsets, expected, rtol=0, atol=1e-6)
    assert offsets[0] == 0.0
    assert offsets[-1] <= (WINDOW_END - WINDOW_START) / 20


def test_azure_window_token_sizes_are_the_trace_sizes(azure_window, tok):
    pd = pytest.importorskip("pandas")
    df = pd.read_csv(AZURE_CONV)
    stamps = pd.to_datetime(df["TIMESTAMP"])
    seconds = (stamps - stamps.min()).dt.total_seconds().to_numpy()
    window = df[(seconds >= WINDOW_START) & (seconds < WINDOW_END)]
    # re-measured here, exactly as token_len counts (BOS included), in one batched call
    measured = [len(ids) for ids in tok([s.prompt for s in azure_window]).input_ids]
    assert measured[:5] == [token_len(tok, s.prompt) for s in azure_window[:5]]
    assert measured == window["ContextTokens"].tolist()
    assert [s.prompt_len for s in azure_window] == measured
    assert [s.expected_output_len for s in azure_window] == window["GeneratedTokens"].clip(lower=1).tolist()
    # prompts start at different places: no shared prefixes by construction
    heads = {s.prompt[:40] for s in azure_window}
    assert len(heads) > 0.99 * len(azure_window)


def test_azure_num_prompts_caps_and_format_is_detected(tok):
    assert detect_format(AZURE_CONV) == "azure"
    samples = sample_trace(AZURE_CONV, tok, 25, 0, time_scale=2.0)
    assert len(samples) == 25
    assert samples[0].request_id == f"{AZURE_CONV.name}:2"  # file line 2: the excerpt keeps the trace's lines
    # the trace's second request arrived 4.3145790 s after the first: at 2x, 2.1572895 s
    assert samples[1].arrival_s == pytest.approx(4.3145790 / 2, abs=1e-9)


# -- BurstGPT --------------------------------------------------------------------------------------------

BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,276,693,API log
130,ChatGPT,1360,230,1590,Conversation log
201,ChatGPT,12,51,63,Conversation log
"""


def test_burstgpt_window_and_failed_requests(tmp_path, tok):
    path = write(tmp_path / "burst.csv", BURSTGPT)
    assert detect_format(path) == "burstgpt"
    samples = sample_trace(path, tok, None, 1, time_scale=2, trace_start=40, trace_duration=100)
    # window [5 + 40, 5 + 140): rows at 45, 118, 130; offsets re-based to 45 and halved
    assert [s.arrival_s for s in samples] == [0.0, (118 - 45) / 2, (130 - 45) / 2]
    assert [token_len(tok, s.prompt) for s in samples] == [1087, 417, 1360]
    # a failed request (0 response tokens) is kept as an arrival and asks for 1 token
    assert [s.expected_output_len for s in samples] == [1, 276, 230]
    everything = sample_trace(path, tok, None, 1)
    assert [s.arrival_s for s in everything] == [0, 40, 113, 125, 196]


# -- our JSONL -------------------------------------------------------------------------------------------


def test_jsonl_with_token_counts_and_prompts(tmp_path, tok):
    rows = [
        {"t": 10.5, "input_tokens": 64, "output_tokens": 16},
        {"t": 10.0, "prompt": "Say hello.", "output_tokens": 8},
        {"t": 12.0, "input_tokens": 1, "output_tokens": 0},
        {"t": 13.25, "input_tokens": 8000, "output_tokens": 3},
    ]
    path = write(tmp_path / "trace.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert detect_format(path) == "jsonl"
    samples = sample_trace(path, tok, None, 0, time_scale=0.5)
    # ordered by time; offsets from the first (t=10.0), slowed down 2x
    assert [s.arrival_s for s in samples] == [0.0, 1.0, 4.0, 6.5]
    assert samples[0].prompt == "Say hello." and samples[0].prompt_len == token_len(tok, "Say hello.")
    assert token_len(tok, samples[1].prompt) == samples[1].prompt_len == 64
    # smaller than BOS + 1: one content token, and prompt_len says so
    specials = tok.num_special_tokens_to_add()
    assert samples[2].prompt and token_len(tok, samples[2].prompt) == samples[2].prompt_len == specials + 1
    assert token_len(tok, samples[3].prompt) == samples[3].prompt_len == 8000
    assert [s.expected_output_len for s in samples] == [8, 16, 1, 3]
    assert samples[1].request_id == "trace.jsonl:1"


def test_forced_format_and_wrong_forced_format(tmp_path, tok):
    path = write(tmp_path / "trace.txt", '{"t": 0, "input_tokens": 5, "output_tokens": 2}\n')
    assert len(sample_trace(path, tok, trace_format="jsonl")) == 1
    with pytest.raises(DatasetError, match="lacks column"):
        sample_trace(path, tok, trace_format="azure")
    with pytest.raises(ConfigError, match="--trace-format"):
        sample_trace(path, tok, trace_format="parquet")


# -- prompts ---------------------------------------------------------------------------------------------


def _lengths_trace(tmp_path: Path, lengths: list[int]) -> Path:
    lines = [json.dumps({"t": i * 0.1, "input_tokens": n, "output_tokens": 4}) for i, n in enumerate(lengths)]
    return write(tmp_path / "lengths.jsonl", "\n".join(lines))


def test_prompts_are_deterministic_per_seed(tmp_path, tok):
    path = _lengths_trace(tmp_path, [50, 300, 1200, 7])
    a = [s.prompt for s in sample_trace(path, tok, seed=1)]
    b = [s.prompt for s in sample_trace(path, tok, seed=1)]
    c = [s.prompt for s in sample_trace(path, tok, seed=2)]
    assert a == b
    assert a != c


def test_prompts_from_a_sharegpt_file_have_exact_lengths(tmp_path, tok):
    if not SHAREGPT_SAMPLE.is_file():
        pytest.skip(f"the bundled ShareGPT sample is not at {SHAREGPT_SAMPLE}")
    from llmload.datasets.sharegpt import load_conversations

    lengths = [4, 40, 400, 2500, 9000]
    path = _lengths_trace(tmp_path, lengths)
    samples = sample_trace(path, tok, seed=3, prompt_path=SHAREGPT_SAMPLE)
    assert [token_len(tok, s.prompt) for s in samples] == lengths
    turns = [t["value"].strip() for e in load_conversations(SHAREGPT_SAMPLE) for t in e["conversations"]]
    starts = {t[:30] for t in turns if len(t) >= 30}
    # each prompt is dataset text starting at a turn (trimmed or padded with the following turns)
    long_enough = [s.prompt for s in samples if len(s.prompt) >= 30]
    assert sum(p[:30] in starts for p in long_enough) >= len(long_enough) - 1


def test_many_lengths_are_exact(tmp_path, tok):
    lengths = np.random.RandomState(0).randint(2, 3000, size=200).tolist()
    samples = sample_trace(_lengths_trace(tmp_path, lengths), tok, seed=9)
    assert [token_len(tok, s.prompt) for s in samples] == lengths


# -- windows and options -------------------------------------------------------------------------------


def test_window_options_are_checked(tmp_path, tok):
    path = _lengths_trace(tmp_path, [5, 5, 5])
    for kwargs, flag in [
        ({"time_scale": 0}, "--time-scale"),
        ({"trace_start": -1}, "--trace-start"),
        ({"trace_duration": 0}, "--trace-duration"),
    ]:
        with pytest.raises(ConfigError, match=flag):
            sample_trace(path, tok, **kwargs)
    with pytest.raises(DatasetError, match="no requests in the window"):
        sample_trace(path, tok, trace_start=100)
    with pytest.raises(DatasetError, match="--dataset-path"):
        load_samples("trace", None, tok, 10)
    with pytest.raises(ConfigError, match="input_len"):
        load_samples("trace", str(path), tok, 10, input_len=5)
    assert len(load_samples("trace", str(path), tok, 2, trace_duration=None)) == 2


# -- bad files -------------------------------------------------------------------------------------------

AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE_ROW = "2023-11-16 18:15:46.6805900,374,44\n"


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("a.csv", AZURE_HEAD + AZURE_ROW * 2 + "2023-11-16 18:15:4x.1,374,44\n", "a.csv:4: column TIMESTAMP"),
        (
            "b.csv",
            AZURE_HEAD + AZURE_ROW + "2023-11-16 18:15:47.1,3.5,44\n",
            "b.csv:3: column 'ContextTokens'",
        ),
        (
            "c.csv",
            AZURE_HEAD + AZURE_ROW + "2023-11-16 18:15:47.1,37,-2\n",
            "c.csv:3: column 'GeneratedTokens'",
        ),
        ("d.csv", AZURE_HEAD + AZURE_ROW + "2023-11-16 18:15:47.1,37\n", "d.csv:3: expected 3 fields"),
        ("e.csv", AZURE_HEAD + "\n" + AZURE_ROW + "\n2023-11-16 18:15:47.1,x,3\n", "e.csv:5: column"),
        ("f.csv", "Timestamp,Model,Request tokens\n1,a,2\n", "f.csv:1: unknown trace format"),
        ("g.csv", AZURE_HEAD, "g.csv: the trace has no requests"),
        ("h.csv", "", "h.csv: the trace file is empty"),
        ("i.csv", BURSTGPT.replace("118,GPT-4", "soon,GPT-4"), "i.csv:4: column 'Timestamp'"),
        ("j.jsonl", '{"t": 0, "input_tokens": 3, "output_tokens": 1}\n{"t": 1, oops}\n', "j.jsonl:2: column"),
        ("k.jsonl", '{"t": 0, "input_tokens": 3}\n', "k.jsonl:1: key 'output_tokens'"),
        ("l.jsonl", '{"t": -1, "input_tokens": 3, "output_tokens": 1}\n', "l.jsonl:1: key 't'"),
        ("m.jsonl", '{"t": 0, "output_tokens": 1}\n', "m.jsonl:1: needs 'input_tokens' or 'prompt'"),
        (
            "n.jsonl",
            '{"t": 0, "input_tokens": 3, "output_tokens": 1}\n[1, 2]\n',
            "n.jsonl:2: expected a JSON object",
        ),
    ],
)
def test_bad_files_are_one_line_errors_naming_file_and_line(tmp_path, tok, name, text, where):
    path = write(tmp_path / name, text)
    with pytest.raises(DatasetError) as info:
        sample_trace(path, tok)
    message = str(info.value)
    assert where in message
    assert "\n" not in message


def test_missing_file(tmp_path, tok):
    with pytest.raises(DatasetError, match="trace file not found"):
        sample_trace(tmp_path / "nope.csv", tok)
