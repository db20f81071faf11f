"""Environment families: one environment per member of a maintained third-party library
(`reasoning_gym/<dataset>`, `textarena/<game>`), registered through one factory entry point each.

A family module must be importable without its library: listing its members, their tools and
their availability never imports the library (start-up stays fast, and a missing library makes
the members unavailable with the install hint instead of an error). The library is imported on
first use: the first seed or the first `rollgate tasks`.
"""
