#!/usr/bin/env bash
# verify-build.sh: replay deploy/Dockerfile's build stage on this machine and check what the
# runtime stage takes from it. No container engine runs here, so this is how the image's
# install steps are proven: the same commands, in the same order, from the same files.
#
# usage: deploy/verify-build.sh [--keep] [--no-serve]
#   --keep      keep the temporary folder (its path is printed) for inspection
#   --no-serve  skip starting `wsgw serve` from the replayed virtualenv
#
# In a temporary folder WORK, WORK/root stands for the build stage's filesystem:
#  1. apt: every package that an apt-get line of either stage names is known to apt here, and
#     the build stage's packages are installed here (the shim compiles against them).
#  2. build stage, instruction by instruction: ARG and ENV (absolute paths mapped under
#     WORK/root), WORKDIR, COPY from the repository filtered by Dockerfile.dockerignore (the
#     work tree is only read), and every RUN that is not an apt-get step, run with the
#     Dockerfile's SHELL (bash -o pipefail) and a Debian image's PATH without /usr/local, so
#     `python3` is Debian's, as in the image. A failing RUN fails the script.
#  3. runtime stage: each `COPY --from=build` source exists (a virtualenv keeps its path); the
#     ENTRYPOINT resolves on the runtime PATH; the shim's shared libraries all resolve, each
#     from a package that the runtime stage installs or that one of those depends on; every
#     PMD package of the runtime stage puts its driver in the PMD folder named by the
#     io.wsgw.dpdk.pmd-dir label; `wsgw shim info` from the replayed venv reports DPDK.
#  4. serve (unless --no-serve): ENTRYPOINT + CMD from the replayed venv with the runtime
#     ENV, but on 127.0.0.1 and a free port, SQLite under WORK, no hugepages; the HEALTHCHECK
#     command must pass and /readyz answer 200; then SIGTERM (STOPSIGNAL) must stop it.
#
# Progress goes to stderr; stdout gets one JSON line: {"ok": ..., "checks": [...], ...}.
# Exit status: 0 every check passed, 1 a check failed, 2 this machine lacks a tool.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
DOCKERFILE="$HERE/Dockerfile"
DOCKERIGNORE="$HERE/Dockerfile.dockerignore"
HOST_PYTHON=/usr/bin/python3
KEEP=0
SERVE=1

for arg in "$@"; do
    case "$arg" in
        --keep) KEEP=1 ;;
        --no-serve) SERVE=0 ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "verify-build: unknown argument: $arg" >&2
            exit 2
            ;;
    esac
done

for tool in "$HOST_PYTHON" dpkg-query dpkg apt-cache ldd tar; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "verify-build: $tool is missing on this machine" >&2
        exit 2
    fi
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/wsgw-verify.XXXXXX")"
ROOT="$WORK/root"
RESULTS="$WORK/results.tsv"
BUILD_LOG="$WORK/build.log"
SERVE_LOG="$WORK/serve.log"
SERVE_PID=""
START_S=$SECONDS
mkdir -p "$ROOT"
: >"$RESULTS"

