"""The identity index: from (process, path-param field, value) to the
instances that have that value, kept by every journal in its state rows
(`storage._states`) and written in the transaction that records the instance.

It is what lets ``system.signal`` find its recipients without scanning
(see `_signals`): the instances of ``parcels/:order_id/:parcel`` whose
``order_id`` is ``"o-17"`` are the rows under one key prefix, a range read
on every journal, whatever else is stored.

Rows, per instance and per path param of its template:

- ``ident/<bucket>/<iid hex>`` -> the instance's params (a list of str);
- ``identgen/<bucket>``, whose version goes one up at every start in that
  bucket (its value is nothing).

``<bucket>`` is a 128-bit hash of (template, field, value), so a key is
short whatever the template and the value (LMDB keys are at most 511
bytes) and keys of one bucket are contiguous.

Invariant: every transaction that makes an instance of a process that
listens to a signal (a start, a child's start, a retry, a fork:
`_transactions.start_txn`) writes its rows and bumps each of its buckets'
generation, so a router that read a bucket at generation N and commits on
condition that it is still at N (a `Txn.expect_state`) cannot miss an
instance started in between: the commit fails and the router reads again.
Starts of processes that listen to nothing skip the index (a start costs
some 50 µs of CPU less without it; retries and forks, which may run where
the definitions are not known, always write it). So an instance started
while its process declared no ``listens=`` is not reached once a later
version of the code adds one: only those started since are.

Rows of an instance that ended stay until a router meets them: it skips
them, and deletes those of instances that are gone or finished for good
(completed, failed, cancelled: a retry or a fresh start of such an address
goes through `start_txn`, which writes the rows again).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from storage import Txn

__all__ = [
    "GENERATION_PREFIX",
    "INDEX_PREFIX",
    "bucket",
    "bucket_prefix",
    "generation_key",
    "index_instance",
    "param_names",
]

INDEX_PREFIX = "ident/"
GENERATION_PREFIX = "identgen/"


def param_names(template: str) -> tuple[str, ...]:
    """The path params of ``template`` (``"orders/:order_id"`` -> ``("order_id",)``)."""
    return tuple(part[1:] for part in template.split("/") if part.startswith(":"))


def bucket(template: str, field: str, value: str) -> str:
    """The hash that names the bucket of (``template``, ``field``, ``value``)."""
    # (Names and params hold no control character: "\x1f" separates them.)
    text = f"{template}\x1f{field}\x1f{value}"
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def bucket_prefix(name: str) -> str:
    """The key prefix of the index rows of bucket ``name``."""
    return f"{INDEX_PREFIX}{name}/"


def generation_key(name: str) -> str:
    """The key of the generation row of bucket ``name``."""
    return GENERATION_PREFIX + name


def index_instance(txn: Txn, iid: bytes, template: str, params: Sequence[str]) -> None:
    """Into ``txn``, which records the instance ``iid`` of ``template``
    with ``params``: its index rows, and a new generation of each of its
    buckets (see the module docstring)."""
    stored = list(params)
    for field, value in zip(param_names(template), params, strict=False):
        name = bucket(template, field, value)
        txn.put_state(bucket_prefix(name) + iid.hex(), stored)
        txn.put_state(generation_key(name), None)
