"""armor.watchdog's decision on hand-made progress records: when a run has stalled and which rank is
stuck."""
from armor.watchdog import diagnose


def rec(rank, count, waiting, t, where="all_gather_object", step=3):
    return {"rank": rank, "count": count, "where": where, "step": step, "waiting": waiting, "time": t,
            "longest_step_s": 10.0}


def test_no_stall_while_some_rank_advanced_within_the_limit():
    records = [rec(0, 100, True, 1000.0), rec(1, 99, False, 1050.0)]
    assert diagnose(records, 2, now=1050.0 + 30.0, stall_s=30.0) is None      # 30 s: not more than 30


def test_the_rank_behind_the_others_is_named():
    """Ranks 0 and 2 wait at mark 100; rank 1 never got past mark 99: it is the stuck one."""
    records = [rec(0, 100, True, 1000.0), rec(1, 99, False, 990.0, where="forward of model 0"),
               rec(2, 100, True, 1001.0)]
    msg = diagnose(records, 3, now=1001.0 + 31.0, stall_s=30.0)
    assert msg.startswith("stall: no rank has advanced for 31 s") and "= 30 s" in msg
    assert "rank 1 is stuck: step 4, after forward of model 0 (mark 99)" in msg
    assert "the other ranks got further (rank 0: step 4, waiting at all_gather_object (mark 100)" in msg


def test_among_equal_counts_the_rank_not_waiting_is_named():
    records = [rec(0, 50, True, 100.0), rec(1, 50, False, 100.0, where="barrier")]
    msg = diagnose(records, 2, now=200.0, stall_s=60.0)
    assert "rank 1 is stuck: step 4, after barrier (mark 50)" in msg


def test_every_rank_at_the_same_point_and_a_rank_without_a_file():
    same = [rec(0, 7, True, 0.0), rec(1, 7, True, 0.0)]
    assert "every rank is at the same point" in diagnose(same, 2, now=100.0, stall_s=10.0)
    assert "rank(s) 2 never reported" in diagnose(same, 3, now=100.0, stall_s=10.0)
    assert diagnose([], 2, now=100.0, stall_s=10.0) is None
