"""The request's JSON as the thin client writes and reads it (store/inbox.py): its C encoder and scanner
called directly (issue 39: each Python call on the request path runs cold in a busy drain), the same
text as json.dumps with the same separators and the same values as json.loads, errors included."""
import json

import pytest
from hypothesis import given, strategies as st

from labq.scheduler.store import inbox

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                     lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                     max_leaves=25)


@given(_json)
def test_the_text_is_json_dumps_with_the_same_separators(x):
    assert inbox._TEXT(x) == json.dumps(x, separators=(",", ":"))


@given(_json)
def test_the_text_parses_back(x):
    assert inbox.parsed(json.dumps(x, separators=(",", ":"))) == x


def test_what_json_refuses_is_refused_alike():
    loop: dict = {}
    loop["self"] = loop
    with pytest.raises(ValueError, match="Circular reference"):
        inbox._TEXT(loop)
    with pytest.raises(TypeError):
        inbox._TEXT({"x": object()})
    assert inbox._TEXT({"a": [1, 2.5, None]}) == '{"a":[1,2.5,null]}'       # the checks reset after a refusal
    for bad in ("", "{", '{"a":1} x', "nope"):
        with pytest.raises(json.JSONDecodeError):
            inbox.parsed(bad)
    assert inbox.parsed(' {"a": 1} ') == {"a": 1}       # white space around it: json.loads reads it
