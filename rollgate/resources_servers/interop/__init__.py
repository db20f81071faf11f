"""Other projects' protocols, both ways (docs/interop.md). Every module here imports its
third-party SDK lazily: nothing of it is loaded on Rollgate's start-up path."""
