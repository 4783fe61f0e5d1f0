"""store/resp.Reader reads a long array of bulk strings by C loops (store/bulkread.py: split at CRLF, each
length checked against its piece) and hands anything else to the item-by-item loop: the replies are
the ones that loop alone reads, whatever the array holds (strings with CRLF in them, ending in CR,
empty, non-ASCII; nulls, integers, statuses, nested arrays) and however the bytes arrive (one byte at
a time, or all at once, with more replies behind)."""
from hypothesis import given, settings, strategies as st

from labq.scheduler.store import bulkread, resp

text = st.one_of(st.text(max_size=12), st.sampled_from(["", "\r\n", "a\r\nb", "x\r", "\ny", "$3", "*2", "é\t中"]))
item = st.one_of(text, text, text, st.none(), st.integers(-5, 10**6), st.lists(text, max_size=3))


def _encode(x) -> bytes:
    if x is None:
        return b"$-1\r\n"
    if isinstance(x, int):
        return b":%d\r\n" % x
    if isinstance(x, list):
        return b"*%d\r\n" % len(x) + b"".join(map(_encode, x))
    b = x.encode()
    return b"$%d\r\n%b\r\n" % (len(b), b)


def _source(data: bytes, sizes: list[int]):
    state = {"pos": 0, "i": 0}

    def recv(_n):
        pos = state["pos"]
        k = sizes[state["i"] % len(sizes)] if sizes else len(data)
        state["i"] += 1
        state["pos"] = pos + k
        return data[pos:pos + k]
    return recv


def _read_all(data: bytes, sizes: list[int], n: int, many: int, decode: bool = True) -> list:
    old = bulkread.MANY
    bulkread.MANY = many
    try:
        r = resp.Reader(_source(data, sizes), decode)
        return [r.read() for _ in range(n)]
    finally:
        bulkread.MANY = old


@settings(max_examples=300, deadline=None)
@given(st.lists(text, min_size=64, max_size=200), st.lists(item, max_size=6), st.integers(0, 200),
       st.lists(st.integers(1, 700), max_size=5), st.booleans())
def test_a_long_array_reads_as_item_by_item(strings, odd, at, sizes, decode):
    items = list(strings)
    for x in odd:                        # other kinds of item, anywhere in the array (or none)
        items.insert(at % (len(items) + 1), x)
    data = _encode(items) + _encode("after") + _encode(7)
    want = _read_all(data, sizes, 3, many=1 << 30, decode=decode)
    assert want[0] == [(x.encode() if isinstance(x, str) and not decode else x) if not isinstance(x, list) else
                       [y.encode() if not decode else y for y in x] for x in items]
    assert _read_all(data, sizes, 3, many=64, decode=decode) == want


def test_the_bulk_path_cuts_out_plain_strings_and_stops_at_anything_else():
    rows = [f"{i}\t\t\t\t{i}.5,600,0\tPD\troot" for i in range(100)]
    data = _encode(rows)
    r = resp.Reader(_source(data, [37]))
    assert r._line() == b"*100"
    assert bulkread.strings(r, 100) == rows and r.pos == len(r.buf)
    data = _encode(rows[:70] + [None] + rows[70:])     # a null at 70: the loop reads from there
    r = resp.Reader(_source(data, []))
    assert r.read() == rows[:70] + [None] + rows[70:]
    r = resp.Reader(_source(b"*100\r\n" + b":1\r\n" * 100, []))     # a transaction's replies: never split
    assert r._line() == b"*100"
    assert bulkread.strings(r, 100) == [] and r.pos == 6


def test_an_array_ending_in_a_null_or_a_number_is_read_without_more_bytes():
    """The last reply of a stream: nothing follows, so asking for more bytes would wait forever
    (here: ConnectionLost)."""
    rows = [f"row {i}" for i in range(70)]
    for last in (None, 5, "x\r\ny"):
        for sizes in ([], [9]):
            assert _read_all(_encode(rows + [last]), sizes, 1, many=64) == [rows + [last]]
