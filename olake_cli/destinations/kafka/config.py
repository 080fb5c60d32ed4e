"""The Kafka destination's config: the connection (shared with the source, ``shared.kafka.client``) and
how its topics are made, what format its messages take and which pipeline it is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from olake_cli.core.locks import host_lock_path
from olake_cli.shared.kafka.admin import TopicSpec
from olake_cli.shared.kafka.client import KafkaSettings, stream_label

COMPACTED = {"cleanup.policy": "compact"}


@dataclass(frozen=True)
class DestinationSettings:
    """The validated ``kafka`` destination config, with defaults applied."""

    kafka: KafkaSettings
    partitions: int = 1
    replication_factor: int = 1
    create_topics: bool = True
    topic_config: dict[str, str] = field(default_factory=dict)
    format: str = "json"
    pipeline_id: str = "olake"

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> DestinationSettings:
        """Settings from a config dict validated against ``destination-kafka``."""
        return cls(KafkaSettings.from_config(cfg, "producer"), int(cfg.get("partitions", 1)),
                   int(cfg.get("replication_factor", 1)), bool(cfg.get("create_topics", True)),
                   dict(cfg.get("topic_config") or {}), cfg.get("format", "json"), cfg.get("pipeline_id", "olake"))

    @property
    def transactional_id(self) -> str:
        """The producer's transactional id: one per pipeline and topic prefix, so a new run fences the last."""
        return f"olake-{self.pipeline_id}-{self.kafka.topic_prefix}"

    def state_key(self, namespace: str | None, name: str) -> str:
        """A stream's key in the state topic."""
        return f"{self.pipeline_id}|{stream_label(namespace, name)}"

    def lock_path(self) -> str:
        """The host lock of runs writing this pipeline's topics (``core.locks``)."""
        k = self.kafka
        return host_lock_path("kafka", f"{k.bootstrap_servers}|{k.topic_prefix}|{self.pipeline_id}")

    def topic_specs(self, topics: list[str]) -> list[TopicSpec]:
        """The catalog and state topics (compacted, one partition) and the stream ``topics``."""
        rf = self.replication_factor
        return [TopicSpec(self.kafka.catalog_topic, 1, rf, COMPACTED), TopicSpec(self.kafka.state_topic, 1, rf, COMPACTED),
                *(TopicSpec(topic, self.partitions, rf, self.topic_config) for topic in topics)]
