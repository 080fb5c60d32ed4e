#!/usr/bin/env bash
# Install what the tests need (scripts/bootstrap.sh), then run the test suite.
#
#   bash scripts/test.sh                          # the whole suite (tests/)
#   bash scripts/test.sh tests/test_x.py -k name  # extra arguments go to pytest
#
# Exits with pytest's own code: 5 ("no tests collected") stays a failure.
set -uo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root" || exit 1

# shellcheck source=scripts/bootstrap.sh
export OLAKE_WITH_TEST_TOOLS=1  # the test-only system tools too (kcat)
source "$repo_root/scripts/bootstrap.sh" || exit 1

# Run all of tests/ unless an argument already names a test path (file, dir or node id).
select_all=1
for arg in "$@"; do
    if [[ "$arg" != -* && -e "${arg%%::*}" ]]; then
        select_all=0
    fi
done
if (( select_all )); then
    set -- tests "$@"
fi

# Two pytest workers by default (OLAKE_TEST_WORKERS=0 runs in one process): a test mostly waits on its
# olake processes, Spark and the servers, so two files at a time keep both cores busy. Each worker
# starts its own servers; --dist loadfile keeps a file's tests together, in order, on one worker.
workers=${OLAKE_TEST_WORKERS:-2}
parallel=()
if [[ "$workers" =~ ^[0-9]+$ ]] && (( workers > 1 )); then
    parallel=(-n "$workers" --dist loadfile)
fi

exec "$repo_root/.venv/bin/python" -m pytest -q -p no:cacheprovider --durations=15 "${parallel[@]}" "$@"
