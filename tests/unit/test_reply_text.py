"""store/writes._compact, the text of every reply (its C encoder made once, not one a call), is
json.dumps(reply, separators=(",", ":")) for any reply: nested dicts and lists, non-ASCII and control
characters, floats, None, bools, big integers; what is not a dict goes through the encoder itself."""
import json

from hypothesis import given, settings, strategies as st

from labq.scheduler.store import writes

leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                 st.text(max_size=12), st.sampled_from(["é中\n\t\"\\", "\x00\x1f", ""]))
value = st.recursive(leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                    st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                     max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), value, max_size=6))
def test_a_reply_text_is_json_dumps_compact(reply):
    assert writes._compact(reply) == json.dumps(reply, separators=(",", ":"))


def test_what_is_no_dict_and_floats_past_json():
    for x in (["a", 1], "text", 3, None):
        assert writes._compact(x) == json.dumps(x, separators=(",", ":"))
    got = writes._compact({"x": float("inf"), "y": float("nan"), "z": 1e-7})
    assert got == json.dumps({"x": float("inf"), "y": float("nan"), "z": 1e-7}, separators=(",", ":"))
