"""The node daemon, ``gossamer node`` (``docs/node.md``): one member of a gossamer cluster
that serves applications and runs no workload of its own. ``config`` reads its TOML,
``run`` composes the services (``run_daemon``), ``process`` holds what every
long-running gossamer process does alike, and ``tables`` and ``protocols`` are the one
TOML reader and protocol-section mapping, shared with the lab app (``gossamer.lab``)."""
