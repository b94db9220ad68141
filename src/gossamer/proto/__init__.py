"""Sans-I/O protocol cores, one subpackage per protocol.

Nothing under ``proto`` touches sockets, clocks, threads, the OS or a global
random generator: time, randomness and nonces are arguments. See ``core`` for
the contract every protocol core follows.
"""
