# shellcheck shell=bash
# Prepare this machine for olake-cli: Java 17+, the PostgreSQL server binaries and the
# project virtual environment (.venv, with the package installed editable plus test extras).
#
#   source scripts/bootstrap.sh   # also exports OLAKE_PG_BIN (and JAVA_HOME when needed)
#   bash scripts/bootstrap.sh     # just installs
#
# As root, missing system packages are installed with apt-get; otherwise the script prints
# the exact command to run and fails. Idempotent, and quiet on success apart from a few
# progress lines on stderr. Environment knobs: OLAKE_PYTHON (interpreter used to create
# .venv, default python3), OLAKE_PG_BIN (PostgreSQL bin dir to use instead of searching).

_olake_log() { printf 'bootstrap: %s\n' "$*" >&2; }

# Major version of the java binary $1 (e.g. 17), or nothing if it cannot be run.
_olake_java_major() {
    local version
    version=$("$1" -version 2>&1 | sed -n 's/.* version "\([^"]*\)".*/\1/p' | head -n 1)
    [[ -n "$version" ]] || return 1
    if [[ "$version" == 1.* ]]; then version=${version#1.}; fi
    printf '%s\n' "${version%%[!0-9]*}"
}

# Path of a java >= 17: $JAVA_HOME/bin/java, java on PATH, then /usr/lib/jvm/*/bin/java.
_olake_find_java() {
    local candidate major
    for candidate in ${JAVA_HOME:+"$JAVA_HOME/bin/java"} "$(command -v java 2>/dev/null)" \
                     /usr/lib/jvm/*/bin/java; do
        [[ -n "$candidate" && -x "$candidate" ]] || continue
        major=$(_olake_java_major "$candidate") || continue
        if [[ -n "$major" ]] && (( major >= 17 )); then
            printf '%s\n' "$candidate"
            return 0
        fi
    done
    return 1
}

# Newest directory holding initdb: $OLAKE_PG_BIN, /usr/lib/postgresql/*/bin, then PATH.
_olake_find_pg_bin() {
    local dir found=""
    if [[ -n "${OLAKE_PG_BIN:-}" && -x "$OLAKE_PG_BIN/initdb" ]]; then
        printf '%s\n' "$OLAKE_PG_BIN"
        return 0
    fi
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5n); do
        [[ -x "$dir/initdb" ]] && found=$dir
    done
    if [[ -z "$found" ]] && command -v initdb >/dev/null 2>&1; then
        found=$(dirname "$(command -v initdb)")
    fi
    [[ -n "$found" ]] && printf '%s\n' "$found"
}

# A python interpreter >= 3.11: $OLAKE_PYTHON or python3, then python3.13 .. python3.11.
_olake_find_python() {
    local candidate
    for candidate in "${OLAKE_PYTHON:-python3}" python3.13 python3.12 python3.11; do
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

# What this machine lacks, one per line: java, postgresql, python3, python3-venv (and kcat, a second,
# independent Kafka client, when OLAKE_WITH_TEST_TOOLS=1: scripts/test.sh sets it).
_olake_missing_packages() {
    local python
    _olake_find_java >/dev/null || echo java
    if [[ "${OLAKE_WITH_TEST_TOOLS:-}" == 1 ]]; then command -v kcat >/dev/null 2>&1 || echo kcat; fi
    _olake_find_pg_bin >/dev/null || echo postgresql
    if python=$(_olake_find_python); then
        "$python" -c 'import ensurepip, venv' 2>/dev/null || echo python3-venv
    elif ! command -v "${OLAKE_PYTHON:-python3}" >/dev/null 2>&1; then
        printf '%s\n' python3 python3-venv
    fi
}

# The JRE package: openjdk-17-jre-headless, or the default JRE where 17 is not packaged.
_olake_java_package() {
    local pkg
    for pkg in openjdk-17-jre-headless default-jre-headless; do
        if apt-cache policy "$pkg" 2>/dev/null | grep -q 'Candidate: [^(]'; then
            echo "$pkg"
            return 0
        fi
    done
    echo openjdk-17-jre-headless
}

# Install what is missing with apt-get (root), or say exactly what to install (non-root).
_olake_system_packages() {
    local -a missing
    local log
    mapfile -t missing < <(_olake_missing_packages)
    (( ${#missing[@]} == 0 )) && return 0
    missing=("${missing[@]/#java/openjdk-17-jre-headless}")
    if [[ $(id -u) -ne 0 ]]; then
        _olake_log "missing system packages; run: sudo apt-get install -y ${missing[*]}"
        return 1
    fi
    command -v apt-get >/dev/null 2>&1 || { _olake_log "missing ${missing[*]} and no apt-get"; return 1; }
    log=$(mktemp /tmp/olake-apt.XXXXXX)
    _olake_log "apt-get update (missing: ${missing[*]})"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >"$log" 2>&1 </dev/null
    missing=("${missing[@]/#openjdk-17-jre-headless/$(_olake_java_package)}")
    _olake_log "apt-get install ${missing[*]}"
    mkdir -p /usr/share/man/man1  # slim images lack it and the JRE post-install step needs it
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            -o Dpkg::Options::=--force-confold "${missing[@]}" >>"$log" 2>&1 </dev/null; then
        tail -n 30 "$log" >&2
        _olake_log "apt-get install failed (full log: $log)"
        return 1
    fi
    rm -f "$log"
}

# Point JAVA_HOME at a java >= 17 when the java PySpark would pick is missing or older.
_olake_setup_java() {
    local java_bin
    if ! java_bin=$(_olake_find_java); then
        _olake_log "no Java 17+ runtime found after installation"
        return 1
    fi
    java_bin=$(readlink -f "$java_bin")
    if [[ -n "${JAVA_HOME:-}" && "$(readlink -f "$JAVA_HOME/bin/java" 2>/dev/null)" == "$java_bin" ]]; then
        return 0
    fi
    if [[ -z "${JAVA_HOME:-}" && "$(readlink -f "$(command -v java 2>/dev/null)" 2>/dev/null)" == "$java_bin" ]]; then
        return 0
    fi
    JAVA_HOME=$(dirname "$(dirname "$java_bin")")
    export JAVA_HOME
    _olake_log "JAVA_HOME=$JAVA_HOME"
}

# Create .venv (if absent or broken) and pip install -e '.[test]' unless the stamp is current.
_olake_setup_venv() {
    local root=$1 python log
    local venv="$root/.venv" stamp="$root/.venv/.installed-stamp"
    if ! python=$(_olake_find_python); then
        _olake_log "Python 3.11+ is required; ${OLAKE_PYTHON:-python3} is $("${OLAKE_PYTHON:-python3}" -V 2>&1)"
        return 1
    fi
    if ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
        _olake_log "creating $venv with $("$python" -V 2>&1)"
        "$python" -m venv --clear "$venv" || return 1
    fi
    if [[ -f "$stamp" && "$stamp" -nt "$root/pyproject.toml" ]]; then
        return 0
    fi
    _olake_log "installing Python packages into $venv (pip install -e '.[test]')"
    log=$(mktemp /tmp/olake-pip.XXXXXX)
    if ! (cd "$root" && PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
          "$venv/bin/python" -m pip install -q -e '.[test]') >"$log" 2>&1 </dev/null; then
        tail -n 30 "$log" >&2
        _olake_log "pip install failed (full log: $log)"
        return 1
    fi
    rm -f "$log"
    touch "$stamp"
}

_olake_bootstrap() {
    local root pg_bin
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || return 1
    _olake_system_packages || return 1
    _olake_setup_java || return 1
    if ! pg_bin=$(_olake_find_pg_bin); then
        _olake_log "PostgreSQL server binaries (initdb) not found after installation"
        return 1
    fi
    OLAKE_PG_BIN=$pg_bin
    export OLAKE_PG_BIN
    _olake_setup_venv "$root" || return 1
    # Spark's driver starts about 2 s faster from a class-data-sharing archive (built once, ~15 s;
    # olake_cli/engine/archive_build.py). Without one, runs work the same, only slower to start.
    "$root/.venv/bin/python" -m olake_cli.engine.archive_build </dev/null 2>/dev/null \
        || _olake_log "no Spark class archive (runs start about 2 s slower)"
    _olake_log "ready: $root/.venv, PostgreSQL binaries in $OLAKE_PG_BIN"
}

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
    _olake_bootstrap
    return $?
fi
set -uo pipefail
_olake_bootstrap
exit $?
