"""The DynamoDB source: tables discovered by allow-list or tags, INIT_SYNC as parallel scan segments on
Spark, SYNC from DynamoDB Streams with a safe zone (seeds/003). Modules, bottom up: ``connection``
(settings, clients, errors), ``attributes`` (attribute values, DynamoDB JSON), ``schema`` (types inferred
from a sample), ``batches`` (items as Arrow), ``tables`` (DISCOVERY), ``discover``, ``scan`` (a segment's
reader), ``session``, ``shards`` (stream shards and their records), ``positions``, ``capture`` (SYNC),
``source``."""
