"""A background event loop for async tools, so the executor itself stays synchronous.

Async tools (MCP clients, async plugin tools) keep their connections on this one loop; the
executor submits coroutines and waits with a timeout.
"""

from __future__ import annotations

import threading
from collections.abc import Coroutine
from typing import Any

_lock = threading.Lock()
_loop: Any = None


def loop() -> Any:
    global _loop
    with _lock:
        if _loop is None:
            import asyncio

            new = asyncio.new_event_loop()
            threading.Thread(target=new.run_forever, name="norma-async", daemon=True).start()
            _loop = new
        return _loop


def run(coro: Coroutine[Any, Any, Any], timeout: float | None) -> Any:
    """Run ``coro`` on the background loop; on timeout cancel it and raise TimeoutError."""
    import asyncio

    future = asyncio.run_coroutine_threadsafe(coro, loop())
    try:
        return future.result(timeout)
    except TimeoutError:
        future.cancel()
        raise
