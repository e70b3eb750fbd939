"""The protocol state machines (smoltcp's socket/ and iface/): ARP, IPv4, ICMP and TCP, sans-IO."""
