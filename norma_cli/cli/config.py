"""``norma config show | path | validate | trust``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


@click.group("config")
def config() -> None:
    """Show, locate, validate and trust configuration files."""


def _cwd(app: Any) -> Path:
    return (app.options.get("cwd") or Path.cwd()).resolve()


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def show(app: Any, *, as_json: bool) -> None:
    """The merged configuration and the layers it came from (with their trust)."""
    import json

    from norma_cli.config import load

    cfg = load(_cwd(app), app.options.get("config"))
    layers: list[dict[str, Any]] = [
        {
            "kind": layer.kind,
            "path": layer.label,
            "trusted": layer.trusted,
            "ignored": layer.ignored,
        }
        for layer in cfg.layers
    ]
    if as_json:
        click.echo(json.dumps({"layers": layers, "config": cfg.data}, indent=2))
        return
    if not layers:
        click.echo("# no config files; built-in defaults apply")
    for layer in layers:
        state = "trusted" if layer["trusted"] else "UNTRUSTED (only deny/ask/stricter mode apply)"
        click.echo(f"# {layer['kind']}: {layer['path']} [{state}]")
        for item in layer["ignored"]:
            click.echo(f"#   ignored: {item}")
    click.echo(json.dumps(cfg.data, indent=2))
    for warning in cfg.warnings:
        click.echo(f"norma: warning: {warning}", err=True)


@config.command("path")
@click.pass_obj
def path(app: Any) -> None:
    """Where norma looks for configuration and keeps its data."""
    import os

    from norma_cli.config import data_dir, find_project_config, system_config_path, user_config_path

    project = find_project_config(_cwd(app))
    rows = [
        ("system", system_config_path()),
        ("user", user_config_path()),
        ("project", project or _cwd(app) / ".norma" / "config.toml"),
    ]
    if os.environ.get("NORMA_CONFIG"):
        rows.append(("NORMA_CONFIG", Path(os.environ["NORMA_CONFIG"])))
    if app.options.get("config"):
        rows.append(("--config", app.options["config"]))
    for kind, p in rows:
        click.echo(f"{kind:<13} {p}{_state(p)}")
    click.echo(f"{'data':<13} {data_dir()}")


def _state(p: Path) -> str:
    """ "" for a regular file, else what stands at ``p`` instead."""
    import os
    import stat

    try:
        mode = os.stat(p).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "  (absent)"
    except OSError as exc:
        return f"  (cannot check: {exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return ""
    return "  (a directory)" if stat.S_ISDIR(mode) else "  (not a regular file)"


@config.command("validate")
@click.argument("paths", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.pass_obj
def validate(app: Any, *, paths: tuple[Path, ...]) -> None:
    """Check config files (or the current layers): TOML, keys, types, rules and rule examples."""
    from norma_cli.runtime import Options, Runtime

    targets: list[Path | None] = list(paths) or [app.options.get("config")]
    for target in targets:
        rt = Runtime.build(Options(cwd=app.options.get("cwd"), config=target, with_store=False))
        rt.close()
        label = str(target) if target else "configuration"
        click.echo(f"{label}: ok ({len(rt.rules.all())} rules, {len(rt.registry)} tools)")


@config.command("trust")
@click.argument(
    "file", required=False, type=click.Path(dir_okay=False, exists=True, path_type=Path)
)
@click.pass_obj
def trust(app: Any, *, file: Path | None) -> None:
    """Trust the project config (``.norma/config.toml``) as it is now.

    Until trusted, a project config may only add deny/ask rules and a stricter mode. Any edit
    to the file revokes the trust.
    """
    from norma_cli.config import find_project_config, read_layer, record_trust
    from norma_cli.errors import ConfigError, UsageError
    from norma_cli.runtime import Options, Runtime

    target = file or find_project_config(_cwd(app))
    if target is None:
        raise UsageError("no .norma/config.toml found from the working directory upward")
    # Trust is given to exactly the bytes checked here, and only when they are a config that
    # loads: `norma config validate` on them (TOML, keys, types, rules and their examples).
    layer = read_layer("project", target)
    rt = Runtime.build(Options(cwd=app.options.get("cwd"), config=target, with_store=False))
    rt.close()
    checked = [x for x in rt.config.layers if x.kind == "explicit" and x.path == target]
    if not checked or checked[-1].digest != layer.digest:
        raise ConfigError(f"{target}: the file changed while it was being checked; run again")
    record_trust(target, layer.digest)
    click.echo(f"trusted {target.resolve()} (sha256 {layer.digest})")
