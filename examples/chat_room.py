"""A long-lived chat room actor, and stream consumers that reconnect at their cursor.

The room takes join/say/leave/close signals in a receive loop, emits each
event to its stream, publishes its member list as exports, and continues as
new every few events so its replay log stays short however long it lives.
Two consumers read the stream: "archive" reads each event live as it is
emitted; "phone" reads three events, disconnects, and on reconnecting
continues right after the last event it consumed (its cursor is in the
journal, so this works across restarts of the program too).

Run:  python examples/chat_room.py [JOURNAL_DIR]   (a temporary journal by default)
"""

import argparse
import tempfile

import trio

import actors
from actors import Context, Signal, process
from storage import LMDBJournal

join, say, leave, close = Signal("join"), Signal("say"), Signal("leave"), Signal("close")


@process("rooms/:room")
async def room(ctx: Context, room: str, *, members: list, seen: int = 0, every: int = 4) -> int:
    while True:
        signal, payload = await ctx.receive(join, say, leave, close)
        if signal == close:
            return seen
        if signal == join:
            members = sorted({*members, payload["user"]})
        elif signal == leave:
            members = [m for m in members if m != payload["user"]]
        seen += 1
        await ctx.emit({"n": seen, "run": ctx.run, "event": signal.name, **payload})
        if signal != say:
            await ctx.publish({"members": members})
        if seen % every == 0:  # a fresh run: the log restarts, the stream carries on
            await ctx.continue_as_new(members=members, seen=seen, every=every)


def show(event: dict) -> str:
    text = f": {event['text']}" if "text" in event else ""
    return f"#{event['n']} (run {event['run']}) {event['user']} {event['event']}{text}"


async def archive(system: actors.ActorSystem, address: str) -> None:
    """A live consumer: reads each event as it is emitted, until the room closes."""
    numbers = []
    async with system.stream(address, consumer="archive") as stream:
        async for event in stream:  # ends once the room is closed and drained
            numbers.append(event["n"])
    print(f"archive read every event live: {numbers}")


async def main(path: str) -> None:
    async with actors.open_system(LMDBJournal(path), processes=[room]) as system:
        lobby = await system.start(room, "lobby", members=[])  # idempotent
        if lobby.status == "completed":
            print(f"the lobby in {path} was closed by an earlier run; use a fresh directory")
            return
        talk = [
            (join, {"user": "ann"}),
            (join, {"user": "bob"}),
            (say, {"user": "ann", "text": "hi bob"}),
            (say, {"user": "bob", "text": "hi!"}),
            (join, {"user": "cy"}),
            (say, {"user": "cy", "text": "what did I miss?"}),
            (leave, {"user": "bob"}),
            (say, {"user": "ann", "text": "bye bob"}),
        ]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(archive, system, lobby.id)
            for signal, payload in talk:
                await system.send(lobby.id, signal, payload)

            print("phone connects, reads three events and disconnects")
            async with system.stream(lobby.id, consumer="phone") as stream:
                async for event in stream:
                    print(f"  phone: {show(event)}")
                    if event["n"] == 3:
                        break  # the event in hand counts as consumed
            await system.send(lobby.id, close)
            print("phone reconnects and continues from its cursor")
            async with system.stream(lobby.id, consumer="phone") as stream:
                async for event in stream:
                    print(f"  phone: {show(event)}")
        print(f"room closed after {await lobby.result()} events; exports {lobby.exports}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "journal",
        nargs="?",
        help="a journal directory (default: a temporary one, removed at the end)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chat-room-") as scratch:
        trio.run(main, args.journal or scratch)
