"""The randomized soak (`make soak`): schedules, workers and faults together, for minutes.

Each fault of the fault suite is proven alone; the soak mixes them, at random but from a
printed seed, to find the seams where two features meet and a fire is lost without a trace.
"""
