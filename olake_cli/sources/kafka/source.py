"""The Kafka source: check, discover, and the read session and change capture of a run (see ``records``
for what a message becomes, ``positions`` for what the state keeps)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from olake_cli.core.catalog import CatalogStream
from olake_cli.sources.kafka.connection import KafkaSourceSettings, cluster_topics, open_consumer, selected_topics
from olake_cli.sources.kafka.discover import discover_catalog, olake_streams
from olake_cli.sources.kafka.session import KafkaReadSession


class KafkaSource:
    """The ``kafka`` source connector (see ``core.contracts.Source``)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.settings = KafkaSourceSettings.from_config(config)

    def check(self) -> str:
        """Reach the brokers, find the topics and say which olake wrote (see ``core.contracts.Source.check``)."""
        settings = self.settings
        with open_consumer(settings) as (consumer, errors):
            found = cluster_topics(consumer, settings, errors)
        topics = selected_topics(settings, found)
        olake = olake_streams(settings, found)
        own = sum(topic in olake for topic in topics)
        return (f"connected to {settings.where()}; {len(topics)} topic(s) to read: {own} written by olake "
                f"(streams with their original schema), {len(topics) - own} read as message streams"
                + (f": {', '.join(topics)}" if topics else ""))

    def discover(self) -> dict[str, Any]:
        """The catalog of every topic the config names."""
        return discover_catalog(self.settings)

    def open_session(self, streams: list[CatalogStream], log: Callable[[str], None]) -> KafkaReadSession:
        """A session without chunks (see ``session``)."""
        return KafkaReadSession(streams, log)

    def change_capture(self, streams: list[CatalogStream], log: Callable[[str], None]):
        """The topics' messages for the run's streams."""
        from olake_cli.sources.kafka.capture import KafkaChangeCapture

        return KafkaChangeCapture(self.settings, streams, log)
