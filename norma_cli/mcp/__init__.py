"""MCP: norma as a client of configured MCP servers (with definition pinning) and as a policy
gateway (``norma mcp serve``).

Nothing here is imported unless ``[mcp.servers]`` is configured or ``norma mcp`` runs; the
``mcp`` package itself (about a second to import) loads only when a server is connected.

* ``config``   — ``[mcp]`` / ``[mcp.servers.NAME]`` as typed specs; the child environment
* ``stdio``    — a stdio transport whose child sees only the allowlisted environment
* ``client``   — one live connection per server on norma's background event loop
* ``pin``      — canonical definitions, their digests, and the pin table
* ``registry`` — MCP tools in norma's registry, connected lazily, gated by their pins
* ``serve``    — the assembled, guarded tool set served over MCP
"""


class ServerUnavailable(Exception):
    """An MCP server could not be started, reached, initialised or listed (the message says
    which server and why). Its tools are unavailable; nothing else is affected."""
