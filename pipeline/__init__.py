"""prb: build Personalized RewardBench-style preference-pair benchmarks."""

import os

# Before Prefect is imported anywhere: nothing may leave the machine at run time, and the
# temporary local server needs more than the default 20 s to start on a slow CI machine.
for _key, _value in {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "PREFECT_LOGGING_LEVEL": "WARNING",
}.items():
    os.environ.setdefault(_key, _value)

__version__ = "0.1.0"
