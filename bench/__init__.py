"""Benchmarks: throughput and latency, side by side with baselines and targets.

``python -m bench`` runs every registered suite but ``postgres`` and
``peers`` in about a minute (3 samples of 0.3 s per figure, smaller N);
``python -m bench journal`` runs one suite; ``python -m bench peers`` runs
ours beside DBOS Transact (the ``peers`` extra); ``--full`` is the long run
(5 samples of 1 s, the largest N); ``--json PATH`` also writes the results,
targets and verdicts for machines; ``--plot PATH`` draws a chart (needs
matplotlib). ``python -m bench soak --minutes N`` is a run of its own
(`bench.soak`): a mixed load sampled over time, judged on whether memory,
latency and descriptors stay flat. Suites are modules that register themselves with
`bench._registry.suite`; the table (`bench._table`) and the chart
(`bench._plot`) are shared.

Every figure is printed with its unit, its ratio to its baseline, its
target and verdict, and under it a line saying what it is for a user. The
verdict is "met", "MISSED", or "noisy: rerun": the last when the figure's
samples or its target baseline's spread more than 2x (a busy machine), or
when its ratio beats the work it contains (`bench._registry.contains`: a
durable send faster than the synced commit it waits for). A noisy run is
never "met". Benchmarks report, they never assert: a missed target is a
line in the table, not a failed run.

A figure declares its target where it is declared, in one line::

    Measurement("ask round trip", "round trips/s", ask_rate,
                target=at_least(0.5, "trio ping-pong"))
    Measurement("send->resumed p99", "µs", p99, target=at_most(3, "raw-commit"))
    Measurement("100,000 passivated: RSS", "MB", rss, target=at_most(100))
    Measurement("send->resumed p50", "µs", p50, target=at_most(1.3, "raw-commit"),
                meaning="one message to a waiting process, send until it has it",
                floor=contains("raw-commit", "a durable send waits for one synced commit"))

`at_least` is for rates (more is better), `at_most` for latency and memory
(less is better); the second argument names the baseline, another
measurement of the same suite, and the target is a bound on the ratio to it,
measured round by round in the same run. With no baseline the bound is on
the value itself, in the figure's unit. The target's baseline is measured
whether or not it is listed in ``baselines``; a name that is no measurement
of the suite is refused when the suite runs.
"""
