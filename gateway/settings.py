"""Gateway settings: environment (WSGW_*, nested with __), a TOML file, then defaults.

One `Settings` object validates itself at start; sections mirror the parts of the gateway.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

if TYPE_CHECKING:
    from gateway.hub.nats import JetStreamConfig

#: A Host header name: a DNS name or an IPv4 address, or an IPv6 address in brackets.
HOST_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{0,252}|\[[0-9a-f:.]+\]", re.IGNORECASE)
#: A browser origin (RFC 6454 section 6.2): scheme, host and an optional port, no path.
ORIGIN = re.compile(r"https?://([a-z0-9.-]+|\[[0-9a-f:.]+\])(:[0-9]{1,5})?", re.IGNORECASE)
#: A ring reader's wait policy as the settings spell it (dataplane.ring.WaitPolicy.parse).
WAIT_POLICY = re.compile(r"futex|busy|(spin|adaptive)(:[0-9]+(\.[0-9]+)?)?")
#: Listen addresses that mean "every interface": no Host names them.
WILDCARD_ADDRESSES = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 (names them, binds none)


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


LatencyProfile = Literal["economical", "low-latency"]


@dataclass(frozen=True)
class LatencyProfileSpec:
    """What a latency profile sets; a knob the operator set explicitly keeps its value."""

    #: engine.poll_mode: adaptive backs off to sleep when idle, busy spins (a whole core).
    poll_mode: Literal["adaptive", "busy"]
    #: engine.cpu when none is given: "isolated" pins to an isolated CPU if there is one.
    cpu: Literal["isolated"] | None
    #: engine.budget_us: how often an idle engine's Python side runs at least. Every event
    #: (a frame, a timer of the stack or the loop, a command, a write) ends the C poll at
    #: once, so the budget is a safety net, and at 2 ms it was half the idle engine's CPU.
    budget_us: int
    #: hub.reader_wait: the wait policy the ring's header recommends to readers.
    reader_wait: str


LATENCY_PROFILES: dict[str, LatencyProfileSpec] = {
    # Idle costs little: the engine naps up to sleep_max_us between polls (a frame on the
    # port's socket, where the PMD has one, ends the nap), readers sleep on the futex.
    "economical": LatencyProfileSpec(
        poll_mode="adaptive", cpu=None, budget_us=20_000, reader_wait="futex"
    ),
    # Nobody sleeps: the engine spins on its (isolated) CPU, readers spin on theirs. The
    # adaptive knobs (sleep_max_us, the spin after a send) then no longer apply.
    "low-latency": LatencyProfileSpec(
        poll_mode="busy", cpu="isolated", budget_us=2000, reader_wait="busy"
    ),
}


class EngineSettings(BaseModel):
    """The dataplane engine thread and its C fast path (see dataplane/engine.py)."""

    cpu: int | Literal["isolated"] | None = Field(
        default=None,
        description="pin the engine thread to this CPU (ideally isolated); 'isolated': the "
        "first CPU the kernel isolates (isolcpus), not pinned when there is none; default: "
        "the latency profile's",
    )
    sched_fifo_priority: int | None = Field(
        default=None, ge=1, le=99, description="run the engine thread SCHED_FIFO at this priority"
    )
    mode: Literal["loop", "thread"] = Field(
        default="loop",
        description=(
            "loop: the engine runs an event loop on its thread and the port's dpdk sessions"
            " run there (stack, WebSocket and session on one thread, no hand-off per batch);"
            " thread: the engine polls on its thread, sessions run on the runtime's loop"
        ),
    )
    poll_mode: Literal["adaptive", "busy"] = Field(
        default="adaptive",
        description="adaptive: back off to sleep when idle; busy: spin (a whole core); "
        "default: the latency profile's",
    )
    sleep_max_us: int = Field(default=1000, ge=1, le=100_000, description="back-off ceiling")
    slice_us: int = Field(
        default=100,
        ge=0,
        le=100_000,
        description="the engine thread's scheduler slice (EEVDF, Linux 6.12+; the kernel "
        "clamps it to 100-100000): a short one lets a frame's wake-up preempt the task on the "
        "CPU instead of queueing behind it; 0: the kernel's; not used under SCHED_FIFO",
    )
    burst: int = Field(default=32, ge=1, le=64, description="frames per RX burst")
    ack_policy: Literal["delayed", "every_second", "immediate"] = Field(
        default="every_second",
        description="fast-path ACKs: every_second acknowledges every second segment whatever "
        "its size (a feed's small messages too), the delayed-ACK timer only for an odd one; "
        "delayed: every second full-sized segment, else after delayed_ack_ms, which stalled a "
        "sender whose congestion window fell to a few segments (after its tail-loss probes, "
        "BBR's PROBE_RTT) for delayed_ack_ms at a time (issue #16); immediate: once per RX "
        "burst",
    )
    delayed_ack_ms: float = Field(default=40.0, ge=0, le=500)
    fast_path: bool = Field(default=True, description="off: every segment through Python")
    verify_checksums: bool = True
    budget_us: int = Field(
        default=2000,
        ge=10,
        le=1_000_000,
        description="longest C poll before Python runs (any event ends it sooner); default: "
        "the latency profile's (economical 20000, low-latency 2000)",
    )
    feed_path: Literal["python", "c"] = Field(
        default="c",
        description=(
            "c: data frames of subscribed topics go from the flow's bytes to the message ring"
            " inside the engine's poll (no Python per message or burst); plain ws:// dpdk"
            " sessions without compression or sequence_check. python: the session's read loop"
        ),
    )


class JetStreamSettings(BaseModel):
    """The JetStream stream the NATS sink keeps over its subjects (WSGW_HUB__NATS__JETSTREAM__*)."""

    stream: str = Field(default="WSGW", description="the stream's name")
    max_age_s: float = Field(default=0.0, description="seconds a message is kept; 0: no limit")
    max_bytes: int = Field(default=-1, description="bytes the stream keeps; -1: no limit")
    max_msgs: int = Field(default=-1, description="messages the stream keeps; -1: no limit")
    storage: Literal["file", "memory"] = "file"
    replicas: int = Field(default=1, description="copies in a JetStream cluster (1-5)")
    duplicate_window_s: float = Field(
        default=120.0,
        description="seconds within which a message id (Nats-Msg-Id) seen before is dropped",
    )
    msg_ids: bool = Field(
        default=True,
        description="a Nats-Msg-Id per message (session + exchange id, else run + ring "
        "sequence) so a message published again (failover, restart) is stored once",
    )
    ack_window: int = Field(
        default=4096,
        description="messages out without JetStream's ack at most (the sink stops reading "
        "the ring while it is full); 0: core NATS publishes, nothing resent",
    )
    ack_timeout_s: float = Field(
        default=2.0, description="an unacknowledged message is sent again (same id) after this"
    )
    retry_for_s: float = Field(
        default=60.0,
        description="how long a message is sent again before it is dropped and counted "
        '(wsgw_nats_dropped_total{reason="unacked"})',
    )

    @model_validator(mode="after")
    def _check_limits(self) -> JetStreamSettings:
        self.config()  # the sink's own rules, at start, with the setting's name
        return self

    def config(self) -> JetStreamConfig:
        """The sink's JetStreamConfig (gateway.hub.nats): the same fields."""
        from gateway.hub.nats import JetStreamConfig

        try:
            return JetStreamConfig(**self.model_dump())
        except ValueError as exc:
            raise ValueError(f"hub.nats.jetstream: {exc}".replace("JetStream: ", "")) from None


