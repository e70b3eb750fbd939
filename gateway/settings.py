"""Gateway settings: environment (WSGW_*, nested with __), a TOML file, then defaults.

One `Settings` object validates itself at start; sections mirror the parts of the gateway.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


class DpdkSettings(BaseModel):
    """How the DPDK environment (EAL) is started: one per process."""

    lcores: str | None = Field(
        default=None,
        description="EAL --lcores value; default maps lcore 0 onto every CPU this process may use",
    )
    hugepages: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="'on' needs free hugepages for memory_mb, 'off' runs --no-huge, 'auto' "
        "uses hugepages when enough are free",
    )
    memory_mb: int = Field(default=256, ge=64, le=1 << 20)
    file_prefix: str | None = Field(
        default=None,
        description="EAL --file-prefix; default --in-memory, so several gateways coexist",
    )
    pci_allow: list[str] = Field(
        default_factory=list, description="PCI devices DPDK may use (EAL -a); none: --no-pci"
    )
    driver_paths: list[str] = Field(
        default_factory=list, description="extra PMD .so files or folders to load (EAL -d)"
    )
    log_level: str = "warning"
    extra_args: list[str] = Field(default_factory=list)


class PortSettings(BaseModel):
    """Sizing of one DPDK port."""

    n_mbufs: int = Field(default=8191, ge=512, le=1 << 22)
    mbuf_cache: int = Field(default=256, ge=0, le=512)
    rx_desc: int = Field(default=1024, ge=64, le=16384)
    tx_desc: int = Field(default=1024, ge=64, le=16384)
    mtu: int = Field(default=1500, ge=576, le=9600)
    burst: int = Field(default=32, ge=1, le=64)
    promiscuous: bool = False


class LabSettings(BaseModel):
    name: str = Field(default="wsgw", pattern=r"^[a-z][a-z0-9]{0,9}$")
    subnet_index: int | None = Field(default=None, ge=1, le=254)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="WSGW_",
        env_nested_delimiter="__",
        toml_file=os.environ.get("WSGW_CONFIG", "wsgw.toml"),
        extra="forbid",
    )

    dpdk: DpdkSettings = Field(default_factory=DpdkSettings)
    port: PortSettings = Field(default_factory=PortSettings)
    lab: LabSettings = Field(default_factory=LabSettings)
    state_dir: Path = Path("/var/lib/wsgw")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))
