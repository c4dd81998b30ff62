from aisite.cli import main

main()
