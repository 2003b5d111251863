"""Reports and comparisons of finished runs: ``llmload report`` and ``llmload compare``.

    loader.py    a RUN (our result JSON + records, or vLLM's --save-detailed JSON) -> Run
    stats.py     per-request values and summary metrics recomputed from a Run's records
    findings.py  automatic findings with their numbers (first-ITL stall, ITL vs TPOT, TTFT tail, ...)
    tables.py    the headline table with relative differences: terminal, Markdown, CSV, HTML
    figures.py   matplotlib PNGs, one colour per run
    html.py      the self-contained HTML page
    server.py    the server's scraped series on the report's time axis, its summary, the "Server metrics" table
    server_findings.py / server_figures.py   findings and figures that read the server's series
    build.py     the pipeline both commands run
    sweep.py     a SWEEP (sweep.json of 'llmload sweep') -> its answer, points, figures, page: both commands
    sweep_tables.py / sweep_figures.py   the sweep report's text and tables, and its figures

Nothing heavy is imported here; matplotlib only when figures are drawn.
"""
