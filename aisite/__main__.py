"""`python -m aisite`: the command (aisite.entry)."""

from aisite.entry import main

main()
