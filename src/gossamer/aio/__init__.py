"""asyncio drivers: the only code that touches sockets, the event loop and real time."""
