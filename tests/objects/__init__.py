"""Tests of the object-store seam (ES-70..ES-74, FL-5) against real nats-server and SeaweedFS."""
