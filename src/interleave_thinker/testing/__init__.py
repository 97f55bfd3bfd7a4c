"""The testing wing: the tiny models and their format training, test doubles of the served APIs, scripted
backends and contract suites. Nothing in the product imports it; the package root registers its ``tiny`` backend
kind (see docs/architecture.md). Import the submodules directly: this file re-exports nothing."""
