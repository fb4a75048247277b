"""Outbound network access for the web tools: the SSRF guard and the guarded HTTP client."""
