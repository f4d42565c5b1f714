"""Shared fixtures: a PostgreSQL server for the Postgres backend's tests.

`.ci/run` starts a real server on loopback and exports its DSN as
``EVOHARNESS_TEST_POSTGRES_DSN`` together with ``EVOHARNESS_REQUIRE_POSTGRES=1``, which turns a
missing server into a failure instead of a skip. Locally: ``scripts/postgres-test-server start
/tmp/pg`` prints a DSN to export.
"""

from __future__ import annotations

import os
import uuid

import pytest


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    dsn = os.environ.get("EVOHARNESS_TEST_POSTGRES_DSN")
    if not dsn:
        if os.environ.get("EVOHARNESS_REQUIRE_POSTGRES") == "1":
            pytest.fail("EVOHARNESS_REQUIRE_POSTGRES=1 but EVOHARNESS_TEST_POSTGRES_DSN is not set")
        pytest.skip("no PostgreSQL server: set EVOHARNESS_TEST_POSTGRES_DSN (see scripts/postgres-test-server)")
    return dsn


@pytest.fixture
def postgres_table() -> str:
    """A fresh table name per test, so tests never see each other's rows."""
    return "exp_" + uuid.uuid4().hex[:12]

