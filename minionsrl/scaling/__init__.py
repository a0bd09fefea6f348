"""Scaling: how many actors each round gets.

``base``: the interface; ``rules``: the rule-based scalers (fixed, nitro, …); ``minions``: the learned scheduler.
"""
