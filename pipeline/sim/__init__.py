"""The local OpenAI-compatible simulator behind tests, benchmarks and the demo."""

# every answer of the simulator carries this as its `system_fingerprint`: a build records what
# it actually met (pipeline/llm/), whatever its config says
FINGERPRINT = "prb-simulator"
