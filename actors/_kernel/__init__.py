"""The kernel: effects, the driver that runs a process by hand, the log, records, the mailbox, handles, the protocol's transactions.

What every other room stands on; nothing here imports another room.
"""
