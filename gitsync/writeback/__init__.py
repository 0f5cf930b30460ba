"""Write-back: tell git what happened — a status per agent, a note on a refused commit."""
