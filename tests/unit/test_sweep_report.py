"""Protects `llmload report SWEEP` and `llmload compare SWEEP SWEEP`: the files written, the answer sentence,
client-limited rows marked, the figures' plotted series (sweep_figures.json), and one-line errors for a sweep
mixed with a run or a --goodput on a sweep."""

from __future__ import annotations

import csv
import html
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmload.cli import main
from llmload.sweep.table import SWEEP_KIND, SWEEP_VERSION, point_row

VLLM_FIXTURE = Path(__file__).resolve().parents[1] / "data" / "vllm_benchmark_serving_result.json"
FILES = ("sweep_latency.png", "sweep_throughput.png", "sweep_figures.json")
SLO = {"ttft": 500.0, "tpot": 50.0}


def _result(rate: float | str, achieved: float, ttft: float, tpot: float, *, concurrency: int | None = None,
            failed: int = 0, client: str = "", saturated: bool = False) -> dict[str, Any]:
    """A point's result JSON (the keys point_row reads); latencies grow with ``ttft``/``tpot``, none when
    every request failed (``achieved`` 0)."""
    result: dict[str, Any] = {
        "request_rate": rate, "max_concurrency": concurrency, "request_throughput": achieved,
        "output_throughput": achieved * 180.0, "total_token_throughput": achieved * 400.0,
        "completed": int(achieved * 60), "failed": failed, "duration": 60.0,
        "client_health": {"bottleneck": bool(client), "reason": client},
        "saturation": {"saturated": saturated, "stopped_run": False},
    }
    if achieved > 0:
        for metric, base in (("ttft", ttft), ("tpot", tpot), ("itl", tpot * 0.9), ("e2el", ttft + 180 * tpot)):
            result.update({f"mean_{metric}_ms": base * 1.1, f"median_{metric}_ms": base,
                           f"p90_{metric}_ms": base * 1.6, f"p99_{metric}_ms": base * 2.5})
    return result


def _row(index: int, role: str, result: dict[str, Any], goodput: float | None, target: float | None = 0.95):
    meets = None if goodput is None else goodput >= (target or 1.0)
    return point_row(index, role, result, goodput=goodput, meets_target=meets,
                     result_file=f"point-{index}.json", records_file=f"point-{index}.records.jsonl")


def _sweep(label: str, points: list[dict], *, slo: dict | None = SLO, answer: dict | None = None,
           dimension: str = "request_rate", simulated: bool = True) -> dict[str, Any]:
    return {
        "kind": SWEEP_KIND, "version": SWEEP_VERSION, "date": "20250101-120000", "label": label,
        "backend": "openai-chat", "model_id": "Qwen/Qwen3-8B", "base_url": "llmload-sim" if simulated else
        "http://gpu:8000", "dataset_name": "random", "num_prompts": 200, "warmup": 10, "simulated": simulated,
        "sim_profile": "tiny" if simulated else None, "mode": "search", "dimension": dimension, "slo": slo,
        "goodput_target": 0.95 if slo else None, "precision": answer["precision"] if answer else None,
        "ceiling": None,
        "answer": answer, "interrupted": False, "points": points,
    }


def _answer(value, lower, upper, lower_point, upper_point, *, met=True, limited_by="slo", dimension="request_rate",
            reason="goodput fell below 95% above it", precision: str | None = "0.5"):
    return {"dimension": dimension, "value": value, "met": met, "lower": lower, "upper": upper,
            "lower_point": lower_point, "upper_point": upper_point, "precision": precision, "reason": reason,
            "limited_by": limited_by}


def sweep_a() -> dict[str, Any]:
    """An unlimited-rate ceiling, then 4 rates with growing latencies; the answer 3.375 req/s."""
    points = [_row(1, "ceiling", _result("inf", 4.1, 2400.0, 70.0, saturated=True), 0.31),
              _row(2, "sweep", _result(1.5, 1.49, 120.0, 18.0), 1.0),
              _row(3, "sweep", _result(3.0, 2.98, 210.0, 28.0), 0.99),
              _row(4, "search", _result(3.375, 3.36, 330.0, 39.0), 0.96),
              _row(5, "search", _result(3.75, 3.7, 690.0, 55.0), 0.81)]
    return _sweep("vllm", points, answer=_answer(3.375, 3.375, 3.75, 4, 5))


