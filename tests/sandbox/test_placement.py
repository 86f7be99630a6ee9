"""Which CPU each GPU times on (sandbox/placement.py): the plan `./kw run` and the pool bench apply."""

from __future__ import annotations

from sandbox.placement import format_cpulist, parse_cpulist, timing_plan, window_cpu_for


def test_cpulists_round_trip():
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert format_cpulist({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert format_cpulist(set()) == ""


def test_each_gpu_gets_the_highest_free_cpu_near_it_and_nothing_else_runs_there():
    near = {"0": set(range(0, 16)), "1": set(range(16, 32))}
    plan = timing_plan(["0", "1"], available=set(range(32)), local=near.get)
    assert plan.timing_cpu == {"0": 15, "1": 31}
    assert plan.others == set(range(32)) - {15, 31}
    assert "GPU 0 -> CPU 15" in plan.describe() and "0-14,16-30" in plan.describe()


def test_gpus_on_one_node_or_of_unknown_locality_get_distinct_cpus():
    plan = timing_plan(["0", "1"], available=set(range(8)), local=lambda gpu: {0, 1, 2, 3, 4, 5, 6, 7})
    assert plan.timing_cpu == {"0": 7, "1": 6}
    plan = timing_plan(["2", "3"], available={0, 1, 2, 5}, local=lambda gpu: None)
    assert plan.timing_cpu == {"2": 5, "3": 2} and plan.others == {0, 1}


def test_a_gpu_whose_local_cpus_are_taken_or_unavailable_gets_another_free_one():
    plan = timing_plan(["0", "1"], available=set(range(6)), local=lambda gpu: {5, 40})
    assert plan.timing_cpu == {"0": 5, "1": 4}


def test_a_host_with_too_few_cpus_is_not_pinned():
    assert timing_plan(["0"], available={0, 1}, local=lambda gpu: None) is None  # 2 CPUs: both stay shared
    assert timing_plan(["0"], available={0, 1, 2}, local=lambda gpu: None).timing_cpu == {"0": 2}
    assert timing_plan([], available=set(range(8))) is None


def test_each_gpus_windows_get_one_cpu_of_their_own_counted_down_from_the_top():
    gpus = ["GPU-bbbb", "GPU-aaaa", "GPU-cccc"]
    cpus = set(range(16))
    assert window_cpu_for("aaaa", gpus, cpus) == 15 and window_cpu_for("GPU-bbbb", gpus, cpus) == 14
    assert window_cpu_for("cccc", gpus, cpus) == 13
    assert window_cpu_for("", gpus, cpus) == 15  # an unknown device: the first place
    assert window_cpu_for("cccc", gpus, {0, 1, 2, 3}) is None  # too few CPUs to spare one per GPU
