"""Calls per second through `norma mcp serve` against the same MCP server called directly.

Upstream server: mcp-server-time (PyPI), tool get_current_time. One MCP client session each
(the `mcp` package's client over stdio), sequential calls, measured after warm-up calls (the
first call through norma also starts the upstream server and checks its pins). Through norma
every call passes the whole pipeline: lookup and gate, schema, permission rule, executor in a
worker thread, the upstream call, output cap, and a trace row committed to SQLite.

Run: .venv/bin/python bench/bench_mcp.py [--append]  (BENCH_CALLS, default 300)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

CALLS = int(os.environ.get("BENCH_CALLS", "300"))
WARMUP = 20
RESULTS = Path(__file__).with_name("RESULTS.md")


async def rate(params: StdioServerParameters, tool: str) -> tuple[float, list[float]]:
    args = {"timezone": "Europe/Paris"}
    async with Client(params, mode="legacy") as client:
        for _ in range(WARMUP):
            result = await client.call_tool(tool, args)
            assert not result.is_error, result
        times: list[float] = []
        start = time.perf_counter()
        for _ in range(CALLS):
            t0 = time.perf_counter()
            await client.call_tool(tool, args)
            times.append(time.perf_counter() - t0)
        return CALLS / (time.perf_counter() - start), times


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="norma-bench-mcp-"))
    config = work / "norma.toml"
    config.write_text(
        '[permissions]\nallow = ["mcp__time__get_current_time"]\n'
        f'[mcp.servers.time]\ncommand = "{sys.executable}"\n'
        'args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]\n'
    )
    env = {**os.environ, "NORMA_HOME": str(work / "home"), "NORMA_LOAD_PLUGINS": ""}
    direct = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"], env=env
    )
    gateway = StdioServerParameters(
        command=sys.executable,
        args=["-m", "norma_cli", "--config", str(config), "mcp", "serve"],
        env=env,
        cwd=str(work),
    )

    async def both() -> tuple[Any, Any]:
        return await rate(direct, "get_current_time"), await rate(
            gateway, "mcp__time__get_current_time"
        )

    (d_rate, d_times), (n_rate, n_times) = anyio.run(both)
    d_med, n_med = sorted(d_times)[len(d_times) // 2], sorted(n_times)[len(n_times) // 2]
    load = os.getloadavg()[0]
    lines = [
        f"{CALLS} sequential get_current_time calls over stdio (python {sys.version.split()[0]}, "
        f"load average {load:.1f} on {os.cpu_count()} cpus)",
        f"  direct to mcp-server-time : {d_rate:7.1f} calls/s  (median {d_med * 1000:6.2f} ms)",
        f"  through norma mcp serve   : {n_rate:7.1f} calls/s  (median {n_med * 1000:6.2f} ms)",
        f"  ratio direct/norma        : {d_rate / n_rate:5.2f}x   (norma adds {(n_med - d_med) * 1000:.2f} ms per call)",
    ]
    print("\n".join(lines))
    if "--append" in sys.argv:
        stamp = time.strftime("%Y-%m-%d %H:%M")
        with RESULTS.open("a", encoding="utf-8") as f:
            f.write(
                f"\n## bench_mcp.py ({stamp})\n\n"
                + "\n".join(f"    {line}" for line in lines)
                + "\n"
            )


if __name__ == "__main__":
    main()
