"""The first bulk strings of a long RESP array cut out by C loops alone, for resp.Reader._items.

`stat`, `prio` and `report` read one row per active job (HVALS of the `stat` index); at 10,000 rows
the Reader's item-by-item loop cost ~1 µs a row. Here the buffer is split at CRLF (two pieces per
item), every header must be `$` and its length the byte length of the piece after it (checked by
map/int/len, no Python code per item), and the pieces are decoded by map. The first item that is not
a plain bulk string (a null, a number, a status, a nested array, a string holding CRLF) stops it:
the Reader's loop reads the rest, as it reads any reply. A reply that does not start with `$` (a
transaction's +OK and :1 replies) is not split at all.
"""
from operator import itemgetter

CRLF = b"\r\n"
MANY = 64       # an aggregate of at least this many items is tried here first
_FIRST, _AFTER_FIRST = itemgetter(slice(0, 1)), itemgetter(slice(1, None))


def strings(reader, n: int) -> list:
    """As many of the n items at reader.pos as are plain bulk strings, in order, reader.pos moved past
    them; reader._fill() is called for more bytes only while the next item is one still arriving."""
    items: list = []
    while len(items) < n:
        got, reader.pos, more = cut(reader.buf, reader.pos, n - len(items), reader.decode)
        items += got
        if not more:
            break
        if not got:
            reader._fill()
    return items


def cut(buf: bytes, pos: int, n: int, decode: bool) -> tuple[list, int, bool]:
    """(the whole bulk strings among the n items at `pos`, where they end, whether the next item may
    be one still arriving: more bytes then, and cut again)."""
    if buf[pos:pos + 1] not in (b"$", b""):
        return [], pos, False           # another kind of item
    rest = buf[pos:]
    # All ASCII (the usual rows): decoded once and split as text, a character a byte (no decode per item).
    text = decode and rest.isascii()
    pieces = rest.decode("ascii").split("\r\n", 2 * n) if text else rest.split(CRLF, 2 * n)
    dollar = "$" if text else b"$"
    k = (len(pieces) - 1) // 2          # whole (header, string) pairs: the last piece is what follows them
    if k == 0:
        head = pieces[0]
        return [], pos, not (len(pieces) > 1 and (head[:1] != dollar or head[1:2] in ("-", b"-")))   # a null is whole
    heads, data = pieces[0:2 * k:2], pieces[1:2 * k:2]
    if dollar[:0].join(map(_FIRST, heads)) != dollar * k or list(map(int, map(_AFTER_FIRST, heads))) != list(map(len, data)):
        return [], pos, False
    items = data if text or not decode else list(map(bytes.decode, data))
    return items, pos + sum(map(len, heads)) + sum(map(len, data)) + 4 * k, True


def whole(reader, n: int) -> bytearray:
    """The n bytes of a bulk string that runs past reader.buf by more than a read, received into one
    buffer of its own (reader.recv_into) and reader.buf emptied: the reader's _fill would join each
    read to what came before, copying a 720 KB reply ~5 times over (`labq prio`'s published ranking,
    its index: each copy in fresh pages, ~180 page faults a copy, issue 39 item 4). The CRLF after
    it is read and dropped."""
    have = len(reader.buf) - reader.pos
    out = bytearray(n + 2)
    out[:have] = memoryview(reader.buf)[reader.pos:]
    reader.buf, reader.pos = b"", 0
    view = memoryview(out)
    while have < n + 2:
        got = reader.recv_into(view[have:])
        if not got:
            from .faults import ConnectionLost
            raise ConnectionLost("the server closed the connection")
        have += got
    view.release()
    del out[n:]
    return out
