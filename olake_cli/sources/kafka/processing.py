"""The processing topic (``processing_topic``): while a run follows, one message per stream each time the
destination has committed the stream further, saying how far it applied the stream's topic.

Key: the stream's ``namespace.name``; value (JSON): ``{"stream": {"namespace", "name"}, "topic",
"offsets": {partition: next offset}, "op_id": <the checkpoint's operation id, 32 hex digits>,
"committed_at": <ISO 8601 time the run saw the commit>}``. Written after the destination's commit, by
an idempotent producer: a consumer of the topic learns what is applied, never something that is not;
after a kill the last commits may go unannounced until the next one (the state is the truth).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import orjson

from olake_cli.core.calendar_text import timestamp_text
from olake_cli.core.errors import SourceError
from olake_cli.core.opid import OpId
from olake_cli.core.state import State
from olake_cli.shared.kafka.admin import TopicSpec, admin_client, ensure_topics
from olake_cli.shared.kafka.client import ErrorLog, KafkaSettings, failure, require_client, stream_label
from olake_cli.sources.kafka.positions import cursor_of


class ProcessingTopic:
    """Announces the committed positions of the run's streams (thread-safe: the follow runtime's relay
    thread calls :meth:`publish`)."""

    def __init__(self, settings: KafkaSettings, topic: str, streams: list[tuple]) -> None:
        self.settings, self.topic, self.streams = settings, topic, set(streams)
        self.errors = ErrorLog()
        self._producer: Any = None
        self._sent: dict[tuple, OpId] = {}
        self._lock = threading.Lock()

    def prepare(self) -> None:
        """Create the topic when it is missing (one partition)."""
        ensure_topics(self.settings, admin_client(self.settings, self.errors), self.errors,
                      [TopicSpec(self.topic)], create=True)

    def publish(self, committed: State) -> None:
        """One message per stream whose committed position moved since the last call, then flushed."""
        with self._lock:
            at, sent = timestamp_text(time.time_ns() // 1000, True), {}
            for ss in committed.streams:
                held = cursor_of(ss) if ss.key in self.streams else None
                if held is None or self._sent.get(ss.key) == held[1]:
                    continue
                cursor, sent[ss.key] = held
                value = {"stream": {"namespace": ss.stream_namespace, "name": ss.stream_name}, "topic": cursor.topic,
                         "offsets": {str(p): o for p, o in sorted(cursor.offsets.items())},
                         "op_id": held[1].to_key(), "committed_at": at}
                self._producer_now().produce(self.topic, key=stream_label(*ss.key).encode(), value=orjson.dumps(value))
            if sent and self._producer.flush(self.settings.timeout_s) > 0:
                raise failure(TimeoutError("messages not delivered"), self.settings,
                              f"writing to processing topic '{self.topic}'", self.errors, SourceError)
            self._sent.update(sent)

    def _producer_now(self) -> Any:
        if self._producer is None:
            self._producer = require_client().Producer(self.settings.client_config({"enable.idempotence": True},
                                                                                   self.errors))
        return self._producer
