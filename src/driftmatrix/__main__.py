from driftmatrix.cli import main

main()
