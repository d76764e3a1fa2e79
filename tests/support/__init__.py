"""Helpers shared by the integration tests, the fault suite and the soak.

Test modules import helpers from here, never from one another: a test module imported for a
helper drags its fixtures and its `pytestmark` along, and its helpers change with its tests.
"""
