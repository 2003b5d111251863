"""Processes: child processes that die with us (``children``), signals and exit codes (``interrupts``), and
``llmload sim`` started as a child (``simproc``)."""
