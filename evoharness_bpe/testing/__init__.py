"""Test helpers shipped with the library: the store conformance suite, a deterministic embedder
for hybrid recall (`embedders.KeywordEmbedder`), scripted policies, and hostile (oversized,
deeply nested) arguments for fuzzing.

Importing this package needs pytest only for `conformance`.
"""
