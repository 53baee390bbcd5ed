"""The mcp SDK's own test suite run plain and under the plugin, as a compatibility gate (see run.py)."""
