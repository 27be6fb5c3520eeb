"""Tests of actors/_features: steps, sends, signals, asks, joins, timers, streams, sagas, queues, schedules, supervision."""
