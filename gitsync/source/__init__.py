"""Source: the config repo's remote → a local bare mirror → the files of one commit.

`mirror` keeps the mirror and reads commits from it; `transport` is how gitsync reaches a git
remote (fetches and write-backs alike); `compat` fences every use of dulwich's private API.
"""
