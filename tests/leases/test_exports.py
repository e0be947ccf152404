"""The leases seam's public API is pinned (STYLE.md "Modules and names")."""

import shared.leases


def test_public_api() -> None:
    assert sorted(shared.leases.__all__) == sorted(
        [
            "CAS_ROUNDS", "FENCED_REASONS", "VOLUNTARY_REASONS", "ClaimAll", "EpochRecord", "Grant",
            "LeaseContention", "LeaseError", "LeaseRecord", "Ledger", "PlacementPolicy", "Plan", "Presence",
            "ReleaseReason", "SeatHost", "SeatLease", "SeatLeases", "check_epoch", "current_epoch", "fleet_view",
            "key_of", "live_data_nodes", "read_epoch", "resource_of", "FairShare", "Selector", "RoleWatch",
            "MAX_CLAIMS_PER_SWEEP", "MAX_RELEASES_PER_SWEEP", "DUTY_TTLS", "Duties", "DutyTTLTooLong",
        ]
    )  # fmt: skip
    for name in shared.leases.__all__:
        assert hasattr(shared.leases, name)
