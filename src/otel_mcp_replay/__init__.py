"""otel-mcp-replay: an app-declared replay policy for MCP tool calls, and the record of every attempt."""
