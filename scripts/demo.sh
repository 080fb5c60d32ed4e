#!/usr/bin/env bash
# One command from a fresh clone: install what is missing, then copy a demo PostgreSQL into Parquet.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bootstrap.sh
exec .venv/bin/python scripts/demo.py "$@"
