"""What this instrumentation instruments: the auto-instrumentation dependency check reads it."""

_instruments = ("mcp >= 2.3, < 3",)
_supports_metrics = True
