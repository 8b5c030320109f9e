"""SIGTERM in a prb command: `Terminated` raised in the main thread, so every `finally` runs
(the run lock, the Prefect server) and prb exits 143 with one line.

`Terminated` is a SystemExit because asyncio re-raises only SystemExit and KeyboardInterrupt
from its callbacks and transports: any other exception a signal raises there (Prefect's
TerminationSignal among them) is caught, logged as "Fatal read error on socket transport" and
turned into a dropped connection, which the model client retries, and the build went on to
exit 0. Prefect puts its own SIGTERM handler in for a flow's duration, so the build flow puts
prb's back (`inside_flow`) when a prb command installed it.

Once a signal has landed, the process only unwinds: a coroutine the signal cut off between its
creation and its await (aiohttp's `ClientSession._request`) warns "was never awaited" when it is
collected, a second line beside prb's one. Both handlers silence warnings first.

A signal that lands inside a finalizer (aiohttp's `ClientResponse.__del__`) raises where Python
swallows it ("Exception ignored in …", a traceback, and the build went on): `sys.unraisablehook`
sees it and delivers the signal again, once the finalizer is done."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import warnings

from pipeline.errors import Terminated

_installed = False


def terminate(*_) -> None:
    warnings.simplefilter("ignore")
    raise Terminated


def interrupt(*_) -> None:
    warnings.simplefilter("ignore")
    raise KeyboardInterrupt


def _swallowed(unraisable) -> None:
    """An exception Python could not raise (one in a `__del__`): a stop is delivered again,
    anything else is reported as Python would."""
    stops = {Terminated: signal.SIGTERM, KeyboardInterrupt: signal.SIGINT}
    sig = next((s for kind, s in stops.items() if issubclass(unraisable.exc_type, kind)), None)
    if sig is None:
        sys.__unraisablehook__(unraisable)
        return
    # from another thread, a moment later: raised here, it would land in this hook and be
    # swallowed again (it is tried again if it is)
    again = threading.Timer(0.01, os.kill, (os.getpid(), sig))
    again.daemon = True
    again.start()


def exit_on_sigterm() -> None:
    global _installed
    sys.unraisablehook = _swallowed
    signal.signal(signal.SIGTERM, terminate)
    # and Ctrl-C / kill -INT, even when started from a script that ignores SIGINT (`cmd &`)
    signal.signal(signal.SIGINT, interrupt)
    _installed = True


def inside_flow() -> None:
    """In the build flow: prb's SIGTERM handler again, where a prb command installed it (a
    flow run by Prefect's own runner keeps Prefect's, and its cancellation)."""
    if _installed:
        with contextlib.suppress(ValueError):  # not the main thread: nothing to put back
            signal.signal(signal.SIGTERM, terminate)