class NatsSettings(BaseModel):
    servers: list[str] = Field(default_factory=lambda: ["nats://127.0.0.1:4222"])
    subject_prefix: str = "wsgw"
    headers: bool = Field(
        default=False,
        description="Wsgw-Seq and Wsgw-Recv-Ts headers on every message (and Wsgw-Gen, the "
        "session's lease generation, on a fleet node)",
    )
    jetstream: JetStreamSettings | None = Field(
        default=None, description="absent: core NATS only, nothing stored"
    )


class HubSettings(BaseModel):
    """The fan-out hub: the shared-memory ring every local consumer reads, and NATS."""

    gateway: str = Field(
        default="wsgw",
        pattern=r"^[A-Za-z0-9_.-]{1,40}$",
        description="ring /dev/shm/wsgw-<gateway>-messages",
    )
    ring: bool = Field(
        default=True,
        description="false: a private ring (memfd), which processes on this host cannot attach",
    )
    ring_capacity: int = Field(
        default=1 << 26, ge=1 << 12, le=1 << 40, description="bytes, a power of two"
    )
    handoff_limit: int = Field(
        default=262_144,
        ge=1024,
        le=1 << 24,
        description="messages a consumer loop or the NATS sink may be behind the ring's "
        "writer before it skips ahead (its consumers get a gap with the count)",
    )
    reader_wait: str | None = Field(
        default=None,
        description="the wait policy the ring recommends to its readers (those opened with "
        "wait 'auto'): futex, spin[:us], adaptive[:us] or busy; default: the latency "
        "profile's",
    )
    nats: NatsSettings | None = Field(default=None, description="absent: no NATS sink")

    @field_validator("reader_wait")
    @classmethod
    def _check_reader_wait(cls, value: str | None) -> str | None:
        if value is not None and not WAIT_POLICY.fullmatch(value):
            raise ValueError(
                f"hub.reader_wait must be futex, spin[:us], adaptive[:us] or busy, not {value!r}"
            )
        return value


