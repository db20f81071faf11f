"""Helpers for Rollgate's own tests and benchmarks (real server and Redis processes on loopback);
not part of the installed package."""
