"""`ProcessDef.check_input` decides what `inspect.Signature.bind` decides.

Every start and child checks its input; the common signature shapes are
decided by set arithmetic (`ProcessDef.keywords`), the rest by `bind`. The
two must agree on every call, whatever the shape of the function.
"""

from __future__ import annotations

import itertools

import pytest

from actors import process
from actors.errors import InvalidArguments


async def keyword_only(ctx, a, *, x, y=1): ...
async def positional_or_keyword(ctx, a, b, x=2, *, y): ...
async def any_keyword(ctx, a, **kw): ...
async def some_and_any_keyword(ctx, a, *, x, **kw): ...
async def star_args(ctx, a, *args, x=1): ...
async def positional_only_params(ctx, a, b, /, x, **kw): ...
async def no_input(ctx, a): ...
async def positional_only_ctx(ctx, /, a, **kw): ...
async def input_named_ctx(ctx, a, *, y, **kw): ...


FUNCTIONS = [
    (keyword_only, "k/:a"),
    (positional_or_keyword, "p/:a/:b"),
    (any_keyword, "a/:a"),
    (some_and_any_keyword, "s/:a"),
    (star_args, "v/:a"),
    (positional_only_params, "o/:a/:b"),
    (no_input, "n/:a"),
    (positional_only_ctx, "c/:a"),
    (input_named_ctx, "i/:a"),
]
NAMES = ["x", "y", "z", "a", "b", "kw", "ctx", "args"]


@pytest.mark.parametrize(("fn", "template"), FUNCTIONS, ids=[f.__name__ for f, _ in FUNCTIONS])
def test_check_input_agrees_with_signature_bind(fn, template):
    definition = process(template)(fn)
    agreed = refused = 0
    for n in range(4):
        for keys in itertools.combinations(NAMES, n):
            for count in {len(definition.params), len(definition.params) + 1, 0}:
                params = ("p",) * count
                input = dict.fromkeys(keys, 1)
                try:
                    definition.signature.bind(None, *params, **input)
                except TypeError:
                    with pytest.raises(InvalidArguments, match="does not fit process"):
                        definition.check_input(params, input)
                    refused += 1
                else:
                    definition.check_input(params, input)
                    agreed += 1
    assert agreed and refused  # both answers were asked for
