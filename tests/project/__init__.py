"""The project itself: structure, public API and reference, typing, collection, docs, examples, benchmarks."""
