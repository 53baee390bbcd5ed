"""What this instrumentation instruments: the auto-instrumentation dependency check reads it."""

# mcp 1.x runs on httpx, 2.x on httpx2: lines.py says what differs; the suites run on both.
_instruments = ("mcp >= 1.24, < 3",)
_supports_metrics = True
