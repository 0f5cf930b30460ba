"""Write-back: tell git what happened — a status per agent, a note on a refused commit.

`wire` is the status file and the note as published; `statusfile` reads a status file as hostile
input; `trust` signs and verifies statuses; `notes` the notes ref; `remote` the work repo and its
compare-and-swap pushes; `publisher` (`WriteBack`) does it all in the background of a sync; `fleet`
reads every agent's status from the status refs.
"""
