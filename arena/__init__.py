"""Runs matches between agents, records trajectories, and hosts the `arena` command line."""
