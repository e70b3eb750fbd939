"""`wsgw bench`: contenders measured side by side in one run, reported as ratios.

These machines are shared and noisy, so a figure alone means little: every scenario runs
each contender against the same peer in the same run, alternating, several repetitions,
and the report gives the median, the spread (min-max) and the ratio to the reference
contender (the best kernel-side alternative). Conditions are printed with the numbers.
"""