cleanup() {
    if [[ -n "$SERVE_PID" ]] && kill -0 "$SERVE_PID" 2>/dev/null; then
        kill -KILL "$SERVE_PID" 2>/dev/null || true
        wait "$SERVE_PID" 2>/dev/null || true
    fi
    if [[ "$KEEP" == 1 ]]; then
        echo "verify-build: kept $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

log() { echo "verify-build: $*" >&2; }

# record NAME OK(0|1) DETAIL: one line of the summary.
record() {
    local name="$1" ok="$2" detail="${3:-}"
    detail="${detail//$'\t'/ }"
    detail="${detail//$'\n'/ | }"
    printf '%s\t%s\t%s\n' "$name" "$ok" "$detail" >>"$RESULTS"
    if [[ "$ok" == 1 ]]; then log "ok   $name${detail:+: $detail}"; else log "FAIL $name: $detail"; fi
}

# map PATH: an absolute path of the image, as it lies under the replayed root.
map() { printf '%s%s' "$ROOT" "$1"; }

# ---------------------------------------------------------------------------------------
# Parse the Dockerfile into a plan: one instruction per line, fields separated by tabs.
PLAN="$WORK/plan.tsv"
"$HOST_PYTHON" - "$DOCKERFILE" "$DOCKERIGNORE" >"$PLAN" <<'PY'
"""Dockerfile -> plan lines: STAGE<TAB>KIND<TAB>ARGS...; no field is empty ('-' stands for
nothing: bash's read merges adjacent tabs) and none holds a tab or a newline."""
import json
import re
import shlex
import sys

dockerfile, dockerignore = sys.argv[1], sys.argv[2]


def fail(message: str) -> None:
    sys.exit(f"verify-build: {dockerfile}: {message}")


def instructions(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue  # a comment line inside a continued instruction
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        keyword, _, rest = current.strip().partition(" ")
        out.append((keyword.upper(), rest.strip()))
        current = ""
    if current:
        fail("the last instruction ends with a line continuation")
    return out


def emit(*fields: str) -> None:
    fields = tuple(field or "-" for field in fields)
    for field in fields:
        if "\t" in field or "\n" in field:
            fail(f"a field holds a tab or newline: {field!r}")
    print("\t".join(fields))


def apt_packages(command: str) -> tuple[list[str], list[str]]:
    """Packages of `apt-get install`, and the parts of the step that are not apt-get steps."""
    packages: list[str] = []
    others: list[str] = []
    for part in command.split("&&"):
        words = shlex.split(part)
        if not words or words[:2] == ["apt-get", "update"]:
            continue
        if words[:2] == ["apt-get", "install"]:
            packages += [w for w in words[2:] if not w.startswith("-")]
        elif words[:2] == ["rm", "-rf"] and all(w.startswith("/var/lib/apt/lists") for w in words[2:]):
            continue
        else:
            others.append(part.strip())
    return packages, others


stage = ""
build_stage = ""  # the first stage
for keyword, rest in instructions(open(dockerfile, encoding="utf-8").read()):
    if keyword == "FROM":
        words = rest.split()
        stage = words[2] if len(words) >= 3 and words[1].upper() == "AS" else words[0]
        build_stage = build_stage or stage
        emit(stage, "FROM", words[0])
    elif keyword in {"ARG", "ENV"}:
        if keyword == "ENV" and "=" not in rest.split()[0]:
            fail("ENV must use the KEY=VALUE form")
        for item in shlex.split(rest):
            name, sep, value = item.partition("=")
            if re.search(r"[`\"']|\$\(", value):
                fail(f"{keyword} {name}: only plain text and ${{VAR}} are replayable")
            emit(stage, keyword, name, value if sep else "")
    elif keyword == "WORKDIR":
        emit(stage, "WORKDIR", rest)
    elif keyword == "SHELL":
        emit(stage, "SHELL", json.dumps(json.loads(rest)))
    elif keyword == "COPY":
        words = shlex.split(rest)
        flags = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        source_stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), "-")
        emit(stage, "COPY", source_stage, json.dumps(paths[:-1]), paths[-1])
    elif keyword == "RUN":
        if rest.startswith("["):
            fail("RUN must use the shell form (the Dockerfile's SHELL runs it)")
        if "apt-get" in rest:
            packages, others = apt_packages(rest)
            if stage == build_stage and others:
                fail(f"a build-stage apt-get RUN also runs {others}: give it its own RUN")
            emit(stage, "APT", " ".join(packages))
        else:
            emit(stage, "RUN", rest)
    elif keyword in {"ENTRYPOINT", "CMD"}:
        emit(stage, keyword, json.dumps(json.loads(rest)))
    elif keyword == "HEALTHCHECK":
        match = re.search(r"\bCMD\s+(\[.*\])\s*$", rest)
        if not match:
            fail("HEALTHCHECK must use CMD in exec form")
        emit(stage, "HEALTHCHECK", json.dumps(json.loads(match.group(1))))
    elif keyword == "LABEL":
        for item in shlex.split(rest):
            name, _, value = item.partition("=")
            emit(stage, "LABEL", name, value)
    elif keyword == "USER":
        emit(stage, "USER", rest)

# The .dockerignore: everything left out but '!' entries; '**/x' entries dropped everywhere.
for raw in open(dockerignore, encoding="utf-8").read().splitlines():
    line = raw.strip()
    if not line or line.startswith("#") or line == "*":
        continue
    if line.startswith("!"):
        emit("-", "IGNORE_KEEP", line[1:].rstrip("/"))
    elif line.startswith("**/"):
        emit("-", "IGNORE_DROP", line[3:])
    else:
        fail(f"{dockerignore}: pattern {line!r} is not replayable (use '*', '!path' or '**/glob')")
PY

