"""Talking to a gateway from outside: the REST client and the `collect` driver."""
