"""The deterministic simulation of the runtime (#28).

    python -m tests.simulation --seed N [--nodes K] [--trace]
    python -m tests.simulation --seeds A-B [--jobs J]

A seed fixes everything: the workload (sinks, messages sent, keyed and
asked, jobs with steps, timers, children, races of a poke against a timer,
durable sends and asks between processes, compensations, supervised kids
under each strategy, cancels, a queue, clock jumps), the journal's faults
(`storage.JournalFaults`: slow, full and failed commits, lost connections,
outcomes unknown, outages), where the host crashes, trio's scheduling
order and the virtual clock. `actors.testing.simulate` runs it; the
checker (`checks`) then compares the journal with what the clients were
told and what the step functions really did (`world`).

The last line is ``seed N ok <digest>`` (exit status 0), the digest being
that of every journal write of the run, or ``seed N FAILED <invariant>``
(exit status 1) after the failure's trace. Seeds that found a bug are kept
in ``seeds.txt`` and run by tests/whole/test_simulation.py.
"""

from .run import Outcome, run_seed

__all__ = ["Outcome", "run_seed"]
