"""Wire formats: parse and emit, no state (smoltcp's wire/). Untrusted bytes in, typed
representations out, or a `WireError`."""
