"""The run core every way in shares: the schedule of a run, the dispatcher that sends it, the record path that
collects what was measured (docs/design.md). ``llmload bench`` drives it headless; the Locust plugin adapts it."""
