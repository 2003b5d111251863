"""Structured output (``--response-format``): the answer check (parses, is an object, matches the schema), the
option's one-line refusals, the result JSON's and the summary's counts, and the simulator's answers (valid JSON
for the schema in exactly the requested number of tokens, broken ones invalid, unsupported schemas refused)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
from jsonschema import Draft202012Validator

from llmload.common.errors import ConfigError
from llmload.core.structured import answer_check, checked_format, parse_response_format
from llmload.sim.structured import Unsupported, draw_broken, plan_for

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 18},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
        "role": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/role"}]},
        "since": {"type": "string", "format": "date"},
        "notes": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
    "required": ["name", "age", "tags", "role", "since", "notes"],
    "additionalProperties": False,
    "$defs": {"role": {"type": "string", "enum": ["admin", "user"]}},
}


def schema_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}


# -- the check -------------------------------------------------------------------------------------------------


def test_a_valid_answer_passes_both_checks() -> None:
    assert answer_check({"type": "json_object"}).verdict('{"a": [1, 2]}') == (True, "")
    answer = {"name": "x", "age": 30, "tags": [], "role": None, "since": "2026-01-01", "notes": ["n"]}
    assert answer_check(schema_format(PERSON)).verdict(json.dumps(answer)) == (True, "")


@pytest.mark.parametrize("text", ['{"a": 1', "", "hello", '{"a": 1} extra', '{"a": NaN}', "```json\n{}\n```"])
def test_text_that_is_not_json_fails_with_its_reason(text: str) -> None:
    for fmt in ({"type": "json_object"}, schema_format(PERSON)):
        valid, reason = answer_check(fmt).verdict(text)
        assert not valid and reason.startswith("not JSON:") and "\n" not in reason, reason


def test_json_object_wants_an_object() -> None:
    assert answer_check({"type": "json_object"}).verdict("[1, 2]") == (False, "not a JSON object: list")


def test_a_schema_mismatch_names_the_keyword_and_where() -> None:
    check = answer_check(schema_format(PERSON))
    answer = {"name": "x", "age": 12, "tags": [], "role": None, "since": "2026-01-01", "notes": ["n"]}
    valid, reason = check.verdict(json.dumps(answer))
    assert not valid and reason.startswith("schema:") and "18" in reason and "$.age" in reason, reason
    del answer["name"]
    answer["age"] = 20
    valid, reason = check.verdict(json.dumps(answer))
    assert not valid and "'name' is a required property" in reason, reason


def test_the_validator_is_compiled_once_per_format() -> None:
    assert answer_check(schema_format(PERSON)) is answer_check(json.loads(json.dumps(schema_format(PERSON))))


# -- the option ------------------------------------------------------------------------------------------------


def test_the_option_becomes_openai_s_response_format(tmp_path: Path) -> None:
    assert parse_response_format("json_object", "openai-chat") == {"type": "json_object"}
    assert parse_response_format(None, "tgi") is None
    path = tmp_path / "person.json"
    path.write_text(json.dumps(PERSON))
    assert parse_response_format(f"json_schema:{path}", "vllm") == {
        "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"name": "who", "schema": PERSON, "strict": False}))
    assert parse_response_format(f"json_schema:{wrapped}", "openai-chat")["json_schema"] == {
        "name": "who", "schema": PERSON, "strict": False}


@pytest.mark.parametrize(("value", "backend", "words"), [
    ("xml", "openai-chat", "expected json_object or json_schema:FILE"),
    ("json_schema:", "openai-chat", "expected json_object or json_schema:FILE"),
    ("json_schema:{missing}", "openai-chat", "cannot read"),
    ("json_schema:{not_json}", "openai-chat", "is not JSON"),
    ("json_schema:{a_list}", "openai-chat", "must hold a JSON Schema object"),
    ("json_schema:{bad_schema}", "openai-chat", "not a valid JSON Schema at properties/a/type"),
    ("json_object", "tgi", "--backend tgi has no response_format"),
    ("json_object", "openai-responses", "has no response_format"),
])
def test_bad_values_are_one_line_config_errors(tmp_path: Path, value: str, backend: str, words: str) -> None:
    files = {"missing": tmp_path / "missing.json", "not_json": tmp_path / "n.json", "a_list": tmp_path / "l.json",
             "bad_schema": tmp_path / "b.json"}
    files["not_json"].write_text("{nope")
    files["a_list"].write_text("[]")
    files["bad_schema"].write_text(json.dumps({"properties": {"a": {"type": "strin"}}}))
    with pytest.raises(ConfigError) as caught:
        parse_response_format(value.format(**files), backend)
    message = str(caught.value)
    assert message.startswith("--response-format: ") and words in message and "\n" not in message, message


def test_a_response_format_in_the_extra_body_is_checked_too() -> None:
    assert checked_format({"response_format": {"type": "text"}}, "--extra-body") is None
    assert checked_format({"response_format": {"type": "json_object"}}, "--extra-body") == {"type": "json_object"}
    with pytest.raises(ConfigError, match="--extra-body response_format: json_schema needs a 'schema' object"):
        checked_format({"response_format": {"type": "json_schema"}}, "--extra-body")


# -- the counts ------------------------------------------------------------------------------------------------


def test_the_result_counts_checked_answers_and_the_summary_says_so() -> None:
    from llmload.client.records import RequestRecord
    from llmload.metrics import compute_metrics
    from llmload.summary.block import format_llmload_block

    def record(i: int, valid: bool | None, success: bool = True) -> RequestRecord:
        return RequestRecord(request_id=str(i), start=float(i), first_token=i + 0.1, chunk_times=[i + 0.1, i + 0.2],
                             chunk_tokens=[1, 1], output_tokens=2, success=success, structured_output_valid=valid,
                             failure_kind="" if success else "http_5xx", error="" if success else "500")

    records = [record(i, i % 4 != 0) for i in range(8)] + [record(8, None, success=False)]
    metrics = compute_metrics(records, 10.0)
    assert metrics.to_result_dict()["structured_output"] == {"requests": 8, "valid": 6, "valid_rate": 0.75}
    assert "Structured output valid:                 6 / 8 (75.0 %)" in format_llmload_block(metrics)
    plain = compute_metrics([record(i, None) for i in range(3)], 10.0)
    assert "structured_output" not in plain.to_result_dict()
    assert "Structured output" not in format_llmload_block(plain)
    # records travel as dicts (workers to the master, the records file): the verdict with them
    again = RequestRecord.from_dict(json.loads(json.dumps(records[0].to_dict())))
    assert again.structured_output_valid is False and again == records[0]


def test_the_verdict_survives_a_parquet_records_file(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from llmload.client.records import RequestRecord
    from llmload.client.records.file import read_records, write_records

    records = [RequestRecord(request_id="a", structured_output_valid=True),
               RequestRecord(request_id="b"),
               RequestRecord(request_id="c", structured_output_valid=False, structured_output_error="not JSON: x")]
    write_records(tmp_path / "r.parquet", records, "parquet")
    back = read_records(tmp_path / "r.parquet")
    assert [(r.structured_output_valid, r.structured_output_error) for r in back] == [
        (True, ""), (None, ""), (False, "not JSON: x")]


# -- the simulator's answers -----------------------------------------------------------------------------------


def text_of(pieces: tuple[bytes, ...]) -> str:
    return orjson.loads(b'"' + b"".join(pieces) + b'"')


@pytest.mark.parametrize("fmt", [{"type": "json_object"}, schema_format(PERSON),
                                 schema_format({"type": "array", "items": {"type": "integer"}, "maxItems": 2}),
                                 schema_format({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
                                 schema_format({"type": "object", "properties": {
                                     "v": {"type": "string"}, "kids": {"type": "array", "items": {"$ref": "#"}}},
                                     "required": ["v", "kids"]})])
def test_the_simulator_answers_valid_json_in_exactly_the_requested_tokens(fmt: dict) -> None:
    plan = plan_for(fmt)
    assert plan is not None
    check = answer_check(fmt)
    for tokens in (1, 2, 3, 5, 8, 13, 40, 300):
        for offset in (0, 77):
            pieces = plan.pieces(tokens, offset)
            assert len(pieces) == tokens and all(pieces), (tokens, pieces)
            assert check.verdict(text_of(pieces)) == (True, ""), text_of(pieces)
            broken = plan.pieces(tokens, offset, broken=True)
            assert len(broken) == tokens and not check.verdict(text_of(broken))[0], text_of(broken)


def test_long_answers_grow_the_strings_within_max_length() -> None:
    text = text_of(plan_for(schema_format(PERSON)).pieces(500, 3))
    answer = json.loads(text)
    Draft202012Validator(PERSON).validate(answer)
    assert len(answer["name"]) <= 40 and len(answer["notes"][0].split()) > 50, answer


@pytest.mark.parametrize(("fmt", "words"), [
    ({"type": "grammar"}, "response_format type must be one of"),
    ({"type": "json_schema"}, "needs a 'schema' object"),
    (schema_format({"type": "strin"}), "invalid JSON schema"),
    (schema_format({"type": "string", "pattern": "^a+$"}), "'pattern'"),
    (schema_format({"type": "integer", "multipleOf": 2, "maximum": 1, "minimum": 1}), "cannot generate"),
])
def test_the_simulator_refuses_formats_it_cannot_answer(fmt: dict, words: str) -> None:
    with pytest.raises(Unsupported, match=words):
        plan_for(fmt)


def test_text_asks_for_nothing_and_the_broken_share_follows_the_rate() -> None:
    assert plan_for({"type": "text"}) is None and plan_for(None) is None
    bodies = [json.dumps({"prompt": f"p{i}"}).encode() for i in range(4000)]
    share = sum(draw_broken(0.3, 7, b) for b in bodies) / len(bodies)
    assert abs(share - 0.3) < 4 * (0.3 * 0.7 / len(bodies)) ** 0.5, share
    assert [draw_broken(0.3, 7, b) for b in bodies[:50]] == [draw_broken(0.3, 7, b) for b in bodies[:50]]
    assert not any(draw_broken(0.0, 7, b) for b in bodies[:50])


def test_the_options_reach_the_request_body() -> None:
    from llmload.core.shaping import shaping_from

    options = SimpleNamespace(backend="openai-chat", response_format="json_object", extra_body=None)
    assert shaping_from(options).body == {"response_format": {"type": "json_object"}}
    options.extra_body = '{"response_format": {"type": "text"}}'  # --extra-body wins, as over every field
    assert shaping_from(options).body == {"response_format": {"type": "text"}}
