"""JSON by CPython's C encoder and scanner (the `_json` module) without importing the `json` package.

`import json` imports `re` and through it `enum` (json's own white-space and number regexes, re's
flags): ~12 ms of CPU a process on the 2-core machines, where `labq stat` costs ~45 and `labq sub`
~30, and nothing else those commands run needs either (issue 39 item 4). The text is json.dumps's and
the values json.loads's (tests/unit/test_cjson.py holds them equal); whatever is unusual (bytes, white
space around a value, a text that is not JSON) goes to `json` itself, which gives its own answer or
its own error.
"""
from __future__ import annotations

import _json

TYPE_CHECKING = False    # typing.TYPE_CHECKING without importing typing (~2 ms of a command)
if TYPE_CHECKING:
    from typing import Any, Callable

_SPECIAL = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class Decoder:
    """The attributes _json.make_scanner reads of a json.JSONDecoder: json.loads's, or those its
    parse_float and parse_constant arguments would set."""

    def __init__(self, parse_float: Callable[[str], Any] = float,
                 parse_constant: Callable[[str], Any] = _SPECIAL.__getitem__) -> None:
        self.strict, self.object_hook, self.object_pairs_hook = True, None, None
        self.parse_float, self.parse_int, self.parse_constant = parse_float, int, parse_constant


def scanner(decoder: Decoder) -> Callable[[str, int], tuple[Any, int]]:
    """scan(text, index) -> (value, end), StopIteration where no value starts at index."""
    return _json.make_scanner(decoder)  # type: ignore[arg-type]  # typeshed names the scanner as its context's type


_SCAN = scanner(Decoder())
_QUOTE = _json.encode_basestring_ascii


def _default(o: object) -> Any:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def dumps(obj: object) -> str:
    """json.dumps(obj); a fresh circular-reference check a call, as json's."""
    return "".join(_json.make_encoder({}, _default, _QUOTE, None, ": ", ", ", False, False, True)(obj, 0))


def compact(obj: object) -> str:
    """json.dumps(obj, separators=(",", ":")): what labq writes to Redis."""
    return "".join(_json.make_encoder({}, _default, _QUOTE, None, ":", ",", False, False, True)(obj, 0))


def compact_utf8(obj: object) -> str:
    """json.dumps(obj, separators=(",", ":"), ensure_ascii=False): the report's cells (money/totals.py)."""
    return "".join(_json.make_encoder({}, _default, _json.encode_basestring, None, ":", ",", False, False, True)(obj, 0))


def loads(text: str | bytes, scan: Callable[[str, int], tuple[Any, int]] = _SCAN,
          slow: Callable[[Any], Any] | None = None) -> Any:
    """json.loads(text) (or `slow(text)`, json's reading with scan's hooks): `scan` over the whole text,
    else `slow` itself, with its error where there is one."""
    if type(text) is str:
        try:
            got, end = scan(text, 0)
        except (StopIteration, ValueError):     # not a value from the first character: json says why
            got, end = None, -1
        if end == len(text):
            return got
    if slow is None:
        import json
        slow = json.loads
    return slow(text)


quote = _QUOTE
