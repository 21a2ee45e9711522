"""Terminals and process attach with the sync client: the sync twins of
the asyncio tests (test_async.py, test_more.py, test_templates_admin.py),
and what the sync client's terminal thread owes: no thread or socket left
after close, typed errors, use from another thread."""
from __future__ import annotations

import asyncio
import os
import threading

import pytest

import berth


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_sync_pty_with_resize(sandbox):
    with sandbox.pty(["sh"], rows=24, cols=80) as t:
        t.send("stty size; echo mark-$((6*7))\n")
        out = t.read_until(b"mark-42", timeout=120)
        assert b"24 80" in out
        # A resize reaches the shell before the line typed after it (one
        # ordered stream to the agent).
        t.resize(40, 132)
        t.send("stty size; echo done-$((1000+1))\n")
        out = t.read_until(b"done-1001\r\n", timeout=120)
        assert b"40 132" in out
        t.send("exit 5\n")
        assert t.wait(timeout=120).code == 5
        assert t.exit is not None and t.exit.code == 5
        rest = b""
        while True:  # the echo of "exit 5", then the end
            chunk = t.recv(timeout=120)
            if not chunk:
                break
            rest += chunk
        assert b"exit 5" in rest
        assert t.recv() == b""  # the end, for every later read too


def test_sync_pty_input_echoed_and_stdin_eof(sandbox):
    with sandbox.pty(["sh", "-c", "cat > /tmp/typed; echo saved"], rows=10, cols=40) as t:
        t.send("typed text\n")
        t.read_until(b"typed text", timeout=120)  # the terminal echoes it
        t.send(b"\x04")  # ^D: end of input at the terminal
        t.read_until(b"saved", timeout=120)
        assert t.wait(timeout=120).code == 0
        with pytest.raises(berth.StreamError):
            t.send("too late\n")  # the session is over
    assert sandbox.files.read("/tmp/typed") == b"typed text\n"
    # Without a terminal the input is a pipe the client can close.
    with sandbox.pty(["cat"], tty=False) as t:
        t.send("piped")
        t.close_stdin()
        assert t.read_until(b"piped", timeout=120) == b"piped"
        assert t.wait(timeout=120).code == 0


def test_sync_pty_timeouts_lose_nothing(sandbox):
    with sandbox.pty(["sh", "-c", "read a; printf part-; read b; echo end-$b"], rows=10, cols=40, tty=False) as t:
        with pytest.raises(berth.RequestTimeout):
            t.recv(timeout=0.2)  # nothing typed yet: no output
        with pytest.raises(berth.RequestTimeout):
            t.wait(timeout=0.2)  # nor an exit
        t.send("1\n")
        # "part-" comes, "end-" cannot before the second line: the read
        # times out holding "part-", which the next read gets first.
        with pytest.raises(berth.RequestTimeout):
            t.read_until(b"end-", timeout=2)
        t.send("2\n")
        assert t.read_until(b"end-2\n", timeout=120) == b"part-end-2\n"
        assert t.wait(timeout=120).code == 0


def test_sync_attach_to_a_process(sandbox):
    p = sandbox.processes.start(["sh", "-c", "echo started; read line; echo got $line"])
    with sandbox.processes.attach(p.id) as t:
        assert b"started" in t.read_until(b"started\n", timeout=120)
        t.send("hello\n")
        assert b"got hello" in t.read_until(b"got hello\n", timeout=120)
        assert t.wait(timeout=120).code == 0
    assert sandbox.processes.wait(p.id).code == 0


def test_sync_attach_leaves_the_process_running(sandbox):
    p = sandbox.processes.start(["sh", "-c", "echo up; read line; echo after-$line"])
    with sandbox.processes.attach(p.id) as t:
        t.read_until(b"up\n", timeout=120)
    # Leaving the attach did not end the process: its stdin still works.
    sandbox.processes.stdin(p.id, "x\n")
    assert sandbox.processes.wait(p.id).code == 0
    assert b"after-x" in sandbox.processes.logs(p.id).stdout


def open_and_wait(session):
    """Opens a session and waits for its end: a refusal comes either as
    the upgrade's answer or as the session's error frame, typed both ways."""
    with session as t:
        return t.wait(timeout=120)


