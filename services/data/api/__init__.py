"""The data role's HTTP surface: none; ingress serves the estate routes (FL-16)."""
