"""The local OpenAI-compatible simulator behind tests, benchmarks and the demo."""
