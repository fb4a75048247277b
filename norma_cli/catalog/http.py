"""Sending an ``http`` custom tool's rendered request with the WebFetch client.

Everything WebFetch guarantees applies: the SSRF guard at connect time (``[web] allow_hosts``
exempts a host), no proxy from the environment, a byte cap, redirects followed only to the same
host (a redirect elsewhere is reported, not followed), traffic recorded when there is a store.
The body template renders to JSON (each ``{{param}}`` is JSON-encoded), sent as
``application/json``.
"""

from __future__ import annotations

import json

from norma_cli.core.contract import CallContext, ToolOutput
from norma_cli.core.record import replace
from norma_cli.errors import ConfigError, NormaError


def send(
    tool: str,
    method: str,
    url: str,
    headers: dict[str, str],
    body: str | None,
    *,
    timeout: float,
    ctx: CallContext,
) -> ToolOutput:
    from norma_cli.net.client import WebClient, WebError, WebSettings
    from norma_cli.tools.web import (
        check_unambiguous,
        render,
        same_host,
        session_config,
        traffic_recorder,
    )

    try:
        payload = json.loads(body) if body is not None else None
    except ValueError as exc:
        return ToolOutput.error(f"{tool}: the rendered body is not JSON ({exc})")
    try:
        settings = WebSettings.from_config(session_config(ctx))
        settings = replace(settings, timeout=min(settings.timeout, timeout))
        check_unambiguous(url)
        client = WebClient(settings, record=traffic_recorder(ctx, tool))
        fetched = client.request(method, url, headers=headers, json_body=payload, follow=same_host)
    except (WebError, ConfigError) as exc:
        return ToolOutput.error(f"{tool} {method} {url}: {exc}", url=url)
    except NormaError as exc:  # the SSRF guard's BlockedAddress, among others
        return ToolOutput.error(f"{tool} {method} {url}: {exc}", url=url, blocked=True)
    if fetched.redirect_to is not None:
        return ToolOutput.error(
            f"{tool} {method} {url}: redirected to another host ({fetched.redirect_to}); "
            "not followed",
            url=url,
            redirect_to=fetched.redirect_to,
        )
    return render(url, fetched)