class LabSettings(BaseModel):
    name: str = Field(default="wsgw", pattern=r"^[a-z][a-z0-9]{0,9}$")
    subnet_index: int | None = Field(default=None, ge=1, le=254)


class FleetSettings(BaseModel):
    """This gateway as a node of a fleet on one PostgreSQL database (gateway.fleet)."""

    enabled: bool = Field(
        default=False, description="join the fleet: run only the sessions this node leases"
    )
    node: str = Field(
        default_factory=lambda: socket.gethostname()[:63] or "wsgw",
        pattern=r"^[A-Za-z0-9_.-]{1,63}$",
        description="this node's name in the fleet (unique); default: the host name",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="what this node offers (dpdk=true, venue=...): sessions whose placement "
        "rule these labels match may run here",
    )
    lease_s: float = Field(
        default=3.0,
        ge=0.3,
        le=3600,
        description="lease time: a dead node's sessions move within it (plus a tick)",
    )
    api_url: str | None = Field(
        default=None, description="how other nodes and operators reach this node's API"
    )

    @property
    def tick_s(self) -> float:
        """How often the node heartbeats, renews and places: a third of the lease."""
        return self.lease_s / 3


class BooksSettings(BaseModel):
    """Local order books (gateway.books.manager): where REST book snapshots come from."""

    snapshot_urls: dict[str, str] = Field(
        default_factory=lambda: {
            "binance": "https://api.binance.com",
            "binance_futures": "https://fapi.binance.com",
            "bitstamp": "https://www.bitstamp.net",
        },
        description="venue -> base URL of its REST book snapshot (binance: <base>/api/v3/"
        "depth, binance_futures: <base>/fapi/v1/depth (binance's base when left out), "
        "bitstamp: <base>/api/v2/order_book/<pair>/); point it at a simulator",
    )
    snapshot_limit: int = Field(default=1000, ge=5, le=5000, description="binance's limit")
    snapshot_timeout_s: float = Field(default=5.0, gt=0, le=60)
    # Periodic book snapshots of every session (PUT /v1/books/{session}/snapshots sets one
    # session's, which the running gateway keeps in memory only): null, none.
    periodic_interval_ms: int | None = Field(default=None, ge=100, le=3_600_000)
    periodic_depth: int | None = Field(default=None, ge=1, le=5000)
    c_path: bool = Field(
        default=True,
        description="books take their deltas in C (book.c) for the venues of gateway.books.book."
        "C_VENUES (all six); "
        "false: the Python path for every message",
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="WSGW_",
        env_nested_delimiter="__",
        toml_file=os.environ.get("WSGW_CONFIG", "wsgw.toml"),
        extra="forbid",
    )

    latency_profile: LatencyProfile = Field(
        default="economical",
        description="economical: the engine backs off to sleep when idle and ring readers "
        "sleep on a futex (no idle CPU); low-latency: the engine busy-polls on its isolated "
        "CPU and readers that follow the gateway (wait 'auto') spin, a core each. Knobs set "
        "explicitly (engine.poll_mode, engine.cpu, engine.budget_us, hub.reader_wait) keep "
        "their values",
    )
    dpdk: DpdkSettings = Field(default_factory=DpdkSettings)
    port: PortSettings = Field(default_factory=PortSettings)
    lab: LabSettings = Field(default_factory=LabSettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    hub: HubSettings = Field(default_factory=HubSettings)
    state_dir: Path = Path("/var/lib/wsgw")
    # These sections are defined below: the lambdas look them up when a default is made.
    api: ApiSettings = Field(default_factory=lambda: ApiSettings())  # noqa: PLW0108
    db: DbSettings = Field(default_factory=lambda: DbSettings())  # noqa: PLW0108
    auth: AuthSettings = Field(default_factory=lambda: AuthSettings())  # noqa: PLW0108
    host: HostSettings = Field(default_factory=lambda: HostSettings())  # noqa: PLW0108
    fleet: FleetSettings = Field(default_factory=FleetSettings)
    books: BooksSettings = Field(default_factory=BooksSettings)

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

    @model_validator(mode="after")
    def _apply_latency_profile(self) -> Settings:
        """Fill in the profile's choices for the knobs nobody set explicitly (copies: an
        EngineSettings the caller passed in stays as it was)."""
        profile = LATENCY_PROFILES[self.latency_profile]
        given = self.engine.model_fields_set
        engine = {
            name: value
            for name, value in (
                ("poll_mode", profile.poll_mode),
                ("cpu", profile.cpu),
                ("budget_us", profile.budget_us),
            )
            if name not in given and getattr(self.engine, name) != value
        }
        if engine:
            self.engine = self.engine.model_copy(update=engine)
        if self.hub.reader_wait is None:
            self.hub = self.hub.model_copy(update={"reader_wait": profile.reader_wait})
        return self

    @model_validator(mode="after")
    def _check_fleet_database(self) -> Settings:
        """A fleet shares one PostgreSQL database; SQLite (the default) serves one gateway."""
        url = self.db.url or ""
        if self.fleet.enabled and not url.startswith("postgresql"):
            raise ValueError(
                "fleet.enabled needs PostgreSQL: set db.url to a postgresql+psycopg:// URL "
                f"every node of the fleet shares (now: {url.split(':', 1)[0] or 'SQLite'}); "
                "SQLite serves one gateway"
            )
        return self


class ApiSettings(BaseModel):
    """The REST control plane: where it listens, how it pages, what it tells consumers."""

    host: str = Field(default="127.0.0.1", description="address uvicorn binds to")
    port: int = Field(default=8080, ge=1, le=65535)
    cors_origins: list[str] = Field(
        default_factory=list, description="browser origins allowed to call the API (CORS)"
    )
    cors_allow_credentials: bool = False
    page_limit_default: int = Field(default=50, ge=1, le=10_000)
    page_limit_max: int = Field(default=500, ge=1, le=10_000)
    json_logs: bool = Field(default=False, description="one JSON object per log line")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    shutdown_timeout_s: float = Field(default=10.0, gt=0, le=300)
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host header names served besides localhost, 127.0.0.1, [::1] and the "
        "listen address (DNS rebinding protection): names, '*.example.com', or '*' for any",
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="browser origins (scheme://host[:port]) that may change state or open "
        "/v1/stream besides the API's own origin (and cors_origins); '*' for any",
    )
    max_body_bytes: int = Field(
        default=1 << 20,
        ge=1024,
        le=1 << 30,
        description="largest request body; a longer one is refused (413) before it is read",
    )
    prometheus_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$",
        description="a Prometheus that scrapes this gateway (http://host:9090): /v1/history "
        "asks it for any time range; unset or unreachable: the gateway's in-memory hour",
    )
    prometheus_selector: str = Field(
        default="",
        pattern=r"^[^{}]*$",
        description="label matchers of this gateway's series in that Prometheus "
        '(job="wsgw",instance="gw1:8080"); empty: every wsgw series it has',
    )
    stream_sink: bool = Field(
        default=True,
        description="/v1/stream frames of plain streams are sent by the thread that writes "
        "the ring record, in C (gateway.hub.sink); false: by the hub's router in Python. "
        "WSGW_STREAM_SINK=0 also turns it off",
    )
    stream_sink_max: int = Field(
        default=8,
        ge=0,
        le=1024,
        description="most /v1/stream streams of a ring the sink serves at once (first armed, "
        "first served; the others stay on the router): the writer (the engine's thread) "
        "pays about 12 us per served stream per record. 0: the router serves every stream",
    )

    @field_validator("allowed_hosts")
    @classmethod
    def _check_hosts(cls, hosts: list[str]) -> list[str]:
        checked = []
        for given in hosts:
            host = given
            with contextlib.suppress(ValueError):  # a bare IPv6 address: Host brackets it
                host = f"[{ipaddress.IPv6Address(given)}]"
            name = host.removeprefix("*.") if host != "*" else "x"
            if not HOST_NAME.fullmatch(name):
                raise ValueError(
                    f"api.allowed_hosts entry {given!r} is not a host name, an IP address, "
                    "'*.example.com' or '*' (no scheme, port or path)"
                )
            checked.append(host.lower())
        return checked

    @field_validator("allowed_origins")
    @classmethod
    def _check_origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            if origin != "*" and not ORIGIN.fullmatch(origin):
                raise ValueError(
                    f"api.allowed_origins entry {origin!r} is not an origin: "
                    "scheme://host[:port] (http or https, no path), or '*'"
                )
        return [o.lower() for o in origins]

    def trusted_hosts(self) -> list[str]:
        """Every Host name the API answers: the loopback names (a rebinding page cannot
        send them), the listen address unless it is a wildcard, and allowed_hosts."""
        names = ["localhost", "127.0.0.1", "[::1]"]
        listen = self.host.strip("[]")
        if listen not in WILDCARD_ADDRESSES:
            names.append(f"[{listen}]" if ":" in listen else listen)
        return list(dict.fromkeys([*names, *self.allowed_hosts]))

    @model_validator(mode="after")
    def _check(self) -> ApiSettings:
        if self.page_limit_default > self.page_limit_max:
            raise ValueError("api.page_limit_default must not exceed api.page_limit_max")
        if "*" in self.cors_origins and self.cors_allow_credentials:
            raise ValueError(
                "api.cors_origins ['*'] with cors_allow_credentials would let any web page "
                "use a logged-in browser's credentials: list the origins instead"
            )
        return self


