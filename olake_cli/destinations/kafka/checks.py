"""``olake check`` of a Kafka destination: the brokers answer, olake's topics exist or can be made, and a
transaction can be begun and committed under the pipeline's transactional id."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from olake_cli.destinations.kafka.config import DestinationSettings
from olake_cli.destinations.kafka.producer import Transactions
from olake_cli.shared.kafka.admin import ensure_topics, topic_partitions
from olake_cli.shared.kafka.client import ErrorLog


def check_destination(settings: DestinationSettings, admin: Any, errors: ErrorLog) -> str:
    """What was checked, one line each; an OlakeError saying what to fix."""
    kafka = settings.kafka
    listed = topic_partitions(kafka, admin, errors)
    ensure_topics(kafka, admin, errors, settings.topic_specs([]), settings.create_topics)
    made = [t for t in (kafka.catalog_topic, kafka.state_topic) if t not in listed]
    probe = Transactions(replace(settings, pipeline_id=f"{settings.pipeline_id}-check"))
    probe.begin()
    probe.commit()
    lines = [f"kafka at {kafka.bootstrap_servers}: {len(listed)} topic(s) listed",
             f"catalog and state topics {kafka.catalog_topic}, {kafka.state_topic}: "
             + (f"created {', '.join(made)}" if made else "present"),
             f"transactions: an empty transaction committed (transactional id {probe.settings.transactional_id})",
             f"stream topics: {'created when missing' if settings.create_topics else 'must exist'} "
             f"({settings.partitions} partition(s), replication factor {settings.replication_factor})"]
    return "\n".join(lines)
