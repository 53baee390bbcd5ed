"""The test and demo harness: a fault-injecting MCP server, a cutting TCP proxy, an OTLP receiver, the demo.

Not part of the installed package: it lives beside `src/`, importable from the repository's root
(pytest's `pythonpath`, `python -m benchmarks`, `python -m harness.run`), and needs the `demo`
extra (uvicorn, opentelemetry-proto, ...). The server, faults and proxy stand for the outside world
and never import the plugin; the receiver reads the plugin's telemetry names and `run` drives the
plugin the way a user does.
"""
