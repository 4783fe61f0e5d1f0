"""statrows.parse: rows in numeric id order (9 before 10, whatever the hash's order), `keep` drops the
others, an id twice keeps both, and rows with equal tails share one tail object (what makes the
passes of `labq stat` over 10,000 rows cheap: statrows.parse's docstring)."""
import random

from labq.scheduler.store import statrows as R


def _text(i: int, tail: str) -> str:
    return f"{i}\t\t\t\t{i}.5,600,0\t{tail}"


def test_rows_come_in_id_order_with_shared_tails():
    ids = [i for i in range(1, 400) if i not in (99, 100)] + [1000, 99, 100]
    texts = [_text(i, "PD\troot\tparked\tnormal\t00:00:00\t0\t0\t1\t(Held)\tname\twith\ttabs" if i % 3 else
                   "R\tbob\teta\tnormal\t\t1\t0\t1\tn1\tx") for i in ids[:-2]] + [_text(100, "Z"), _text(99, "Z")]
    random.Random(5).shuffle(texts)
    rows = R.parse(texts)
    assert [int(r[R.ID]) for r in rows] == sorted(ids)
    assert all(r[R.TAIL] == t.split("\t", R.TAIL)[R.TAIL] for r, t in zip(rows, sorted(texts, key=lambda t: int(t.split("\t")[0]))))
    assert len({id(r[R.TAIL]) for r in rows}) == 3
    assert R.cells(rows[0][R.TAIL])[R.NAME] == "name\twith\ttabs"
    assert [int(r[R.ID]) for r in R.parse(texts, keep={5, 1000, 7})] == [5, 7, 1000]


def test_an_id_twice_keeps_both_rows():
    rows = R.parse([_text(3, "b"), _text(2, "a"), _text(3, "c")])
    assert [(r[R.ID], r[R.TAIL]) for r in rows] == [("2", "a"), ("3", "b"), ("3", "c")]


def test_in_order_sorts_dense_sparse_and_twice_seen_ids():
    rng = random.Random(7)
    for ids in ([5], list(range(1, 500)), [1, 10**9, 7, 10**6], [3, 3, 2], list(range(90, 110)) + [100_000],
                [9, 10, 11, 99, 100, 101, 1000]):
        texts = [_text(i, "t") for i in ids]
        rng.shuffle(texts)
        assert R.in_order(texts) == sorted(texts, key=lambda t: (int(t.split("\t")[0]), t))
    assert R.in_order([]) == [] and R.parse([]) == []
