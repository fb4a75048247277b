"""The tool catalog and per-agent assembly (SPEC §8): catalog rows and their sync, role
assembly, custom tools, deferred tools and skills."""
