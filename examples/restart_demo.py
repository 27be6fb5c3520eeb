"""Kill a running process with SIGKILL, start it again, and watch it resume.

A counter process runs six steps with a durable ``ctx.sleep`` between them;
each step prints its idempotency key (``actors.current_step().key``).

    python examples/restart_demo.py [demo] [JOURNAL_DIR]
        runs the ``run`` mode below as a subprocess, kills it with SIGKILL
        during the sleep after step 3, runs it again, and shows that it
        resumes at step 4: steps already recorded are not run again.
    python examples/restart_demo.py run JOURNAL_DIR
        starts the counter (idempotently: it resumes one found in the
        journal) and waits for its result, printing progress.
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile

import trio

import actors
from actors import Context, process
from storage import LMDBJournal

STEPS, PAUSE = 6, 0.4


def tick(n: int) -> int:
    step = actors.current_step()
    print(f"step {n} ran: key {step.key} attempt {step.attempt}", flush=True)
    return n


@process("counters/:name")
async def counter(ctx: Context, name: str, *, steps: int, pause: float) -> int:
    total = 0
    for n in range(1, steps + 1):
        total += await ctx.step(tick, n)
        await ctx.publish({"done": n})
        await ctx.sleep(pause)
    return total


async def run(path: str) -> None:
    pid = os.getpid()
    async with actors.open_system(LMDBJournal(path), processes=[counter]) as system:
        found = system.get("counters/demo")
        if found is None:
            print(f"pid {pid}: starting counters/demo")
        else:  # opening the system already resumed it, by replay
            print(f"pid {pid}: found counters/demo {found.status} in the journal")
        handle = await system.start(counter, "demo", steps=STEPS, pause=PAUSE)  # idempotent
        async for progress in handle.watch():  # published values; ends when it finishes
            print(f"pid {pid}: progress {progress}")
        print(f"pid {pid}: {handle.id} finished, total {await handle.result()}")


def keys(lines: list[str]) -> list[str]:
    return [line.split(" key ")[1].split()[0] for line in lines if line.startswith("step ")]


def demo(path: str) -> int:
    command = [sys.executable, "-u", __file__, "run", path]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    before = []
    for line in first.stdout:
        print(f"  [first run]  {line.rstrip()}")
        before.append(line)
        if line.endswith("progress {'done': 3}\n"):  # step 3 is recorded; now it sleeps
            os.kill(first.pid, signal.SIGKILL)
            break
    else:
        first.wait()
        print("the first run was not killed: the counter in this journal is already finished")
        return 0
    first.wait()
    print(f"killed pid {first.pid} with SIGKILL (exit status {first.returncode}); starting again")
    second = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=60, check=True)
    after = second.stdout.splitlines()
    for line in after:
        print(f"  [second run] {line}")
    again = set(keys(before)) & set(keys(after))
    print(f"steps run before the kill:  {keys(before)}")
    print(f"steps run after the restart: {keys(after)}")
    print(f"steps run twice: {sorted(again) or 'none'}")
    return 1 if again else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [-h] [demo] [JOURNAL_DIR] | %(prog)s run JOURNAL_DIR",
    )
    parser.add_argument(
        "words",
        nargs="*",
        metavar="[demo|run] JOURNAL_DIR",
        help="the mode (demo by default) and a journal directory "
        "(for demo, a temporary one by default)",
    )
    words = parser.parse_args().words
    if words[:1] == ["run"]:
        if len(words) != 2:
            parser.error("run takes one JOURNAL_DIR")
        trio.run(run, words[1])
    else:
        words = words[1:] if words[:1] == ["demo"] else words
        if len(words) > 1:
            parser.error(f"unexpected arguments: {' '.join(words[1:])}")
        with tempfile.TemporaryDirectory(prefix="restart-demo-") as scratch:
            sys.exit(demo(words[0] if words else scratch))
