"""Test helpers shipped with the library: the store conformance suite, scripted policies, and
hostile (oversized, deeply nested) arguments for fuzzing.

Importing this package needs pytest only for `conformance`.
"""
