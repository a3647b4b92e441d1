"""Adapters that plug turnstore into agent frameworks' own session and memory interfaces.

Each module imports its framework, which is an optional extra; importing
:mod:`turnstore` imports none of them.
"""
