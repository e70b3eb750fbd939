"""What every `wsgw` command shares: how it fails, how it reads the settings."""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import typer

from gateway.settings import Settings

LabName = Annotated[
    str, typer.Option("--name", "-n", help="lab name (1-10 lower-case letters/digits)")
]


def fail(message: str, code: int = 1) -> NoReturn:
    """Say what went wrong on stderr and exit with `code`."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def load_settings(**overrides: Any) -> Settings:
    """WSGW_* variables and wsgw.toml, with the options given (the truthy ones) on top."""
    try:
        return Settings(**{k: v for k, v in overrides.items() if v})
    except ValueError as exc:
        fail(f"invalid settings: {exc}", 2)
