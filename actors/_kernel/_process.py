"""The ``@process`` definition: a path template, a function, its supervision."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, get_args

import attrs

from storage import MAX_ADDRESS_BYTES

from ..errors import InvalidArguments, LimitExceeded
from ._checks import check_count, check_seconds, check_text
from ._values import Restart, Signal

__all__ = ["RESTART_TYPES", "OneForAll", "OneForOne", "ProcessDef", "RestForOne", "process"]

RESTART_TYPES: tuple[Restart, ...] = get_args(Restart)

P = ParamSpec("P")  # what the process function takes after ctx: path params, then input
R = TypeVar("R", covariant=True)  # what it returns: the result `Handle.result` gives

# Keywords that the calls passing process input as **kwargs take themselves,
# so process input may not use them. (ctx.step's own keywords, name, retry,
# timeout, compensate, validate_*, thread, at_most_once, only constrain step
# kwargs: a step function cannot take them by keyword through ctx.step.)
RESERVED = {
    "start": {"if_exists", "queue", "priority"},
    "signal_with_start": {"signal", "payload"},
    "call": {"queue", "priority"},
    "spawn": {"restart", "queue", "priority"},
}
_ALL_RESERVED = set().union(*RESERVED.values())


@attrs.frozen(slots=True)
class _Strategy:
    """At most ``max_restarts`` restarts of a parent's children within
    ``within`` seconds; past that the failure escalates to the parent.

    Raises:
        InvalidArguments: ``max_restarts`` is not an int of 0 or more, or
            ``within`` is not a finite number of seconds above 0 (NaN would
            let no restart limit ever trip).
    """

    max_restarts: int = 3
    within: float = 5.0

    def __attrs_post_init__(self) -> None:
        # The values stay as given (their repr is what restart logs print).
        name = type(self).__name__
        check_count(self.max_restarts, f"{name}(max_restarts=...)")
        if check_seconds(self.within, f"{name}(within=...)") == 0:
            raise InvalidArguments(
                f"{name}(within=...) needs seconds above 0, not {self.within!r}: the restart "
                "limit counts restarts within that window"
            )


@attrs.frozen(slots=True)
class OneForOne(_Strategy):
    """Restart only the child that crashed (the default: 3 restarts within 5 s)."""


@attrs.frozen(slots=True)
class OneForAll(_Strategy):
    """When a child crashes, restart it and all its siblings."""


@attrs.frozen(slots=True)
class RestForOne(_Strategy):
    """When a child crashes, restart it and the siblings started after it."""


@attrs.frozen(slots=True, eq=False)
class ProcessDef(Generic[P, R]):
    """A process definition made by `process`. Call ``resolve(*params)`` for an
    address; pass the definition itself to ``open_system(processes=[...])``.

    For type checkers it is ``ProcessDef[P, R]``: ``P`` the parameters of the
    function after ``ctx``, ``R`` its result, so ``system.start`` and
    ``ctx.call`` check their arguments and type the result."""

    template: str
    fn: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]
    params: tuple[str, ...]
    restart: Restart
    supervision: _Strategy
    signature: inspect.Signature
    compensate_on_cancel: bool = False
    # The signals routed by identity that it takes (see `_signals`).
    listens: tuple[Signal, ...] = ()
    # What input binds at once (see check_input): the keywords the function
    # takes after its path params, those of them without a default, and the
    # names ctx and the path params already bind if it takes **kwargs (else
    # None); None where the signature needs bind().
    keywords: tuple[frozenset[str], frozenset[str], frozenset[str] | None] | None = None
    # The template as a format string, a field per path param ("orders/{}").
    address_format: str = attrs.field(init=False)

    @address_format.default
    def _address_format(self) -> str:
        return "/".join(
            "{}" if part.startswith(":") else part.replace("{", "{{").replace("}", "}}")
            for part in self.template.split("/")
        )

    def resolve(self, *params: Any) -> str:
        """The address of the instance with these path params.

        Raises:
            InvalidArguments: wrong number of params, or one that is not a
                non-empty str without "/".
        """
        if len(params) != len(self.params):
            names = ", ".join(self.params) or "none"
            raise InvalidArguments(
                f"process {self.template!r} takes {len(self.params)} path param(s) "
                f"({names}), got {len(params)}: {params!r}"
            )
        for name, value in zip(self.params, params, strict=True):
            if not isinstance(value, str) or not value or "/" in value:
                raise InvalidArguments(
                    f"path param {name!r} of {self.template!r} must be a non-empty "
                    f"str without '/', got {value!r}"
                )
        return self.address_format.format(*params)

    def start_address(
        self, params: tuple[Any, ...], input: dict[str, Any], address: str | None = None
    ) -> str:
        """The address a start with ``params`` and ``input`` makes (``address``,
        if given), once all a start checks holds: the params as `resolve`
        checks them (their text too), the address's size, then the input
        as `check_input` does. One call, with `check_input`'s fast path
        written out: every start makes it.

        Raises:
            InvalidArguments: wrong params, or input that does not bind.
            LimitExceeded: the address is over `storage.MAX_ADDRESS_BYTES`.
        """
        fits = len(params) == len(self.params)  # (what `resolve` checks)
        for param in params:
            if isinstance(param, str):
                # ASCII is always valid: only other text pays for the message.
                if not (param.isascii() and param.isprintable()):
                    check_text(param, f"a path param of {self.template!r}")
                if not param or "/" in param:
                    fits = False
            else:
                fits = False
        if not fits:
            self.resolve(*params)  # (raises, saying why)
        own = address or self.address_format.format(*params)
        size = len(own.encode())
        if size > MAX_ADDRESS_BYTES:
            raise LimitExceeded(
                f"the address {own[:40]!r}... is {size} bytes, over the limit of "
                f"{MAX_ADDRESS_BYTES} (storage.MAX_ADDRESS_BYTES); use short ids as path "
                "params and put the data in the input"
            )
        keywords = self.keywords
        if keywords is not None and len(params) == len(self.params):
            taken, required, bound = keywords  # (see check_input)
            if required.issubset(input) and (
                taken.issuperset(input) if bound is None else bound.isdisjoint(input)
            ):
                return own
        self.check_input(params, input)
        return own

    def check_input(self, params: tuple[Any, ...], input: dict[str, Any]) -> None:
        """Raise `InvalidArguments` unless ``fn(ctx, *params, **input)`` binds."""
        keywords = self.keywords
        if keywords is not None and len(params) == len(self.params):
            # Every start checks its input: the common shape is decided by
            # set arithmetic, the rest (and every refusal, for its words) by
            # Signature.bind, which costs ten times as much.
            taken, required, bound = keywords
            if required.issubset(input) and (
                taken.issuperset(input) if bound is None else bound.isdisjoint(input)
            ):
                return
        try:
            self.signature.bind(None, *params, **input)
        except TypeError as exc:
            raise InvalidArguments(
                f"input {sorted(input)} does not fit process {self.template!r} "
                f"({self.fn.__qualname__}{self.signature}): {exc}"
            ) from None

    def __repr__(self) -> str:
        return f"<process {self.template!r} {self.fn.__qualname__}>"


def process(
    path: str,
    *,
    restart: Restart = "temporary",
    supervision: _Strategy | None = None,
    compensate_on_cancel: bool = False,
    listens: Iterable[Signal] = (),
) -> Callable[[Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]], ProcessDef[P, R]]:
    """Define a process: ``@process("orders/:order_id")`` over
    ``async def order(ctx, order_id, *, amount)``.

    The template is the definition's identity in the journal: keep it when
    the code changes. Path params (``:name``) become the function's
    positional parameters after ``ctx``; everything else is keyword input.
    Nothing is registered globally: pass the definition to `open_system`.

    Args:
        path: the template, segments separated by "/"; ``:name`` segments are params.
        restart: what the system does when a top-level instance crashes:
            ``"temporary"`` (default, never restarted), ``"transient"``,
            ``"permanent"``. A restart runs the process from the top as a
            new run: its completed steps run again, under new idempotency
            keys (the run is part of the key). Work that must not repeat
            goes before the restartable part (in a parent that does not
            restart, or a step whose result a child receives), or into a
            child that restarts instead.
        supervision: the strategy for this process's children (default
            ``OneForOne(max_restarts=3, within=5)``).
        compensate_on_cancel: also run the saga compensations of completed
            steps when the instance is cancelled (they always run when it fails).
        listens: the signals routed by identity (`Signal` with
            ``identity=``) that its instances take: ``system.signal`` and
            ``ctx.signal`` put one in the mailbox of each live instance
            whose path params equal the identity given. Each identity
            field must be a path param of ``path``.

    Raises:
        InvalidArguments: a bad template, a function that is not ``async def``,
            params that do not match the template, input parameters that
            use a reserved keyword name, or a listened signal with no
            identity or an identity field that is not a path param.
    """
    if not isinstance(path, str) or not path or path.startswith("/") or path.endswith("/"):
        raise InvalidArguments(f"process path {path!r} must be like 'orders/:order_id'")
    segments = path.split("/")
    if any(not s or s == ":" for s in segments):
        raise InvalidArguments(f"process path {path!r} has an empty segment or param name")
    names = tuple(s[1:] for s in segments if s.startswith(":"))
    if len(set(names)) != len(names):
        raise InvalidArguments(f"process path {path!r} repeats a param name")
    if restart not in RESTART_TYPES:
        raise InvalidArguments(f"restart must be one of {RESTART_TYPES}, not {restart!r}")
    heard = _listens(path, names, listens)

    def define(fn: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]) -> ProcessDef[P, R]:
        if not inspect.iscoroutinefunction(fn):
            raise InvalidArguments(f"@process({path!r}) needs an 'async def' function, got {fn!r}")
        signature = inspect.signature(fn)
        positional = [
            p
            for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if not positional:
            raise InvalidArguments(f"{fn.__qualname__} must take ctx as its first parameter")
        fn_params = tuple(p.name for p in positional[1 : 1 + len(names)])
        if len(fn_params) != len(names):
            raise InvalidArguments(f"{fn.__qualname__} must take the path params {names} after ctx")
        clashes = sorted(
            name for name in list(signature.parameters)[1 + len(names) :] if name in _ALL_RESERVED
        )
        if clashes:
            raise InvalidArguments(
                f"{fn.__qualname__} uses reserved keyword name(s) {clashes} for input "
                f"(the runtime's own calls take them: {_describe_reserved()}); rename them"
            )
        return ProcessDef(
            template=path,
            fn=fn,
            params=names,
            restart=restart,
            supervision=supervision if supervision is not None else OneForOne(),
            signature=signature,
            compensate_on_cancel=compensate_on_cancel,
            listens=heard,
            keywords=_keywords(signature, len(names)),
        )

    return define


def _listens(path: str, names: tuple[str, ...], listens: Any) -> tuple[Signal, ...]:
    """``@process(path, listens=...)`` checked: signals with an identity
    whose every field is a path param of ``path``, each name once."""
    if isinstance(listens, Signal) or not isinstance(listens, Iterable):
        raise InvalidArguments(
            f"@process({path!r}, listens=...) takes a list of signals, like [shipped], "
            f"not {listens!r}"
        )
    heard: dict[str, Signal] = {}
    for signal in listens:
        if not isinstance(signal, Signal):
            raise InvalidArguments(
                f"@process({path!r}, listens=...) takes actors.Signal objects, not {signal!r}"
            )
        if not signal.identity:
            raise InvalidArguments(
                f"@process({path!r}) listens to {signal.name!r}, which has no identity "
                "fields; declare them (Signal(name, identity=('order_id',))) or send it "
                "to an address with send"
            )
        for field in signal.identity:
            if field not in names:
                raise InvalidArguments(
                    f"@process({path!r}) listens to {signal.name!r}, whose identity field "
                    f"{field!r} is not a path param of {path!r} (its params: "
                    f"{', '.join(names) or 'none'}); add ':{field}' to the path or listen "
                    "to another signal"
                )
        known = heard.get(signal.name)
        if known is not None and known.identity != signal.identity:
            raise InvalidArguments(
                f"@process({path!r}) listens to two signals named {signal.name!r} with "
                f"different identities ({known.identity!r}, {signal.identity!r})"
            )
        heard[signal.name] = signal
    return tuple(heard.values())


def _keywords(
    signature: inspect.Signature, path_params: int
) -> tuple[frozenset[str], frozenset[str], frozenset[str] | None] | None:
    """`ProcessDef.keywords` for a function with this signature, or None
    if input is not all keyword parameters after ctx and the path params."""
    parameters = list(signature.parameters.values())
    first, rest = parameters[: 1 + path_params], parameters[1 + path_params :]
    taken: set[str] = set()
    required: set[str] = set()
    bound: frozenset[str] | None = None
    for p in rest:
        if p.kind is p.VAR_KEYWORD:
            bound = frozenset(q.name for q in first if q.kind is q.POSITIONAL_OR_KEYWORD)
        elif p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
            taken.add(p.name)
            if p.default is p.empty:
                required.add(p.name)
        else:
            return None  # *args or positional-only input: bind() decides
    return frozenset(taken), frozenset(required), bound


def _describe_reserved() -> str:
    return "; ".join(f"{call}: {', '.join(sorted(names))}" for call, names in RESERVED.items())
