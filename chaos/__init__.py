"""``python -m chaos``: a randomized, seeded, rerunnable fault run against a real fleet (issue 17).

A 3-member NATS cluster and three crewlet node processes with short test TTLs (the fleet tests'
harness, :class:`tests.fleet.harness.Fleet`, booted once per run), a steady workload of signed
GitHub deliveries (the real payloads of ``shared/data/github-webhooks``, new delivery ids, some
replayed), API messages to seats, tracker writes and knowledge page writes, and a nemesis that
injects one or two overlapping faults per round, chosen by a seeded random generator. Each round
ends healed and quiet, then the invariants are checked (:mod:`chaos._invariants`) and printed as a
table. The run writes one JSON file (seed, schedule, per-round findings, recovery latencies) and
prints ``rounds R, faults F, violations V``; a violation names the seed, the round and the command
that reruns that round alone. See ``chaos/README.md``.
"""
