"""store/resp.py's socket calls on the live path (issue 39 item 3): what a loop of thin-client requests
asks of the kernel. strace of one drain client showed, per request, an mmap, an mremap and a munmap
around each of its two reads (recv(256 KiB) is above glibc's mmap threshold) and two settimeout
calls (an ioctl each) around its blocking pop. A fake socket records the calls; the replies must be
the same."""
from labq.scheduler.store import resp

MMAP_THRESHOLD = 128 * 1024     # glibc's default M_MMAP_THRESHOLD


class FakeSocket:
    """Answers each sendall with `answer(data)`; records recv sizes and the timeout each send ran under."""

    def __init__(self, answer):
        self.answer, self.out = answer, b""
        self.timeout, self.settimeouts, self.sends, self.asked = None, 0, [], []

    def settimeout(self, t):
        self.timeout = t
        self.settimeouts += 1

    def sendall(self, data):
        self.sends.append(self.timeout)
        self.out += self.answer(data)

    def recv(self, n):
        self.asked.append(n)
        got, self.out = self.out[:n], self.out[n:]
        return got

    def recv_into(self, view):
        """A socket's recv_into (a long bulk string's read, store/bulkread.whole): the size asked is the view's."""
        n = len(view)
        self.asked.append(n)
        got, self.out = self.out[:n], self.out[n:]
        view[:len(got)] = got
        return len(got)

    def close(self):
        pass


def _connected(answer, timeout=30.0) -> tuple[resp.Connection, FakeSocket]:
    c = resp.Connection("unix:///nowhere.sock", timeout=timeout)
    s = FakeSocket(answer)
    c._ready(s)
    return c, s


def _replies(data: bytes) -> bytes:
    """One reply per command sent: `:1` for a push, a popped [key, value] for a BLPOP."""
    out = b""
    for cmd in data.split(b"*")[1:]:
        out += b"*2\r\n$1\r\nk\r\n$5\r\nhello\r\n" if b"BLPOP" in cmd else b":1\r\n"
    return out


def test_small_replies_are_read_below_the_mmap_threshold():
    c, s = _connected(_replies)
    for _ in range(5):
        got = c.pipeline([("LPUSH", "q", "x"), ("LPUSH", "w", "t"), ("BLPOP", "k", 20)], 20, resend=False,
                         check=lambda replies: None)
        assert got == [1, 1, ["k", "hello"]]
    assert s.asked and max(s.asked) < MMAP_THRESHOLD


def test_a_reply_that_fills_a_read_is_read_in_large_pieces_and_arrives_whole():
    big = "x" * 3_000_000
    c, s = _connected(lambda data: b"$%d\r\n%s\r\n" % (len(big), big.encode()))
    assert c.execute("GET", "big") == big
    assert s.asked[0] < MMAP_THRESHOLD
    assert max(s.asked) >= 1 << 18 and len(s.asked) <= 3_000_000 // (1 << 18) + 3


def test_the_timeout_is_set_once_for_a_loop_of_blocking_pops_and_each_exchange_runs_under_its_own():
    c, s = _connected(_replies, timeout=30.0)
    before = s.settimeouts
    for _ in range(10):
        c.pipeline([("LPUSH", "q", "x"), ("BLPOP", "k", 20)], 20, resend=False, check=lambda replies: None)
    assert s.settimeouts - before == 1
    assert s.sends == [50.0] * 10          # the read timeout plus the pop's own wait
    assert c.execute("LPUSH", "q", "y") == 1
    assert s.sends[-1] == 30.0             # a plain command: the read timeout alone again
    assert s.settimeouts - before == 2
