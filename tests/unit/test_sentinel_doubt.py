"""sentinel.doubt: a write behind Sentinel is acknowledged only when, after its WAIT, the sentinels'
newest configuration names the master it went to and none has that master down or a failover of
it under way (a stale master's replica acknowledges writes that the failover then discards); a
sentinel that missed the last failover is not believed; a minority of answers confirms nothing."""
from labq.scheduler.store import sentinel

HOST, PORT = "127.0.0.1", 6379


def master(ip=HOST, port=PORT, flags="master", epoch=0):
    return {"name": "labq", "ip": ip, "port": str(port), "flags": flags, "config-epoch": str(epoch)}


def test_every_sentinel_naming_the_master_confirms_it():
    assert sentinel.doubt([master(), master(), master()], HOST, PORT) == ("", False)
    # redis-py's parsed form: the port and epoch ints, RESP3's flags a set
    parsed = {**master(), "port": PORT, "config-epoch": 0, "flags": {"master"}}
    assert sentinel.doubt([master(), parsed], HOST, PORT) == ("", False)


def test_the_newest_configuration_naming_another_master_makes_ours_stale():
    why, stale = sentinel.doubt([master(), master(port=6380, epoch=1), master()], HOST, PORT)
    assert stale and "127.0.0.1:6380" in why and f"not {HOST}:{PORT}" in why


def test_a_sentinel_that_missed_the_failover_is_not_believed():
    # Ours is the new master (epoch 1); one sentinel still names the old one (epoch 0), down.
    lagging = master(port=6380, flags="master,s_down,o_down", epoch=0)
    assert sentinel.doubt([master(epoch=1), lagging, master(epoch=1)], HOST, PORT) == ("", False)


def test_the_failovers_leader_still_naming_the_old_master_does_not_hold_the_new_one_back():
    # After the promotion the leader names the old master at the new epoch (failover_in_progress)
    # until it has moved the other replicas; the sentinels that switched name ours at that epoch.
    leader = master(port=6380, flags="master,failover_in_progress", epoch=1)
    assert sentinel.doubt([master(epoch=1), leader, master(epoch=1)], HOST, PORT) == ("", False)
    # ... but it alone at the new epoch confirms nothing for the master it no longer names
    why, stale = sentinel.doubt([master(), leader, master()], HOST, PORT)
    assert stale and "127.0.0.1:6380" in why
    # and for the old master it names, its flag says the failover is under way
    why, stale = sentinel.doubt([master(port=6380), leader, master(port=6380, epoch=1)], "127.0.0.1", 6380)
    assert stale and "failover_in_progress" in why


def test_a_failover_under_way_or_the_master_down_makes_it_stale():
    for flags in ("master,failover_in_progress", "master,s_down", "master,s_down,o_down"):
        why, stale = sentinel.doubt([master(), master(flags=flags), master()], HOST, PORT)
        assert stale and flags.split(",")[1] in why, (flags, why)
    # flags that say nothing about this master's standing do not count
    assert sentinel.doubt([master(flags="master,disconnected")] * 3, HOST, PORT) == ("", False)


def test_without_a_majority_of_answers_nothing_is_confirmed_nor_called_stale():
    down = ConnectionRefusedError("sentinel 2 is away")
    why, stale = sentinel.doubt([master(), down, down], HOST, PORT)
    assert why.startswith("only 1 of 3 sentinels answered") and "sentinel 2 is away" in why and not stale
    assert sentinel.doubt([master(), master(), down], HOST, PORT) == ("", False)
    assert sentinel.doubt([down, master()], HOST, PORT)[0].startswith("only 1 of 2")
