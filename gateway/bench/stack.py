"""`stack`: the user-space stack's slow path and bulk throughput (filled in with the stack)."""