def sweep_b() -> dict[str, Any]:
    """Other numbers; the top point client-limited (so the answer is limited by the client)."""
    points = [_row(1, "sweep", _result(1.0, 1.0, 90.0, 15.0), 1.0),
              _row(2, "sweep", _result(2.0, 1.99, 140.0, 20.0), 1.0),
              _row(3, "sweep", _result(4.0, 3.95, 260.0, 31.0), 0.97),
              _row(4, "sweep", _result(8.0, 5.1, 410.0, 44.0, client="client CPU 97% busy"), 0.96)]
    return _sweep("sglang", points, answer=_answer(4.0, 4.0, None, 3, None, limited_by="client", precision="10%",
                                                   reason="the client could not offer more than 5.1 req/s"))


def sweep_no_slo() -> dict[str, Any]:
    """No SLO (goodput None, no answer); the last point's requests all failed (empty latency blocks)."""
    points = [_row(1, "sweep", _result(1.0, 1.0, 100.0, 16.0), None, None),
              _row(2, "sweep", _result(2.0, 1.98, 150.0, 22.0), None, None),
              _row(3, "sweep", _result(4.0, 3.9, 300.0, 35.0), None, None),
              _row(4, "sweep", _result(8.0, 0.0, 0.0, 0.0, failed=120), None, None)]
    return _sweep("noslo", points, slo=None, simulated=False)


def sweep_missed() -> dict[str, Any]:
    """A concurrency sweep whose lowest concurrency already misses the SLO."""
    points = [_row(i + 1, "sweep", _result("inf", 0.8 * c, 700.0 * c, 60.0 + c, concurrency=c), g)
              for i, (c, g) in enumerate(((1, 0.6), (2, 0.4), (4, 0.2), (8, 0.05)))]
    answer = _answer(None, None, 1.0, None, 1, met=False, dimension="max_concurrency",
                     reason="the lowest concurrency missed the SLO")
    return _sweep("tight", points, answer=answer, dimension="max_concurrency")


def _write(tmp_path: Path, name: str, data: dict[str, Any]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "sweep.json").write_text(json.dumps(data, indent=2))
    return folder


def _check_png(path: Path, min_w: int = 400, min_h: int = 200) -> None:
    import matplotlib.image as mpimg

    img = mpimg.imread(path)
    assert img.shape[0] > min_h and img.shape[1] > min_w, (path, img.shape)
    assert float(np.std(img)) > 0.01, f"{path} looks blank"


def _series(out: Path, figure: str, sweep: str, panel: str, stat: str | None = None) -> dict[str, Any]:
    plotted = json.loads((out / "sweep_figures.json").read_text())[figure]["series"]
    found = [s for s in plotted if s["sweep"] == sweep and s["panel"] == panel and s.get("stat") == stat]
    assert len(found) == 1, (sweep, panel, stat, plotted)
    return found[0]


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv("LLMLOAD_DEBUG", raising=False)


def test_report_on_a_sweep(tmp_path, capsys):
    folder = _write(tmp_path, "a", sweep_a())
    out = tmp_path / "rep"
    assert main(["report", str(folder), "--output", str(out)]) == 0
    stdout = capsys.readouterr().out
    answer = ("Highest request rate meeting ttft<=500 ms, tpot<=50 ms for >=95% of requests: 3.38 req/s "
              "(met at 3.38, missed at 3.75; precision 0.5)")
    assert answer in stdout
    for name in ("sweep.html", "sweep.md", "sweep.csv", *FILES):
        assert (out / name).is_file(), name
    for name in FILES[:2]:
        _check_png(out / name)
    page = html.unescape((out / "sweep.html").read_text())
    assert answer in page and "vllm" in page and "SIMULATED" in page
    # the latency and throughput figures, and the Pareto front (its points have TPOT and throughput)
    assert page.count("data:image/png;base64,") == 3 and "http://" not in page.replace("http://gpu", "")
    _check_png(out / "sweep_pareto.png")
    assert (out / "pareto.json").is_file()
    md = (out / "sweep.md").read_text()
    assert answer in md and "| # | role | offered (req/s) |" in md and "ceiling: unlimited rate" in md
    assert "answer: highest load that met" in md and "lowest load that missed" in md
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert [r["offered"] for r in rows] == ["inf", "1.5", "3.0", "3.375", "3.75"]
    assert float(rows[3]["ttft_p99_ms"]) == pytest.approx(330.0 * 2.5)
    assert rows[4]["meets_target"] == "false" and rows[0]["saturated"] == "true"
    # latency versus the achieved rate, sorted; the SLOs on their panels
    ttft = _series(out, "sweep_latency", "vllm", "ttft", "median")
    assert ttft["x"] == [1.49, 2.98, 3.36, 3.7, 4.1] and ttft["y"] == [120.0, 210.0, 330.0, 690.0, 2400.0]
    lines = json.loads((out / "sweep_figures.json").read_text())["sweep_latency"]["lines"]
    assert {(line["panel"], line["y"]) for line in lines} == {("ttft", 500.0), ("tpot", 50.0)}
    # goodput versus the offered rate, the ceiling at the right edge
    goodput = _series(out, "sweep_throughput", "vllm", "goodput")
    assert goodput["x"] == [1.5, 3.0, 3.375, 3.75] and goodput["y"] == [1.0, 0.99, 0.96, 0.81]
    # the unlimited-rate point stands alone (no line joins it to the finite rates)
    ceiling = _series(out, "sweep_throughput", "vllm", "goodput", "unlimited")
    assert ceiling["x"][0] > 3.75 and ceiling["y"] == [0.31]


