"""`python -m gateway.simulator ...`: the same as `wsgw simulate ...`."""

from gateway.simulator.cli import main

main()