# Fields of the plan for one stage and kind.
plan() { awk -F'\t' -v s="$1" -v k="$2" '$1 == s && $2 == k' "$PLAN"; }

BUILD_STAGE="$(awk -F'\t' '$2 == "FROM" { print $1; exit }' "$PLAN")"
RUNTIME_STAGE="$(awk -F'\t' '$2 == "FROM" { s = $1 } END { print s }' "$PLAN")"
mapfile -t KEEP_PATHS < <(plan - IGNORE_KEEP | cut -f3)
mapfile -t DROP_GLOBS < <(plan - IGNORE_DROP | cut -f3)
log "build stage '$BUILD_STAGE', runtime stage '$RUNTIME_STAGE', work folder $WORK"

# ---------------------------------------------------------------------------------------
# 1. apt packages
# One apt-cache and one dpkg-query call: they are slow per package.
mapfile -t all_packages < <(awk -F'\t' '$2 == "APT" { print $3 }' "$PLAN" | tr ' ' '\n' | sed '/^$/d' | sort -u)
mapfile -t build_packages < <(plan "$BUILD_STAGE" APT | cut -f3 | tr ' ' '\n' | sed '/^$/d' | sort -u)
known="$(apt-cache policy "${all_packages[@]}" 2>/dev/null | awk '
    /^[^ ].*:$/ { name = substr($0, 1, length($0) - 1) }
    /^  Candidate:/ && $2 != "(none)" { print name }' | sort -u)"
installed="$(dpkg-query -W -f='${Package}\t${db:Status-Abbrev}\n' "${build_packages[@]}" 2>/dev/null |
    awk -F'\t' '$2 ~ /^ii/ { print $1 }' | sort -u)"
apt_missing="$(comm -23 <(printf '%s\n' "${all_packages[@]}") <(printf '%s\n' "$known") | tr '\n' ' ')"
build_not_installed="$(comm -23 <(printf '%s\n' "${build_packages[@]}") <(printf '%s\n' "$installed") | tr '\n' ' ')"
if [[ -n "${apt_missing// /}" ]]; then
    record apt-packages-known 0 "unknown to apt here (apt-get update?): $apt_missing"
else
    record apt-packages-known 1 "${#all_packages[@]} packages"
fi
if [[ -n "${build_not_installed// /}" ]]; then
    record build-packages-installed 0 "not installed here: $build_not_installed"
else
    record build-packages-installed 1 "${#build_packages[@]} packages"
fi

# ---------------------------------------------------------------------------------------
# 2. the build stage
BASE_PATH=/usr/sbin:/usr/bin:/sbin:/bin
# A clean environment: the image's, plus pip's configuration and proxies from the caller.
declare -a BUILD_ENV=(HOME="$WORK/home" PATH="$BASE_PATH" LANG=C.UTF-8)
mkdir -p "$WORK/home"
while IFS='=' read -r name _; do
    case "$name" in PIP_* | http_proxy | https_proxy | no_proxy | HTTP_PROXY | HTTPS_PROXY | NO_PROXY)
        BUILD_ENV+=("$name=${!name}") ;;
    esac
done < <(env)

# env_set NAME VALUE: set or replace NAME in BUILD_ENV.
env_set() {
    local i
    for i in "${!BUILD_ENV[@]}"; do
        if [[ "${BUILD_ENV[$i]%%=*}" == "$1" ]]; then
            BUILD_ENV[i]="$1=$2"
            return
        fi
    done
    BUILD_ENV+=("$1=$2")
}
# expand VALUE: ${VAR} and $VAR from BUILD_ENV (the parser allowed nothing else).
expand() {
    env -i "${BUILD_ENV[@]}" "$HOST_PYTHON" -c \
        'import os, sys; print(os.path.expandvars(sys.argv[1]), end="")' "$1"
}

