"""Test support: real servers and node processes on loopback, stopped by PID."""
