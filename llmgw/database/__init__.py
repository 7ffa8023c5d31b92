"""The PostgreSQL backend llmgw runs on: Django's, with a deadline on
every round trip (llmgw.database.deadline says why)."""
