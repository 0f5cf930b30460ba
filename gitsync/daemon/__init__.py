"""The daemon (`gitsync run`): the worker and its scheduler, the HTTP listener, systemd's notify."""
