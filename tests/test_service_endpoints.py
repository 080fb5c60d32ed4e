"""``/healthz`` and ``/readyz`` beside ``/metrics`` (``pipeline/service_endpoints.py``), served for real on a
free port: healthy while the process runs; ready only while the run follows and the destination commits
what it is handed within the bound; every metric labelled with the pipeline and the destination."""

from __future__ import annotations

import socket
import time

from olake_cli.core.opid import OpId
from olake_cli.core.state import State
from olake_cli.pipeline.follow_status import FollowStatus, metrics
from tests.support.follow import http_get


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_health_readiness_and_labels():
    port, lines = _free_port(), []
    served = metrics()
    served.identify("/srv/olake/state.json", "postgres /srv/olake/dst.json")
    served.serve(port, lines.append)
    assert http_get(port, "/healthz") == (200, "ok\n")
    status, reason = http_get(port, "/readyz")
    assert status == 503 and "change phase" in reason  # loading: not ready yet

    committed_at = OpId(200, 0)
    follow = FollowStatus(None, lines.append, None, lambda state: committed_at if state.streams else None, 0.5)
    follow._ready_bound_s = 0.2  # the real bound is at least a minute
    assert http_get(port, "/readyz") == (200, "ready\n")
    follow.checkpointed(OpId(100, 0), time.time())
    follow.counted("public.t", {"u": 3})
    time.sleep(0.4)
    status, reason = http_get(port, "/readyz")
    assert status == 503 and "has not committed a checkpoint" in reason
    follow.committed(State(streams=[object()]))  # a state covering the checkpoint
    assert http_get(port, "/readyz") == (200, "ready\n")
    body = http_get(port, "/metrics")[1]
    assert ('olake_changes_total{destination="postgres /srv/olake/dst.json",op="u",pipeline="/srv/olake/state.json",'
            'stream="public.t"} 3.0') in body
    assert 'olake_commits_total{destination="postgres /srv/olake/dst.json",pipeline="/srv/olake/state.json"}' in body
    follow.close()
    status, reason = http_get(port, "/readyz")
    assert status == 503 and "not following" in reason
    assert http_get(port, "/healthz")[0] == 200