shell_json='["/bin/sh", "-c"]'
workdir="$ROOT"
build_ok=1
step=0
while IFS=$'\t' read -r stage kind a b c; do
    [[ "$stage" == "$BUILD_STAGE" ]] || continue
    case "$kind" in
        ARG | ENV)
            if [[ "$b" == - ]]; then
                [[ "$kind" == ARG ]] && continue # no default: nothing to replay
                b=""
            fi
            value="$(expand "$b")"
            if [[ "$value" == /* && "$value" != *:* ]]; then value="$(map "$value")"; fi
            env_set "$a" "$value"
            ;;
        SHELL) shell_json="$a" ;;
        WORKDIR)
            workdir="$(map "$(expand "$a")")"
            mkdir -p "$workdir"
            ;;
        COPY)
            if [[ "$a" != - ]]; then continue; fi
            dest="$c"
            [[ "$dest" == /* ]] && dest="$(map "$dest")" || dest="$workdir/$dest"
            mapfile -t sources < <("$HOST_PYTHON" -c 'import json, sys; print(*json.loads(sys.argv[1]), sep="\n")' "$b")
            excludes=()
            for glob in "${DROP_GLOBS[@]}"; do excludes+=("--exclude=$glob"); done
            for src in "${sources[@]}"; do
                name="${src%/}"
                kept=0
                for k in "${KEEP_PATHS[@]}"; do [[ "$name" == "$k" ]] && kept=1; done
                if [[ "$kept" == 0 ]]; then
                    record "copy:$name" 0 "Dockerfile.dockerignore leaves it out of the context"
                    build_ok=0
                    continue
                fi
                if [[ -d "$REPO/$name" ]]; then
                    # COPY copies a folder's contents, not the folder itself.
                    mkdir -p "$dest"
                    tar -C "$REPO/$name" "${excludes[@]}" -cf - . | tar -C "$dest" -xf -
                elif [[ -f "$REPO/$name" ]]; then
                    mkdir -p "$dest"
                    cp "$REPO/$name" "$dest/"
                else
                    record "copy:$name" 0 "no such file in the repository"
                    build_ok=0
                fi
            done
            ;;
        RUN)
            step=$((step + 1))
            mapfile -t shell < <("$HOST_PYTHON" -c 'import json, sys; print(*json.loads(sys.argv[1]), sep="\n")' "$shell_json")
            log "RUN #$step: ${a:0:100}"
            t0=$SECONDS
            if (cd "$workdir" && env -i "${BUILD_ENV[@]}" "${shell[@]}" "$a") >>"$BUILD_LOG" 2>&1; then
                record "build-run-$step" 1 "${a:0:60}... ($((SECONDS - t0)) s)"
            else
                record "build-run-$step" 0 "failed: ${a:0:60}... last output: $(grep -v '^WARNING: Location' "$BUILD_LOG" | tail -n 5)"
                build_ok=0
                break
            fi
            ;;
    esac
done <"$PLAN"
record build-stage "$build_ok" "$step RUN steps replayed"

# ---------------------------------------------------------------------------------------
# 3. the runtime stage
declare -a RUNTIME_ENV=(HOME="$WORK/home" PATH="$BASE_PATH" LANG=C.UTF-8)
while IFS=$'\t' read -r _ kind a b _; do
    [[ "$kind" == ENV ]] || continue
    value="$(env -i "${RUNTIME_ENV[@]}" "$HOST_PYTHON" -c 'import os, sys; print(os.path.expandvars(sys.argv[1]), end="")' "$b")"
    if [[ "$value" == /* && "$value" != *:* ]]; then value="$(map "$value")"; fi
    RUNTIME_ENV+=("$a=$value")
done < <(plan "$RUNTIME_STAGE" ENV)
runtime_get() {
    local item value=""
    for item in "${RUNTIME_ENV[@]}"; do [[ "${item%%=*}" == "$1" ]] && value="${item#*=}"; done
    printf '%s' "$value"
}

copy_ok=1
copy_detail=""
while IFS=$'\t' read -r _ _ from sources_json dest; do
    [[ "$from" == "$BUILD_STAGE" ]] || continue
    while read -r src; do
        if [[ ! -e "$(map "$src")" ]]; then
            copy_ok=0
            copy_detail+="missing $src; "
        elif [[ -f "$(map "$src")/pyvenv.cfg" && "$src" != "$dest" ]]; then
            copy_ok=0
            copy_detail+="virtualenv $src copied to another path $dest (venvs do not move); "
        else
            copy_detail+="$src; "
        fi
    done < <("$HOST_PYTHON" -c 'import json, sys; print(*json.loads(sys.argv[1]), sep="\n")' "$sources_json")
done < <(plan "$RUNTIME_STAGE" COPY)
record runtime-copy-from-build "$copy_ok" "$copy_detail"

entry="$(plan "$RUNTIME_STAGE" ENTRYPOINT | cut -f3)"
entry0="$("$HOST_PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])[0])' "${entry:-[\"\"]}")"
# shellcheck disable=SC2016 # $1 is expanded by the inner bash
entry_path="$(env -i "${RUNTIME_ENV[@]}" bash -c 'command -v "$1"' _ "$entry0" || true)"
if [[ -n "$entry_path" && "$entry_path" == "$ROOT"/* ]]; then
    record runtime-entrypoint 1 "$entry0 -> ${entry_path#"$ROOT"}"
else
    record runtime-entrypoint 0 "'$entry0' is not on the runtime PATH inside the image's files (found: ${entry_path:-nothing})"
fi

venv="$(runtime_get VIRTUAL_ENV)"
shim="$(find "$venv" -name libwsgw_shim.so -path '*/dataplane/shim/*' 2>/dev/null | head -n 1 || true)"
mapfile -t runtime_packages < <(plan "$RUNTIME_STAGE" APT | cut -f3 | tr ' ' '\n' | sed '/^$/d')
# package_of PATH: the package that installs PATH (merged /usr: dpkg may know /lib or /usr/lib).
package_of() {
    local real candidate owner
    real="$(readlink -f "$1")"
    for candidate in "$1" "$real" "/usr$1" "${1#/usr}" "/usr$real" "${real#/usr}"; do
        if owner="$(dpkg -S "$candidate" 2>/dev/null)"; then
            printf '%s' "${owner%%:*}"
            return
        fi
    done
}
if [[ -z "$shim" ]]; then
    record runtime-shim-libraries 0 "no libwsgw_shim.so in the replayed venv"
else
    closure="$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
        --no-breaks --no-replaces --no-enhances "${runtime_packages[@]}" 2>/dev/null |
        grep -v '^ ' | sed 's/:.*//' | sort -u)"
    libs_ok=1
    libs_detail=""
    while read -r lib _ path _; do
        [[ "$path" == /* ]] || continue
        owner="$(package_of "$path")"
        if [[ -z "$owner" ]]; then
            libs_ok=0
            libs_detail+="$lib belongs to no package; "
        elif ! grep -qx "$owner" <<<"$closure"; then
            libs_ok=0
            libs_detail+="$lib comes from $owner, which the runtime stage does not install; "
        fi
    done < <(ldd "$shim" | grep '=>')
    if ldd "$shim" | grep -q 'not found'; then
        libs_ok=0
        libs_detail+="unresolved: $(ldd "$shim" | grep 'not found' | tr -s ' \t\n' ' ')"
    fi
    record runtime-shim-libraries "$libs_ok" "${libs_detail:-$(ldd "$shim" | grep -c '=>') libraries, all from the runtime packages}"
fi

pmd_label="$(plan "$RUNTIME_STAGE" LABEL | awk -F'\t' '$3 == "io.wsgw.dpdk.pmd-dir" { print $4 }')"
pmd_ok=1
pmd_detail=""
pmd_count=0
if [[ -z "$pmd_label" || ! -d "$pmd_label" ]]; then
    pmd_ok=0
    pmd_detail="the io.wsgw.dpdk.pmd-dir label ('$pmd_label') is not a folder here; "
fi
for pkg in "${runtime_packages[@]}"; do
    case "$pkg" in librte-net-* | librte-bus-* | librte-mempool-ring*) ;; *) continue ;; esac
    driver="$(dpkg -L "$pkg" 2>/dev/null | grep -E '/dpdk/pmds-[^/]*/[^/]*\.so\.[0-9]+\.[0-9]+$' | head -n 1 || true)"
    if [[ -z "$driver" ]]; then
        pmd_ok=0
        pmd_detail+="$pkg puts no driver in a PMD folder; "
    elif [[ ! -e "$driver" || "$(dirname "$driver")" != "$pmd_label" ]]; then
        pmd_ok=0
        pmd_detail+="$driver missing or not in $pmd_label; "
    else
        pmd_count=$((pmd_count + 1))
    fi
done
record runtime-pmds "$pmd_ok" "${pmd_detail:-$pmd_count drivers in $pmd_label}"

SHIM_INFO="{}"
if SHIM_INFO="$(env -i "${RUNTIME_ENV[@]}" wsgw shim info 2>>"$BUILD_LOG")" &&
    "$HOST_PYTHON" -c 'import json, sys; sys.exit(0 if json.loads(sys.argv[1]).get("dpdk") else 1)' "$SHIM_INFO"; then
    record shim-info-dpdk 1 "$("$HOST_PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])["dpdk_version"])' "$SHIM_INFO")"
else
    record shim-info-dpdk 0 "wsgw shim info: ${SHIM_INFO:-no output}"
    SHIM_INFO="{}"
fi
SHIM_INFO="$(tr -d '\n' <<<"$SHIM_INFO")"

# ---------------------------------------------------------------------------------------
# 4. serve: ENTRYPOINT + CMD, probed with the HEALTHCHECK command
if [[ "$SERVE" == 1 && "$build_ok" == 1 ]]; then
    port="$("$HOST_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    state="$(runtime_get WSGW_STATE_DIR)"
    mkdir -p "$state"
    # Never all interfaces in a test: the image's 0.0.0.0 becomes loopback.
    SERVE_ENV=("${RUNTIME_ENV[@]}" WSGW_API__HOST=127.0.0.1 "WSGW_API__PORT=$port"
        WSGW_DPDK__HUGEPAGES=off "WSGW_CONFIG=$WORK/absent.toml" WSGW_API__JSON_LOGS=false)
    mapfile -t argv < <("$HOST_PYTHON" -c 'import json, sys; print(*json.loads(sys.argv[1]) + json.loads(sys.argv[2]), sep="\n")' \
        "$(plan "$RUNTIME_STAGE" ENTRYPOINT | cut -f3)" "$(plan "$RUNTIME_STAGE" CMD | cut -f3)")
    mapfile -t health < <("$HOST_PYTHON" -c 'import json, sys; print(*json.loads(sys.argv[1]), sep="\n")' \
        "$(plan "$RUNTIME_STAGE" HEALTHCHECK | cut -f3)")
    log "serve: ${argv[*]} on 127.0.0.1:$port"
    (cd "$state" && exec env -i "${SERVE_ENV[@]}" "${argv[@]}") >"$SERVE_LOG" 2>&1 &
    SERVE_PID=$!
    healthy=0
    for _ in $(seq 1 60); do
        if ! kill -0 "$SERVE_PID" 2>/dev/null; then break; fi
        if env -i "${SERVE_ENV[@]}" "${health[@]}" >/dev/null 2>&1; then
            healthy=1
            break
        fi
        sleep 0.5
    done
    if [[ "$healthy" == 1 ]]; then
        record serve-healthcheck 1 "HEALTHCHECK passed against ${argv[*]}"
        ready="$(env -i "${SERVE_ENV[@]}" python3 -c '
import os, urllib.error, urllib.request
url = "http://127.0.0.1:%s/readyz" % os.environ["WSGW_API__PORT"]
try:
    print(urllib.request.urlopen(url, timeout=5).status)
except urllib.error.HTTPError as exc:
    print(exc.code, exc.read().decode()[:200])
' 2>&1 || true)"
        if [[ "$ready" == 200 ]]; then
            record serve-readyz 1 "200"
        else
            record serve-readyz 0 "/readyz: $ready"
        fi
    else
        record serve-healthcheck 0 "no healthy answer; serve log: $(tail -n 8 "$SERVE_LOG")"
    fi
    if kill -0 "$SERVE_PID" 2>/dev/null; then
        kill -TERM "$SERVE_PID"
        stopped=0
        for _ in $(seq 1 30); do
            if ! kill -0 "$SERVE_PID" 2>/dev/null; then
                stopped=1
                break
            fi
            sleep 0.5
        done
        if [[ "$stopped" == 1 ]]; then
            rc=0
            wait "$SERVE_PID" || rc=$?
            record serve-sigterm 1 "stopped, exit status $rc"
        else
            record serve-sigterm 0 "still running 15 s after SIGTERM"
        fi
    fi
    SERVE_PID=""
elif [[ "$SERVE" == 1 ]]; then
    record serve-healthcheck 0 "not tried: the build stage failed"
fi

# ---------------------------------------------------------------------------------------
"$HOST_PYTHON" - "$RESULTS" "$SHIM_INFO" "$((SECONDS - START_S))" <<'PY'
import json
import sys

checks = []
for line in open(sys.argv[1], encoding="utf-8").read().splitlines():
    name, ok, detail = line.split("\t", 2)
    checks.append({"name": name, "ok": ok == "1", "detail": detail})
summary = {
    "ok": all(c["ok"] for c in checks) and bool(checks),
    "checks": checks,
    "shim_info": json.loads(sys.argv[2]),
    "seconds": int(sys.argv[3]),
}
print(json.dumps(summary))
PY
if grep -q $'\t0\t' "$RESULTS"; then exit 1; fi
