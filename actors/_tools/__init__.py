"""The tools: the command line, the web inspector, the admin API they go through, history files, the simulation.

Outside an application's own code: they reach the runtime through
`_admin` only (a test in tests/project/test_structure.py keeps it so).
"""
