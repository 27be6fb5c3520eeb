"""The system: the ActorSystem facade and its parts, open and recovery, the operations (fork, retry, mail, cleanup), nodes, the control socket.

`ActorSystem` (`_facade`) is a facade over its parts (registry, statuses,
lifecycle, router, upkeep, ...); `_open` builds it and `_recovery` reloads
what the journal holds.
"""
