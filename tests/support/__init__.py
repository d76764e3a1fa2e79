"""Helpers shared by the integration tests, the fault suite and the soak (the fault suite's own
in `faults/`); the benchmarks use its Postgres wire proxy (`pgwire.py`) too.

Test modules import helpers from here, never from one another or from a conftest: a test module
imported for a helper drags its fixtures and its `pytestmark` along, and its helpers change with
its tests. Fixtures live here too (`fixtures.py`); a conftest registers them by importing them.
tests/unit/test_layout.py holds every module to that.
"""
