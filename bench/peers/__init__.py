"""Peer brokers (NATS JetStream, Redis Streams, RabbitMQ streams) benchmarked side by side with weir."""
