"""Replaying what a schedule missed: the plan, the replay, the audit and their time windows."""
