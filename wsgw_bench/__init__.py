"""`wsgw bench`: contenders measured side by side in one run, reported as ratios.

These machines are shared and noisy, so a figure alone means little: every scenario runs
each contender against the same peer in the same run, alternating, several repetitions,
and the report gives the median, the spread (min-max) and the ratio to the reference
contender (the best kernel-side alternative). Conditions are printed with the numbers.

The package also holds what both the tests and the benchmarks start: `servers` (uvicorn in
a thread, nats-server, free ports), `peer_server` (a kernel TCP peer) and the C peers in
`peer/`. It lives in the source checkout only: the wsgw wheel leaves it out, and nothing in
gateway/, dataplane/ or api/ imports it but the CLI's optional `bench` command.
"""
