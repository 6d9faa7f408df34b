"""Data the project makes itself for the smoke profile and the tests (never copied from a dataset).

`corpus`: English-like stories for pre-training; `tasks`: every registered dataset's splits in the hub's exact
schema. Both are deterministic in their seed.
"""
