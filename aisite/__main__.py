from aisite.entry import main

main()
