"""Choosing and building the model provider of a run.

``[providers.NAME]`` tables name endpoints (``kind``, ``base_url``, ``model``, ``api_key_env``,
``headers``, ``timeout``, ``max_tokens``, ``stream``, ``max_retries``); ``--provider`` picks
one (default: ``[agent] provider``, else the only one configured) and ``--model`` overrides
its model. Kinds: ``openai`` and ``anthropic`` built in, more from plugins through
``register_providers(register)`` (a plugin kind of the same name replaces a built-in one).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING, Any

from norma_cli.agent.providers.base import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    ModelReply,
    ModelRequest,
    Provider,
    ProviderError,
    ProviderSettings,
    ToolSpec,
    Usage,
)
from norma_cli.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from norma_cli.config import Config
    from norma_cli.plugins import PluginHost
    from norma_cli.store.sqlite import Store

BUILTIN_KINDS = {
    "openai": "norma_cli.agent.providers.openai:OpenAIProvider",
    "anthropic": "norma_cli.agent.providers.anthropic:AnthropicProvider",
}
KIND_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# A plugin's factory: (settings) -> a Provider (an object with ``complete(request, on_delta)``).
ProviderFactory = Callable[[ProviderSettings], Any]

__all__ = [
    "ModelReply",
    "ModelRequest",
    "Provider",
    "ProviderError",
    "ProviderSettings",
    "ToolSpec",
    "Usage",
    "build",
    "plugin_kinds",
    "select",
]


def plugin_kinds(plugins: PluginHost) -> dict[str, tuple[ProviderFactory, str]]:
    """Kinds registered by plugins: kind -> (factory, plugin)."""
    found: dict[str, tuple[ProviderFactory, str]] = {}
    if not plugins.has("register_providers"):
        return found

    def make(plugin: str) -> Callable[..., Any]:
        def register(kind: str, factory: ProviderFactory) -> None:
            if not isinstance(kind, str) or not KIND_RE.match(kind) or not callable(factory):
                raise ConfigError(
                    f"plugin {plugin!r}: register_providers expects register(kind, factory)"
                )
            found[kind] = (factory, plugin)

        return register

    plugins.call_registrations("register_providers", make)
    return found


def _where(config: Config, name: str, key: str | None = None) -> str:
    for layer in reversed(config.layers):
        if name in (layer.effective.get("providers") or {}):
            return layer.source_of(f"providers.{name}" + (f".{key}" if key else ""))
    return f"[providers.{name}]"


def select(config: Config, name: str | None = None, model: str | None = None) -> ProviderSettings:
    """The provider settings of this run (``--provider`` / ``--model`` applied)."""
    table: dict[str, Any] = config.data.get("providers") or {}
    if name is None:
        name = config.get("agent", "provider")
    if name is None:
        if not table:
            raise ConfigError(
                "no model provider configured: add a [providers.NAME] table "
                '(kind = "openai" or "anthropic", base_url, model, api_key_env); see config.example.toml'
            )
        if len(table) > 1:
            raise UsageError(
                f"several providers are configured ({', '.join(sorted(table))}): "
                "choose one with --provider NAME or [agent] provider"
            )
        name = next(iter(table))
    entry = table.get(name)
    if entry is None:
        known = ", ".join(sorted(table)) or "none configured"
        raise UsageError(f"unknown provider {name!r} (providers: {known})")
    chosen = model or entry.get("model")
    if not chosen:
        raise ConfigError(
            f"{_where(config, name)}: providers.{name}.model is not set (set it, or pass --model)"
        )
    return ProviderSettings(
        name=name,
        kind=entry["kind"],
        model=chosen,
        base_url=entry.get("base_url", ""),
        api_key_env=entry.get("api_key_env"),
        headers=dict(entry.get("headers") or {}),
        timeout=float(entry.get("timeout", DEFAULT_TIMEOUT)),
        max_tokens=entry.get("max_tokens"),
        stream=bool(entry.get("stream", True)),
        max_retries=int(entry.get("max_retries", DEFAULT_MAX_RETRIES)),
    )


def build(settings: ProviderSettings, config: Config, plugins: PluginHost, *,
          store: Store | None = None, session_id: str | None = None) -> Provider:  # fmt: skip
    """A ready provider. A missing API key or an unknown kind is a config error (exit 2)."""
    registered = plugin_kinds(plugins)
    if settings.kind in registered:
        factory, plugin = registered[settings.kind]
        try:
            provider = factory(settings)
        except Exception as exc:
            raise ConfigError(
                f"plugin {plugin!r} failed to build provider {settings.name!r} "
                f"(kind {settings.kind!r}): {type(exc).__name__}: {exc}"
            ) from None
        if not callable(getattr(provider, "complete", None)):
            raise ConfigError(
                f"plugin {plugin!r}: kind {settings.kind!r} built an object without complete()"
            )
        if not getattr(provider, "name", ""):
            provider.name = settings.name
        if not getattr(provider, "model", ""):
            provider.model = settings.model
        return provider
    target = BUILTIN_KINDS.get(settings.kind)
    if target is None:
        known = ", ".join(sorted({*BUILTIN_KINDS, *registered}))
        raise ConfigError(
            f"{_where(config, settings.name, 'kind')}: unknown provider kind {settings.kind!r} (known: {known})"
        )
    if settings.api_key_env and not settings.api_key():
        raise ConfigError(
            f"{_where(config, settings.name, 'api_key_env')}: environment variable {settings.api_key_env} "
            f"(providers.{settings.name}.api_key_env) is not set"
        )
    module, cls = target.split(":")
    built: Provider = getattr(import_module(module), cls)(
        settings, store=store, session_id=session_id
    )
    return built
