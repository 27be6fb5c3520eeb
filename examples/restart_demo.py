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
    args = sys.argv[1:]
    if args[:1] == ["run"] and len(args) == 2:
        trio.run(run, args[1])
    else:
        with tempfile.TemporaryDirectory(prefix="restart-demo-") as scratch:
            args = args[1:] if args[:1] == ["demo"] else args
            sys.exit(demo(args[0] if args else scratch))
