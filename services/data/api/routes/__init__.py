"""No routes: the data role answers the router over NATS, not HTTP."""
