"""Real parts for tests and the demo: a fault-injecting MCP server, a cutting TCP proxy, an OTLP receiver.

Independent of the plugin (nothing here imports it): they stand for the outside world.
"""