def test_report_reads_the_file_and_keeps_label_title_dpi(tmp_path, capsys):
    folder = _write(tmp_path, "a", sweep_a())
    big, small = tmp_path / "big", tmp_path / "small"
    assert main(["report", str(folder / "sweep.json"), "-o", str(big)]) == 0
    assert main(["report", str(folder / "sweep.json"), "-o", str(small), "--label", "mine", "--title",
                 "My sweep page", "--dpi", "50"]) == 0
    page = html.unescape((small / "sweep.html").read_text())
    assert "<title>My sweep page</title>" in page and "mine" in page
    import matplotlib.image as mpimg

    assert mpimg.imread(small / "sweep_latency.png").shape[1] < mpimg.imread(big / "sweep_latency.png").shape[1]
    capsys.readouterr()


def test_compare_overlays_two_sweeps(tmp_path, capsys):
    a, b = _write(tmp_path, "a", sweep_a()), _write(tmp_path, "b", sweep_b())
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--output", str(out), "--baseline", "sglang"]) == 0
    capsys.readouterr()
    for name in ("compare.html", "compare.md", "compare.csv", *FILES):
        assert (out / name).is_file(), name
    for name in FILES[:2]:
        _check_png(out / name)
    page = html.unescape((out / "compare.html").read_text())
    assert "vllm" in page and "sglang (baseline)" in page
    assert "3.38 req/s (met at 3.38, missed at 3.75; precision 0.5)" in page
    assert "4 req/s (met at 4, no load tried missed; precision 10%)" in page
    assert "client-limited: not taken as the answer (client CPU 97% busy)" in page
    assert page.count('<tr class="limited">') == 1 and "limited by the client" in page
    md = (out / "compare.md").read_text()
    assert "| sweep | answer | vs baseline |" in md and "-15.6%" in md  # 3.375 vs 4
    # both sweeps drawn, each on its own x values
    for label, achieved, rates in (("vllm", [1.49, 2.98, 3.36, 3.7, 4.1], [1.5, 3.0, 3.375, 3.75]),
                                   ("sglang", [1.0, 1.99, 3.95, 5.1], [1.0, 2.0, 4.0, 8.0])):
        for panel in ("ttft", "tpot", "itl", "e2el"):
            for stat in ("median", "p90", "p99"):
                assert _series(out, "sweep_latency", label, panel, stat)["x"] == achieved
        assert _series(out, "sweep_throughput", label, "output_throughput")["x"][:4] == rates
    inf_x = _series(out, "sweep_throughput", "vllm", "goodput", "unlimited")["x"][-1]
    assert inf_x > 8.0  # past the highest finite rate of either sweep
    answers = [line for line in json.loads((out / "sweep_figures.json").read_text())["sweep_throughput"]["lines"]
               if line["kind"] == "answer"]
    assert {(x["sweep"], x["x"]) for x in answers} == {("vllm", 3.375), ("sglang", 4.0)}
    rows = list(csv.DictReader((out / "compare.csv").open()))
    assert {r["sweep"] for r in rows} == {"vllm", "sglang"} and len(rows) == 9
    assert [r["client_limited"] for r in rows if r["sweep"] == "sglang"] == ["false", "false", "false", "true"]


