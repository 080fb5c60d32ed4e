"""Every bad input through the real ``olake`` command: one TRACE, one stderr line, non-zero exit.

Bad configs, catalogs, state files and stdin lines must fail before Spark starts, name the
field / file / line at fault, never print the password, and never touch a state file's bytes
(except states committed by lines before the bad one, which are legitimately merged).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import orjson
import psycopg
import pytest

from tests.support.cli import messages, read_into_write, run_olake, trace_errors, write_json

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "postgres" / "demo.sql"
DEMO_DB = "demo_bad_input"

EARLIER_ORDERS_STATE = {"sync_type": "incremental", "stream_name": "orders", "stream_namespace": "shop",
                        "stream_state": {"cursor_field": "2024-03-01 00:00:00+00"}}
EARLIER_STATE = {"level": "global", "version": "v1", "streams": [EARLIER_ORDERS_STATE]}
SETTINGS_STATE = {"sync_type": "incremental", "stream_name": "app_settings", "stream_namespace": "public",
                  "stream_state": {"cursor_field": "2024-05-01 00:00:00+00"}}


def assert_one_error(result: subprocess.CompletedProcess, failure_type: str, *needles: str,
                     secrets: tuple[str, ...] = ()) -> str:
    """Check the error contract of a failed run; returns the ``olake: error:`` line.

    Non-zero exit, stdout only JSON messages with exactly one TRACE error of ``failure_type``,
    stderr exactly one line (the TRACE's message) containing every needle, no secret anywhere.
    """
    stdout, stderr = result.stdout.decode(), result.stderr.decode()
    assert result.returncode != 0, stderr
    traces = [m for m in messages(result.stdout) if m["type"] == "TRACE"]
    assert len(traces) == 1, stdout
    assert traces[0]["trace"]["type"] == "ERROR"
    error = traces[0]["trace"]["error"]
    assert error["failure_type"] == failure_type, error
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0] == f"olake: error: {error['message']}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    for secret in secrets:
        assert secret not in stdout and secret not in stderr, "a secret was printed"
    return lines[0]


@pytest.fixture(scope="module")
def demo_db(pg_cluster) -> str:
    """A database loaded with fixtures/postgres/demo.sql."""
    from tests.support.pgcluster import create_database

    create_database(pg_cluster, DEMO_DB)
    with psycopg.connect(pg_cluster.dsn(DEMO_DB), autocommit=True) as conn:
        conn.execute(FIXTURE.read_text())
    return DEMO_DB


@pytest.fixture(scope="module")
def discovered(pg_cluster, demo_db, tmp_path_factory) -> dict:
    """The bare catalog ``olake discover`` prints for the demo database (schemas shop and public)."""
    folder = tmp_path_factory.mktemp("discovered")
    src = write_json(folder / "src.json", pg_cluster.source_config(demo_db, schemas=["shop", "public"]))
    result = run_olake("discover", "--config", src)
    assert result.returncode == 0, result.stderr.decode()
    return messages(result.stdout)[0]["catalog"]


def settings_catalog(discovered: dict) -> dict:
    """A catalog holding only public.app_settings (as discovered)."""
    return {"streams": [copy.deepcopy(s) for s in discovered["streams"] if s["name"] == "app_settings"]}


# ---------------------------------------------------------------- config files

def source_base(pg_cluster) -> dict:
    return pg_cluster.source_config(DEMO_DB, schemas=["public"])


def dest_base(tmp_path: Path) -> dict:
    return {"type": "parquet", "path": str(tmp_path / "out")}


def bad_config(case: str, base: dict, path: Path) -> tuple[str, list[str]]:
    """Write config file ``path`` broken as ``case`` says; returns (path, needles for the error line)."""
    is_source = base["type"] == "postgres"
    required, typed = ("host", "port") if is_source else ("path", "rows_per_file")
    if case == "missing_field":
        write_json(path, {k: v for k, v in base.items() if k != required})
        return str(path), ["missing required field", f"'{required}'"]
    if case == "mistyped_field":
        write_json(path, {**base, typed: "abc"})
        return str(path), [f"field '{typed}'", "'abc'", "integer"]
    if case == "unknown_field":
        write_json(path, {**base, "colour": "red"})
        return str(path), ["unknown field 'colour'"]
    if case == "unknown_type":
        write_json(path, {**base, "type": "mysql"})
        return str(path), ["unknown type 'mysql'"]
    if case == "type_missing":
        write_json(path, {k: v for k, v in base.items() if k != "type"})
        return str(path), ["missing required field 'type'"]
    if case == "file_missing":
        return str(path), ["does not exist"]
    if case == "not_json":
        text = json.dumps(base, indent=2).splitlines()
        text.insert(2, '  "port": ,')  # a syntax error on line 3
        path.write_text("\n".join(text))
        return str(path), ["not valid JSON", "line 3"]
    if case == "json_array":
        write_json(path, [base])
        return str(path), ["must contain a JSON object", "array"]
    raise AssertionError(case)


CONFIG_CASES = ["missing_field", "mistyped_field", "unknown_field", "unknown_type", "type_missing",
                "file_missing", "not_json", "json_array"]


@pytest.mark.parametrize("command", ["check", "discover", "read", "write"])
@pytest.mark.parametrize("case", CONFIG_CASES)
def test_bad_config(pg_cluster, demo_db, discovered, tmp_path, command, case):
    base = dest_base(tmp_path) if command == "write" else source_base(pg_cluster)
    config, needles = bad_config(case, base, tmp_path / "config.json")
    args = [command, "--config", config]
    if command == "read":
        args += ["--catalog", write_json(tmp_path / "cat.json", settings_catalog(discovered))]
    result = run_olake(*args, stdin=b"")
    assert_one_error(result, "config_error", config, *needles, secrets=(pg_cluster.password,))
    assert not (tmp_path / "out").exists(), "nothing may be written for a bad config"


def test_source_config_given_to_write(pg_cluster, tmp_path):
    config = write_json(tmp_path / "src.json", {"type": "mongodb", "uri": "mongodb://127.0.0.1:1", "database": "d"})
    result = run_olake("write", "--config", config, stdin=b"")
    assert_one_error(result, "config_error", config, "'mongodb' is a source", "destination config is expected")


def test_postgres_source_config_given_to_write_names_the_source_only_field(pg_cluster, tmp_path):
    """``postgres`` names a destination too: a source config fails as a destination config, naming the
    field only sources have, before anything connects."""
    config = write_json(tmp_path / "src.json", source_base(pg_cluster))
    result = run_olake("write", "--config", config, stdin=b"")
    assert_one_error(result, "config_error", config, "unknown field 'schemas'", "did you mean 'schema'",
                     secrets=(pg_cluster.password,))


def test_mistyped_password_is_not_echoed(pg_cluster, tmp_path):
    config = write_json(tmp_path / "src.json", {**source_base(pg_cluster), "password": 987654321})
    result = run_olake("check", "--config", config)
    line = assert_one_error(result, "config_error", config, "field 'password'", "string",
                            secrets=("987654321",))
    assert "the value" in line


@pytest.mark.parametrize("destination", ["iceberg", "parquet"])
@pytest.mark.parametrize("path", ["sync", "read|write"])
def test_a_source_that_cannot_be_opened_leaves_the_destination_untouched(pg_cluster, discovered, tmp_path,
                                                                         destination, path):
    src = write_json(tmp_path / "src.json", {**source_base(pg_cluster), "password": "wrong password"})
    dst = write_json(tmp_path / "dst.json", {"type": destination, "path": str(tmp_path / "lake")})
    cat = write_json(tmp_path / "cat.json", settings_catalog(discovered))
    if path == "sync":
        result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", cat)
        assert_one_error(result, "config_error", "password authentication failed", secrets=(pg_cluster.password,))
    else:  # write --catalog could open the destination before a line arrives
        piped = read_into_write(["--config", src, "--catalog", cat], ["--config", dst, "--catalog", cat])
        assert piped.read_code != 0, piped.read_stderr
        # one error line per process: the reader's says why, the writer's points to it
        read_lines = piped.read_stderr.decode().splitlines()
        assert len(read_lines) == 1 and "password authentication failed" in read_lines[0], read_lines
        written = subprocess.CompletedProcess([], piped.write_code, piped.write_stdout, piped.write_stderr)
        line = assert_one_error(written, "config_error", secrets=(pg_cluster.password,))
        assert line == ("olake: error: the reading side failed (the reader's own error line says why); "
                        "nothing was committed"), line
        assert trace_errors(piped.write_stdout)[0]["trace"]["error"]["internal_message"] == \
            "the reader's error: " + read_lines[0][len("olake: error: "):]
    assert not (tmp_path / "lake").exists(), os.listdir(tmp_path / "lake")


# ---------------------------------------------------------------- catalogs

def test_read_unknown_stream_fails_before_any_record(pg_cluster, discovered, tmp_path):
    catalog = copy.deepcopy(discovered)
    renamed = next(s for s in catalog["streams"] if (s["namespace"], s["name"]) == ("shop", "orders"))
    renamed["name"] = "orderz"
    cat = write_json(tmp_path / "cat.json", catalog)
    state = tmp_path / "st.json"
    write_json(state, EARLIER_STATE)
    before = state.read_bytes()
    config = write_json(tmp_path / "src.json", pg_cluster.source_config(DEMO_DB, schemas=["shop", "public"]))
    result = run_olake("read", "--config", config, "--catalog", cat, "--state", str(state))
    assert_one_error(result, "config_error", "catalog", "'shop.orderz'", "does not exist",
                     secrets=(pg_cluster.password,))
    kinds = [m["type"] for m in messages(result.stdout)]
    assert "RECORD" not in kinds and "STATE" not in kinds, kinds
    assert state.read_bytes() == before


def test_read_catalog_not_json(pg_cluster, tmp_path):
    cat = tmp_path / "cat.json"
    cat.write_text('{"streams": [\n  {"name": "orders",\n')
    config = write_json(tmp_path / "src.json", source_base(pg_cluster))
    result = run_olake("read", "--config", config, "--catalog", str(cat))
    assert_one_error(result, "config_error", str(cat), "catalog file", "not valid JSON",
                     secrets=(pg_cluster.password,))


def test_write_catalog_not_json(tmp_path):
    cat = tmp_path / "cat.json"
    cat.write_text("streams: []\n")
    config = write_json(tmp_path / "dst.json", dest_base(tmp_path))
    result = run_olake("write", "--config", config, "--catalog", str(cat), stdin=b"")
    assert_one_error(result, "config_error", str(cat), "not valid JSON", "line 1")


@pytest.mark.parametrize("cursor, needles", [
    (None, ["sync_mode 'incremental' needs a cursor_field"]),
    (["no_such_column"], ["cursor_field 'no_such_column' is not a column"]),
])
def test_read_incremental_without_usable_cursor(pg_cluster, discovered, tmp_path, cursor, needles):
    catalog = settings_catalog(discovered)
    stream = catalog["streams"][0]
    stream["sync_mode"] = "incremental"
    stream["default_cursor_field"] = []
    if cursor is not None:
        stream["cursor_field"] = cursor
    cat = write_json(tmp_path / "cat.json", catalog)
    config = write_json(tmp_path / "src.json", source_base(pg_cluster))
    result = run_olake("read", "--config", config, "--catalog", cat)
    assert_one_error(result, "config_error", cat, "'public.app_settings'", *needles,
                     secrets=(pg_cluster.password,))


@pytest.mark.parametrize("command", ["read", "sync"])
@pytest.mark.parametrize("typo, needles", [
    ({"sync_mod": "cdc"}, ["unknown field 'streams[0].sync_mod'", "did you mean 'sync_mode'?"]),
    ({"sync_mode": "incremental", "cursor_fields": ["updated_at"]},
     ["unknown field 'streams[0].cursor_fields'", "did you mean 'cursor_field'?"]),
])
def test_catalog_key_typo_stops_the_run_before_anything_is_read(pg_cluster, discovered, tmp_path, command,
                                                                typo, needles):
    """A misspelt key would otherwise run the stream with the default (a full load, the default cursor)."""
    catalog = settings_catalog(discovered)
    catalog["streams"][0].update(typo)
    cat = write_json(tmp_path / "cat.json", catalog)
    config = write_json(tmp_path / "src.json", source_base(pg_cluster))
    if command == "read":
        result = run_olake("read", "--config", config, "--catalog", cat)
    else:
        dst = write_json(tmp_path / "dst.json", dest_base(tmp_path))
        result = run_olake("sync", "--source", config, "--destination", dst, "--catalog", cat,
                           "--state", str(tmp_path / "st.json"))
    assert_one_error(result, "config_error", cat, *needles, secrets=(pg_cluster.password,))
    assert not (tmp_path / "out").exists() and not (tmp_path / "st.json").exists()


# ---------------------------------------------------------------- state files

STATE_CASES = {
    "not_json": (b"not json\n", ["state file", "not valid JSON", "line 1"]),
    "wrong_schema": (b'{"level":"bogus"}', ["state file", "missing required field 'streams'"]),
    "bad_level": (b'{"level": "bogus", "version": "v1", "streams": []}', ["field 'level'", "'bogus'"]),
    "empty": (b"", ["state file", "is empty"]),
}


@pytest.mark.parametrize("command", ["read", "write"])
@pytest.mark.parametrize("case", list(STATE_CASES))
def test_bad_state_file_is_reported_and_left_alone(pg_cluster, discovered, tmp_path, command, case):
    content, needles = STATE_CASES[case]
    state = tmp_path / "st.json"
    state.write_bytes(content)
    if command == "read":
        config = write_json(tmp_path / "src.json", source_base(pg_cluster))
        cat = write_json(tmp_path / "cat.json", settings_catalog(discovered))
        result = run_olake("read", "--config", config, "--catalog", cat, "--state", str(state))
    else:
        config = write_json(tmp_path / "dst.json", dest_base(tmp_path))
        stdin = orjson.dumps({"type": "CATALOG", "catalog": settings_catalog(discovered)}) + b"\n"
        result = run_olake("write", "--config", config, "--state", str(state), stdin=stdin)
    assert_one_error(result, "config_error", str(state), *needles, secrets=(pg_cluster.password,))
    assert state.read_bytes() == content
    assert [m["type"] for m in messages(result.stdout)] == ["TRACE"]


# ---------------------------------------------------------------- write: bad stdin lines

def record_line(stream: str = "app_settings", namespace: str = "public", key: str = "k1") -> bytes:
    """One RECORD line (with newline) for public.app_settings (or another stream)."""
    data = {"setting_key": key, "setting_value": '{"on": true}', "description": None,
            "updated_at": "2024-04-01T10:00:00.000001Z"}
    return orjson.dumps({"type": "RECORD", "record": {"stream": stream, "namespace": namespace,
                                                      "data": data, "emitted_at": 1}}) + b"\n"


def catalog_line(discovered: dict) -> bytes:
    return orjson.dumps({"type": "CATALOG", "catalog": settings_catalog(discovered)}) + b"\n"


BAD_LINES = {
    "garbage": (b"not json\n", ["not valid JSON"]),
    "not_a_message": (b'{"foo":1}\n', ["'type'"]),
    "unknown_stream": (record_line(stream="nope", namespace="shop"), ["unknown stream", "'shop.nope'"]),
    "wrong_type": (record_line().replace(b'"setting_key":"k1"', b'"setting_key":7'),  # no STATE after it
                   ["stream 'public.app_settings', column 'setting_key'", "got int '7'"]),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_write_bad_line_before_any_state(discovered, tmp_path, case):
    bad, needles = BAD_LINES[case]
    state = tmp_path / "st.json"
    write_json(state, EARLIER_STATE)
    before = state.read_bytes()
    config = write_json(tmp_path / "dst.json", dest_base(tmp_path))
    stdin = catalog_line(discovered) + record_line() + bad
    result = run_olake("write", "--config", config, "--state", str(state), stdin=stdin)
    assert_one_error(result, "config_error", "stdin line 3", *needles)
    assert [m["type"] for m in messages(result.stdout)] == ["TRACE"]
    assert state.read_bytes() == before


def test_write_input_cut_inside_its_last_line(discovered, tmp_path):
    """The input ends in the middle of a line (its writer was killed while writing it): the reading side
    stopped early, and nothing after the last STATE is committed."""
    state = tmp_path / "st.json"
    write_json(state, EARLIER_STATE)
    before = state.read_bytes()
    config = write_json(tmp_path / "dst.json", dest_base(tmp_path))
    stdin = catalog_line(discovered) + record_line() + record_line(key="k2")[:40]
    result = run_olake("write", "--config", config, "--state", str(state), stdin=stdin)
    traces = [m["trace"]["error"] for m in messages(result.stdout) if m["type"] == "TRACE"]
    assert result.returncode != 0 and [t["failure_type"] for t in traces] == ["transient_error"], result.stdout
    error = result.stderr.decode().splitlines()[-1]  # after the line saying what was written
    assert error == f"olake: error: {traces[0]['message']}" and "its last line was cut" in error, error
    assert error.startswith("olake: error: the reading side stopped early") and "nothing was committed" in error
    assert state.read_bytes() == before


def test_write_record_before_any_catalog(tmp_path):
    state = tmp_path / "st.json"
    write_json(state, EARLIER_STATE)
    before = state.read_bytes()
    config = write_json(tmp_path / "dst.json", dest_base(tmp_path))
    result = run_olake("write", "--config", config, "--state", str(state), stdin=record_line())
    line = assert_one_error(result, "config_error", "stdin line 1", "RECORD before any CATALOG")
    assert "catalog" in line.lower()
    assert state.read_bytes() == before


def test_write_bad_line_after_a_state_keeps_exactly_the_committed_state(discovered, tmp_path):
    state = tmp_path / "st.json"
    write_json(state, EARLIER_STATE)
    config = write_json(tmp_path / "dst.json", dest_base(tmp_path))
    committed = {"level": "global", "version": "v1", "streams": [SETTINGS_STATE]}
    stdin = (catalog_line(discovered) + record_line() + orjson.dumps({"type": "STATE", "state": committed})
             + b"\n" + record_line(key="k2") + b"not json\n")
    result = run_olake("write", "--config", config, "--state", str(state), stdin=stdin)
    assert_one_error(result, "config_error", "stdin line 5", "not valid JSON")
    out = messages(result.stdout)
    assert [m["type"] for m in out] == ["STATE", "TRACE"]
    assert out[0]["state"] == committed
    assert json.loads(state.read_text()) == {"level": "global", "version": "v1",
                                             "streams": [SETTINGS_STATE, EARLIER_ORDERS_STATE]}


@pytest.mark.parametrize("option, value, needle", [
    ("--commit-interval", "inf", "give a number of seconds above 0 and at most 86400 (1 day)"),
    ("--commit-interval", "1e308", "give a number of seconds above 0 and at most 86400 (1 day)"),
    ("--commit-interval", "nan", "give a number of seconds above 0 and at most 86400 (1 day)"),
    ("--commit-interval", "0", "give a number of seconds above 0 and at most 86400 (1 day)"),
    ("--commit-interval", "86400.5", "give a number of seconds above 0 and at most 86400 (1 day)"),
    ("--discovery-interval", "inf", "give 0 (never) or a number of seconds up to 86400 (1 day)"),
    ("--discovery-interval", "nan", "give 0 (never) or a number of seconds up to 86400 (1 day)"),
    ("--discovery-interval", "1e308", "give 0 (never) or a number of seconds up to 86400 (1 day)"),
])
def test_an_interval_that_is_not_a_finite_number_of_seconds_up_to_a_day_is_refused(tmp_path, option, value, needle):
    """Such an interval would never come round (nothing committed until SIGTERM); refused before any file
    is read, by ``read`` and ``sync`` alike."""
    for command in (["sync", "--source", "s.json", "--destination", "d.json"], ["read", "--config", "s.json"]):
        line = assert_one_error(run_olake(*command, "--catalog", "c.json", "--follow", option, value),
                                "config_error", f"{option} ", needle)
        assert "does not exist" not in line


@pytest.mark.parametrize("value", ["inf", "abc"])
def test_a_status_interval_in_the_environment_that_is_not_a_finite_number_of_seconds_is_refused(
        pg_cluster, pg_db, tmp_path, value):
    """``OLAKE_STATUS_EVERY_S`` (the following run's status line) holds to what ``--commit-interval`` does:
    one line naming the variable, not a run whose status never comes or an internal error."""
    from tests.support.cdc import discover_catalog, make_accounts

    make_accounts(pg_cluster.dsn(pg_db), "acct", 5)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=f"slot_{pg_db}", publication=f"pub_{pg_db}", create_slot_and_publication=True))
    discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"}, only={"acct"})
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    try:
        result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                           "--follow", env={"OLAKE_STATUS_EVERY_S": value}, timeout=120)
        assert_one_error(result, "config_error", f"OLAKE_STATUS_EVERY_S={value}: give a number of seconds above 0 "
                                                 "and at most 86400 (1 day)")
    finally:
        with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                         (f"slot_{pg_db}",))


@pytest.mark.parametrize("kind, field, value", [("destination", "tombstone_hours", "NaN"),
                                                ("destination", "tombstone_hours", "Infinity"),
                                                ("source", "safe_zone_hours", "NaN")])
def test_a_config_number_that_json_does_not_have_is_refused(tmp_path, kind, field, value):
    """Python's JSON reader takes NaN and Infinity, which no schema bound (minimum, maximum) refuses."""
    base = {"type": "postgres", "host": "h", "port": 5432, "database": "d", "username": "u", "password": "p"} \
        if kind == "destination" else {"type": "dynamodb", "region": "us-east-1"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(base)[:-1] + f', "{field}": {value}}}')
    assert_one_error(run_olake("check", f"--{kind}", str(path)), "config_error", str(path),
                     f"{value} is not a JSON number")
