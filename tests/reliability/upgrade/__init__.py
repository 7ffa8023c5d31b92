"""An app whose only content is one additive migration, for
tests/reliability/test_rolling_upgrade.py to apply while the control plane
runs: the kind of migration deploy/rolling-upgrade.sh runs before it
restarts anything (a new table, a new nullable column and an index on the
table every heartbeat writes), applied with the old code still running."""
