"""The testing wing: test doubles of the served APIs, scripted backends and contract suites. Nothing in the
product imports it (``tests/project/test_layers.py``); the tiny preset is product code in ``tiny/``. Import the
submodules directly: this file re-exports nothing."""
