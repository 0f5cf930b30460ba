"""The command line: the parser over the settings table, the commands, and `gitsync demo`."""