def test_no_slo_and_a_point_with_no_latencies(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", str(_write(tmp_path, "n", sweep_no_slo())), "-o", str(out), "--label", "plain"]) == 0
    capsys.readouterr()
    page = html.unescape((out / "sweep.html").read_text())
    assert "No SLO: the sweep measured its points without searching for an answer." in page
    assert "SIMULATED" not in page
    for name in FILES[:2]:
        _check_png(out / name)
    plotted = json.loads((out / "sweep_figures.json").read_text())
    assert not [s for s in plotted["sweep_throughput"]["series"] if s["panel"] == "goodput"]
    assert _series(out, "sweep_latency", "plain", "ttft", "median")["x"] == [1.0, 1.98, 3.9]
    assert _series(out, "sweep_throughput", "plain", "output_throughput")["x"] == [1.0, 2.0, 4.0, 8.0]
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert rows[3]["ttft_median_ms"] == "" and rows[3]["failed"] == "120" and rows[3]["goodput"] == ""


def test_an_answer_that_was_not_met(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", str(_write(tmp_path, "t", sweep_missed())), "-o", str(out)]) == 0
    text = "No concurrency tried met the SLO: even 1 (the lowest tried) had goodput 60.0%"
    assert text in capsys.readouterr().out
    assert text in html.unescape((out / "sweep.html").read_text()) and text in (out / "sweep.md").read_text()
    assert "| # | role | max concurrency |" in (out / "sweep.md").read_text()
    assert _series(out, "sweep_throughput", "tight", "goodput")["x"] == [1.0, 2.0, 4.0, 8.0]
    assert not [x for x in json.loads((out / "sweep_figures.json").read_text())["sweep_throughput"]["lines"]
                if x["kind"] == "answer"]
    _check_png(out / "sweep_throughput.png")


def test_compare_sweeps_of_both_dimensions_and_no_slo(tmp_path, capsys):
    paths = [str(_write(tmp_path, n, d)) for n, d in (("a", sweep_a()), ("t", sweep_missed()),
                                                       ("n", sweep_no_slo()))]
    out = tmp_path / "cmp"
    assert main(["compare", *paths, "-o", str(out), "--labels", "x,y,z"]) == 0
    assert "the sweeps vary different things" in capsys.readouterr().out
    for name in FILES[:2]:
        _check_png(out / name)


def _one_line(capsys, *words: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for word in words:
        assert word in err[0], err[0]


def test_a_sweep_and_a_run_do_not_mix(tmp_path, capsys):
    run = tmp_path / "run.json"
    shutil.copy(VLLM_FIXTURE, run)
    sweep = _write(tmp_path, "a", sweep_a())
    assert main(["compare", str(sweep), str(run), "-o", str(tmp_path / "o")]) == 2
    _one_line(capsys, "llmload compare: error: cannot mix sweeps", str(run))
    assert not (tmp_path / "o").exists()


def test_goodput_is_rejected_for_a_sweep(tmp_path, capsys):
    folder = _write(tmp_path, "a", sweep_a())
    assert main(["report", str(folder), "-o", str(tmp_path / "o"), "--goodput", "ttft:100"]) == 2
    _one_line(capsys, "re-run the sweep with other --slo")
    other = _write(tmp_path, "b", sweep_b())
    assert main(["compare", str(folder), str(other), "-o", str(tmp_path / "o"), "--goodput", "ttft:100"]) == 2
    _one_line(capsys, "a sweep's goodput was judged by its run")


def test_bad_sweeps_give_one_line_errors(tmp_path, capsys):
    empty = _write(tmp_path, "e", {**sweep_a(), "points": []})
    assert main(["report", str(empty), "-o", str(tmp_path / "o")]) == 2
    _one_line(capsys, "no points")
    a, b = _write(tmp_path, "a", sweep_a()), _write(tmp_path, "b", sweep_b())
    assert main(["compare", str(a), str(b), "-o", str(tmp_path / "o"), "--baseline", "zzz"]) == 2
    _one_line(capsys, "--baseline", "vllm, sglang")


def test_answer_sentences_and_notes():
    from llmload.report.sweep_tables import answer_notes, answer_text

    capped = sweep_a()
    capped["answer"] = _answer(3.75, 3.75, None, 5, None, limited_by="max_load")
    assert answer_text(capped).endswith("3.75 req/s (met at 3.75, no load tried missed; precision 0.5)")
    assert "limited by the sweep's highest load" in answer_notes(capped)[0]
    client = sweep_b()
    client["answer"] = _answer(None, None, 1.0, None, 1, met=False, limited_by="client", reason="")
    assert answer_text(client) == "No request rate tried met the SLO: even 1 req/s (the lowest tried) had goodput 100.0%"
    assert answer_notes(client) == ["the client was the bottleneck at the lowest load tried (client-limited points "
                                    "are not taken as the answer): the server was not measured"]
    interrupted = {**sweep_a(), "answer": None, "interrupted": True}
    assert answer_text(interrupted) == "No answer: the sweep was interrupted first."
    assert answer_text(sweep_no_slo()).startswith("No SLO")
