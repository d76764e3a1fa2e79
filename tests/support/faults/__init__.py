"""Helpers of the fault suite (tests/faults) and the soak (tests/soak): the worker subprocess
and the modules it loads to misbehave, the proxy that cuts its commit, and the tally of what
each fault left."""
