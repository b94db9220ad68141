"""Sans-I/O protocol cores, one subpackage per protocol.

Nothing under ``proto`` touches sockets, clocks, threads, the OS or a global
random generator: time, randomness and nonces are arguments. See ``core`` for
the contract every protocol core follows. Beside it, the helpers every protocol
subpackage may import (the subpackages do not import each other): ``sealing``
(the sealed wire around any core), ``ratelimit`` (token buckets) and ``backoff``
(the retry schedule).
"""
