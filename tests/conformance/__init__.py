"""The store contract, run unchanged against every backend (see test_store_contract.py)."""