class DbSettings(BaseModel):
    """Where the control plane keeps its state (see gateway/store/migrations/)."""

    url: str | None = Field(
        default=None,
        description="SQLAlchemy URL, e.g. postgresql+psycopg://user:pw@host/wsgw; "
        "default: SQLite file state_dir/wsgw.db",
    )
    echo: bool = False
    upgrade_on_start: bool = Field(
        default=True, description="run the Alembic migrations when the service starts"
    )


class AuthSettings(BaseModel):
    """Bearer API tokens; 'none' is a localhost-only mode for a developer's machine."""

    mode: Literal["token", "none"] = Field(
        default="token",
        description="'none' turns authentication off; allowed only with a loopback api.host",
    )
    public_metrics: bool = Field(
        default=True, description="serve /metrics without a token (for Prometheus scrapes)"
    )
    last_used_resolution_s: float = Field(
        default=60.0, ge=0, description="how often a token's last_used time is written"
    )
    token_cache_s: float = Field(
        default=1.0,
        ge=0,
        le=60,
        description="a verified token is trusted this long without a database read (0: read "
        "every time); a revocation made elsewhere (`wsgw token revoke`, another gateway) takes "
        "effect within it, one through this gateway's API at once",
    )
    failure_limit: int = Field(
        default=10,
        ge=1,
        le=100_000,
        description="failed authentications a client address may make per failure_window_s "
        "before it gets 429 (a token bucket: the allowance refills evenly over the window)",
    )
    failure_window_s: float = Field(default=60.0, gt=0, le=86_400)


class HostSettings(BaseModel):
    """Where host facts are read and changed; tests point these at a built tree."""

    sys_root: Path = Path("/sys")
    proc_root: Path = Path("/proc")
    hugetlbfs_mount: Path = Field(
        default=Path("/dev/hugepages"), description="where hugetlbfs is mounted when missing"
    )
    pmd_dirs: list[str] = Field(
        default_factory=lambda: [
            "/usr/lib/x86_64-linux-gnu/dpdk/pmds-*",
            "/usr/lib/aarch64-linux-gnu/dpdk/pmds-*",
            "/usr/local/lib/dpdk/pmds-*",
            "/usr/local/lib64/dpdk/pmds-*",
            "/usr/local/lib/x86_64-linux-gnu/dpdk/pmds-*",
        ],
        description="folders (globs) of DPDK PMD libraries, read for their PCI id tables",
    )
    allow_changes: bool = Field(
        default=True, description="allow the API to set hugepages and bind/unbind NICs"
    )


# The sections above are defined after `Settings`, which names them: resolve them now.
Settings.model_rebuild()
