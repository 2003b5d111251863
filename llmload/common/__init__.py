"""What every layer may import: the error tree with its exit codes, the choice tuples the options, metrics and
results share, and URL handling (credentials never shown). Imports nothing else of llmload."""
