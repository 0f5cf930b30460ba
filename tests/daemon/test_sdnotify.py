from __future__ import annotations

import os
import socket

from gitsync.daemon.sdnotify import Notifier
from gitsync.log import register_secret


def _socket(tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(2)
    return sock, path


def test_messages_arrive_on_the_socket(tmp_path):
    sock, path = _socket(tmp_path)
    with sock:
        n = Notifier(path)
        assert n.ready("applied abc1234")
        assert sock.recv(4096) == b"READY=1\nSTATUS=applied abc1234"
        register_secret("sekrit-token-1")
        n.status("failed: bad token sekrit-token-1\nsecond line")
        assert sock.recv(4096) == b"STATUS=failed: bad token *** second line"
        n.watchdog()
        assert sock.recv(4096) == b"WATCHDOG=1"


def test_abstract_socket(tmp_path):
    name = f"gitsync-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(2)
        Notifier("@" + name).stopping()
        assert sock.recv(100) == b"STOPPING=1"


def test_no_socket_is_a_no_op(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    n = Notifier()
    assert not n.enabled and n.ready() is False


def test_watchdog_interval(monkeypatch):
    monkeypatch.setenv("WATCHDOG_USEC", "60000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert Notifier("").watchdog_interval() == 30.0
    monkeypatch.setenv("WATCHDOG_PID", "1")
    assert Notifier("").watchdog_interval() is None
