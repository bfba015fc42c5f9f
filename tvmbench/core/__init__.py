"""The neutral core: records passed between stages, the one error summariser, the board-health rule.

db/, workers/, orchestrator/ and tvmbench/answers/ all import this package; it imports none of them.
"""
