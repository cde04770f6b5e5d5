"""The router's shell: everything that does I/O around the core. service.py consumes the
ingress and the step results, loads the session, calls `decide` (core/decide.py), commits
and performs the effects; the other modules are its lookups, its publishing, its timers
and its reads of Redis, JetStream and the file system."""
