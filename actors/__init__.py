"""A durable actor runtime for trio (the core lands on top of `storage`)."""
