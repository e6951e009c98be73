from driftmatrix.runtime.warmstart import main

main()
