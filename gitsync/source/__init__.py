"""Source: the config repo's remote → a local bare mirror → the files of one commit.

`mirror` keeps the mirror and reads commits from it (`read`: by difference from the last commit read;
`sizes`: object sizes from headers); `signatures` is the signature policy; `transport` is how gitsync
reaches a git remote (fetches and write-backs alike); `compat` fences every use of dulwich's private
API; `directory` reads a plain directory as a source; `inputs` the one-shot commands' commit.
"""