def test_sync_terminal_errors_are_typed(sandbox, client):
    with pytest.raises(berth.NotFoundError) as ei:
        open_and_wait(sandbox.processes.attach("no-such-process"))
    assert ei.value.code == "not_found"
    gone = client.sandboxes.create()
    gone.delete()
    with pytest.raises(berth.APIError) as ei:
        open_and_wait(gone.pty(["sh"]))
    assert type(ei.value) in (berth.NotFoundError, berth.ConflictError), repr(ei.value)
    # No daemon at the other end.
    with berth.Client("unix:///nonexistent/berth.sock") as c:
        with pytest.raises(berth.ConnectError):
            with berth.Sandbox(c, sandbox.info).pty(["sh"]):
                pass


def test_sync_pty_from_other_threads(client, sandbox):
    """A session opened in one thread is typed into from a second and read
    from a third; the client was made in the main thread."""
    got, errs = [], []
    box = {}

    def opener():
        try:
            box["t"] = sandbox.pty(["sh"], rows=10, cols=40).__enter__()
        except BaseException as e:  # noqa: B902 (handed to the main thread)
            errs.append(e)

    def reader():
        try:
            got.append(box["t"].read_until(b"from-thread-3", timeout=120))
        except BaseException as e:  # noqa: B902
            errs.append(e)

    th = threading.Thread(target=opener)
    th.start()
    th.join()
    assert not errs
    t = box["t"]
    try:
        rd = threading.Thread(target=reader)
        rd.start()
        wr = threading.Thread(target=lambda: t.send("echo from-thread-$((1+2))\n"))
        wr.start()
        wr.join()
        rd.join()
        assert not errs and b"from-thread-3" in got[0]
    finally:
        t.close()


def test_sync_pty_cleanup_on_exception_leaves_no_thread_or_socket(host):
    threads, fds = threading.active_count(), open_fds()
    with berth.Client() as c:
        sb = c.sandboxes.create()
        try:
            with pytest.raises(ValueError):
                with sb.pty(["sh"]) as t:
                    t.send("echo in-$((2*3))\n")
                    t.read_until(b"in-6", timeout=120)
                    assert threading.active_count() == threads + 1  # the client's terminal thread
                    raise ValueError("inside")
            with pytest.raises(berth.StreamError):
                t.send("echo\n")  # closed by the with
            # A session left open is closed with its client.
            left = sb.pty(["sh"]).__enter__()
            left.send("echo open-$((3*3))\n")
            left.read_until(b"open-9", timeout=120)
        finally:
            sb.delete()
    with pytest.raises(berth.StreamError):
        left.send("echo\n")
    # A reader gets what was left unread, then the end.
    for _ in range(100):
        if left.recv(timeout=120) == b"":
            break
    else:
        raise AssertionError("the closed session's reader never saw the end")
    assert threading.active_count() == threads
    assert open_fds() == fds
    # A closed client opens no session (nor a thread).
    with pytest.raises(berth.StreamError):
        with sb.pty(["sh"]):
            pass
    assert threading.active_count() == threads


async def test_async_terminal_errors_are_typed(aclient):
    async with await aclient.sandboxes.create() as sb:
        with pytest.raises(berth.NotFoundError):
            async with sb.processes.attach("no-such-process") as t:
                await asyncio.wait_for(t.wait(), 120)


def test_sync_client_close_ends_a_blocked_wait(host):
    """A thread blocked in wait() when another thread closes the client
    gets StreamError, not a hang nor an asyncio error."""
    threads = threading.active_count()
    errs = []
    with berth.Client() as c:
        sb = c.sandboxes.create()
        try:
            t = sb.pty(["sh"]).__enter__()
            t.send("echo ready-$((4+4))\n")
            t.read_until(b"ready-8", timeout=120)

            def waiter():
                try:
                    t.wait()
                except BaseException as e:  # noqa: B902 (handed to the main thread)
                    errs.append(e)

            w = threading.Thread(target=waiter)
            w.start()
            c._terminals.close()  # what Client.close() does first
            w.join()
        finally:
            sb.delete()
    assert len(errs) == 1 and isinstance(errs[0], berth.StreamError), errs
    assert threading.active_count() == threads
