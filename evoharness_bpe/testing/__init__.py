"""Test helpers shipped with the library: the store conformance suite and scripted policies.

Importing this package needs pytest only for `conformance`.
"""
