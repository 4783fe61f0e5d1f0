"""scheduler/cjson.py gives json.dumps's text and json.loads's values and errors, and imports no `json`."""
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from labq.scheduler import cjson
from tests.harness import ROOT

SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
VALUES = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=5) | st.tuples(kids, kids)
                      | st.dictionaries(st.text(max_size=8), kids, max_size=5), max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(VALUES, st.booleans())
def test_the_text_is_json_dumps(value, compact):
    want = json.dumps(value, separators=(",", ":")) if compact else json.dumps(value)
    assert (cjson.compact(value) if compact else cjson.dumps(value)) == want
    assert cjson.compact_utf8(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_the_values_are_json_loads(value):
    text = json.dumps(value)
    assert json.dumps(cjson.loads(text)) == json.dumps(json.loads(text))      # by text: NaN is not NaN


@pytest.mark.parametrize("text", ["", " ", "{", '{"a": }', "[1,]", "nan", "tru", '"\x01"', "1 2", '{"a":1}x',
                                  "\ufeff[]", "[1e999999999999]", '"\\ud800"', "-", "01"])
def test_a_bad_or_unusual_text_gets_json_loads_answer(text):
    try:
        want = ("value", json.dumps(json.loads(text)))
    except ValueError as e:
        want = ("error", type(e), str(e))
    try:
        got = ("value", json.dumps(cjson.loads(text)))
    except ValueError as e:
        got = ("error", type(e), str(e))
    assert got == want


def test_white_space_and_bytes_are_json_loads():
    assert cjson.loads(' {"a": [1, 2.5]}\n') == json.loads(' {"a": [1, 2.5]}\n') == {"a": [1, 2.5]}
    assert cjson.loads(b'{"a": "\xc3\xa9"}') == {"a": "é"}


def test_what_json_refuses_to_write_is_refused_alike():
    loop = []
    loop.append(loop)
    for bad in (object(), {1j: 1}, {"a": {1, 2}}, loop):
        with pytest.raises((TypeError, ValueError)) as want:
            json.dumps(bad)
        for dump in (cjson.dumps, cjson.compact, cjson.compact_utf8):
            with pytest.raises(want.type) as got:
                dump(bad)
            assert str(got.value) == str(want.value)


def test_it_imports_neither_json_nor_re():
    code = ("import sys; from labq.scheduler import cjson; cjson.loads(cjson.dumps({'a': [1.5, None, 'é']})); "
            "print(sorted(m for m in sys.modules if m.partition('.')[0] in ('json', 're', 'enum')))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[]", (p.stdout, p.stderr[-500:])
