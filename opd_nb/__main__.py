from opd_nb.cli import main

main()
