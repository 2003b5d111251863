"""``llmload sweep``: a series of runs of one workload at increasing load, and the search for the highest load
that meets an SLO (docs/sweep.md)."""
