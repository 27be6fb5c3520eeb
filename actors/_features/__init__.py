"""The features: steps, sends, signals, asks, timers, streams, sagas, queues, schedules, supervision, joins, crashes.

Each feature is a module of its own that the actor and the system call;
features import only the kernel and each other.
"""
