"""`python -m gateway.cli`: the `wsgw` command without the console script."""

from gateway.cli import main

main()
