"""The evaluation lab: environments, policies, the episode runner, framework runners and the CLI.

The core (`evoharness_bpe`) never imports this package; it builds on the core.
"""
