"""The Kafka source: olake's own topics back into streams (changes applied as changes), any other topic as a
stream of its messages."""
