"""ISIS total-order multicast over UDP with retransmission (sans-I/O)."""
