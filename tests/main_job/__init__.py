"""Issue 4's "Done when" on running node processes: the golden path, the provider wires, bad
input, drain and kill -9 mid-turn (embedded broker, real estate, loopback OTLP receiver)."""
