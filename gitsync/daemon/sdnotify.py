"""systemd's sd_notify protocol, spoken directly: one datagram to $NOTIFY_SOCKET.

Without $NOTIFY_SOCKET (not under systemd, or Type=simple) every call is a no-op.
"""

from __future__ import annotations

import os
import socket

from gitsync.log import logger, redact


class Notifier:
    """Send READY=1, WATCHDOG=1, STATUS=..., STOPPING=1 to systemd."""

    def __init__(self, address: str | None = None) -> None:
        address = os.environ.get("NOTIFY_SOCKET") if address is None else address
        self.address: str | None = None
        if address:
            # A leading "@" names a socket in the abstract namespace.
            self.address = "\0" + address[1:] if address.startswith("@") else address

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def watchdog_interval(self) -> float | None:
        """Half of systemd's WatchdogSec (seconds), when the watchdog is on for this process."""
        usec = os.environ.get("WATCHDOG_USEC")
        pid = os.environ.get("WATCHDOG_PID")
        if not usec or (pid and pid != str(os.getpid())):
            return None
        try:
            return int(usec) / 1e6 / 2
        except ValueError:
            return None

    def notify(self, *fields: str) -> bool:
        if self.address is None:
            return False
        message = "\n".join(redact(f).replace("\n", " ") for f in fields).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(message, self.address)
            return True
        except OSError as exc:
            logger.warning("sd_notify to {} failed: {}", self.address.lstrip("\0"), exc)
            return False

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1", f"STATUS={status}") if status else self.notify("READY=1")

    def status(self, status: str) -> bool:
        return self.notify(f"STATUS={status}")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")
